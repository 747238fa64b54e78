"""``PolicyClient``: a blocking WebSocket client for a relay (or openpi) policy server.

What the seed promises, and how this module keeps it:

- ``PolicyClient(model)`` reads ``WALLE_URL`` (environment, else the nearest
  ``.env``), fills ``{model}``, opens the WebSocket and blocks until the server's
  metadata frame arrives, with no timeout by default: a server that is loading
  its model answers only when ready. ``KeyError`` when ``WALLE_URL`` is unset;
  ``websockets.exceptions.InvalidStatus`` (e.g. HTTP 404), ``InvalidURI`` or
  ``OSError`` when the server cannot be reached, raised as they are.
- When the metadata offers ``direct_url`` and ``WALLE_DIRECT`` is unset or ``1``,
  the client opens the direct URL, reads its metadata and closes the proxied
  connection.
- ``infer`` returns the actions (π0/π0.5: a float32 ``(action_horizon, action_dim)``
  array; GR00T: a dict of float32 ``(1, action_horizon, k)`` arrays) as read-only
  views of the received bytes, or the server's ``{"type": "error", "message": str}``
  map without raising; the connection stays usable.
- After ``close()``, every call raises ``websockets.exceptions.ConnectionClosed``.

Why not ``websockets.sync.client``: its connection runs a background thread that
reads the socket and hands each message to the caller through a condition
variable. A policy client makes exactly one request at a time and waits for its
reply, so this module drives websockets' Sans-I/O ``ClientProtocol`` over a
blocking socket in the calling thread instead: no thread handoff per message, no
extra wake-up, and the same framing, handshake checks and exceptions as
websockets itself (see docs/client.md and docs/benchmarks.md for the
measurement). Between calls, a small keep-alive thread services the idle
socket every 0.5 s (answers pings and the server's closing handshake) so that an
idle client behaves like websockets' own; it never touches the socket while a
call is running, so replies never pass through it.
"""

from __future__ import annotations

import errno
import logging
import os
import secrets
import select
import socket
import ssl
import struct
import threading
import time
import weakref
from collections import deque
from types import TracebackType
from typing import Any

import numpy as np
from websockets.client import ClientProtocol
from websockets.exceptions import ConnectionClosed, ConnectionClosedOK
from websockets.frames import Close, CloseCode, Frame, Opcode
from websockets.http11 import Response
from websockets.protocol import State
from websockets.uri import WebSocketURI, parse_uri

from relay_ros import __version__
from relay_ros.wire.codec import packb, unpackb
from relay_ros.wire.env import check_model, direct_enabled, resolve_url

__all__ = ["PolicyClient", "PolicyServerError", "MAX_MESSAGE_BYTES"]

logger = logging.getLogger(__name__)

#: Largest reply accepted from the server, in bytes (replies are a few kB; GR00T
#: or custom ``--policy`` servers may send more).
MAX_MESSAGE_BYTES = 256 * 2**20

# Bytes read from the socket per recv() call. Below glibc's mmap threshold so
# that each read is a cheap heap allocation.
_RECV_BYTES = 64 * 1024
# While opening with a cancel event, blocking waits are cut into slices this long
# (seconds) so that cancellation is noticed promptly.
_CANCEL_POLL_S = 0.05
# How long close() waits for the server to answer the closing handshake, seconds.
_CLOSE_TIMEOUT_S = 2.0
# How often the keep-alive thread services an idle connection, seconds.
_KEEPALIVE_POLL_S = 0.5
_USER_AGENT = f"relay_ros/{__version__}"


class PolicyServerError(RuntimeError):
    """The server sent something the protocol does not allow (e.g. metadata that is
    not a map, an undecodable reply, or a refused control frame)."""


class _Cancelled(Exception):
    """Opening was cancelled through the cancel event (used by PolicyConnection)."""


class _Deadline:
    """Absolute deadline on the monotonic clock; ``None`` means no deadline."""

    def __init__(self, timeout: float | None) -> None:
        self._end = None if timeout is None else time.monotonic() + timeout
        self.timeout = timeout

    def remaining(self) -> float | None:
        if self._end is None:
            return None
        return self._end - time.monotonic()


class _Transport:
    """One WebSocket connection, driven by the calling thread.

    ``ClientProtocol`` does the HTTP upgrade, parses incoming frames, answers
    pings and runs the closing handshake; this class moves bytes between it and
    a blocking socket, and writes outgoing data frames itself with
    :class:`_FrameWriter`. Not thread-safe, except :meth:`abort`.
    """

    def __init__(self, url: str, *, deadline: _Deadline, cancel: threading.Event | None) -> None:
        self.url = url
        ws_uri = parse_uri(url)  # raises InvalidURI
        self._protocol = ClientProtocol(ws_uri, max_size=MAX_MESSAGE_BYTES)
        self._messages: deque[bytes | str] = deque()
        self._fragments: list[bytes] = []
        self._fragment_text = False
        self._response: Response | None = None
        self._writer = _FrameWriter()
        self._sock: socket.socket | None = None
        self._closed = False
        try:
            self._sock = _open_tcp(ws_uri, deadline, cancel)
            if ws_uri.secure:
                self._sock = _start_tls(self._sock, ws_uri, deadline, cancel)
            self._handshake(deadline, cancel)
        except BaseException:
            self._close_socket()
            raise

    # Opening.

    def _handshake(self, deadline: _Deadline, cancel: threading.Event | None) -> None:
        request = self._protocol.connect()
        request.headers["User-Agent"] = _USER_AGENT
        self._protocol.send_request(request)
        self._flush()
        while self._response is None:
            self._receive_some(deadline, cancel)
        if self._protocol.handshake_exc is not None:
            raise self._protocol.handshake_exc
        logger.debug("WebSocket open: %s", self.url)

    # Messages.

    def send(self, obj: Any) -> None:
        """Encode ``obj`` (codec format) and send it as one binary message.

        The frame is built by :class:`_FrameWriter` and written straight to the
        socket; ``ClientProtocol`` keeps no state about outgoing data frames, and
        every other write (pongs, close) goes through it on this same thread.

        Raises:
            relay_ros.wire.codec.CodecError: ``obj`` cannot be encoded (nothing was sent).
            ConnectionClosed: the connection is closed or broke while sending.
        """
        if self._protocol.state is not State.OPEN:
            raise self.closed_error()
        frame = self._writer.frame(obj)
        sock = self._sock
        if sock is None:
            raise self.closed_error()
        try:
            sock.sendall(frame)
        except (OSError, ssl.SSLError) as exc:
            logger.debug("send to %s failed: %s", self.url, exc)
            self._connection_lost()
            raise self.closed_error() from exc
        finally:
            frame.release()

    def recv(
        self, deadline: _Deadline | None = None, cancel: threading.Event | None = None
    ) -> bytes | str:
        """Return the next complete message, blocking until one arrives.

        Raises:
            ConnectionClosed: the connection closed before a message arrived.
            TimeoutError: ``deadline`` passed (opening only).
        """
        while not self._messages:
            self._receive_some(deadline, cancel)
        return self._messages.popleft()

    def poll(self) -> bool:
        """Process whatever has arrived without blocking (answers pings).

        Returns False when the connection is closed. Messages that arrive while
        no request is in flight are kept for the next :meth:`recv`.
        """
        if self._closed or self._sock is None:
            return False
        try:
            while self._readable_now():
                self._receive_some(None, None)
        except ConnectionClosed:
            return False
        return self._protocol.state is State.OPEN

    def discard_stale(self) -> None:
        """Drop messages that arrived while no request was in flight (a reply to a
        call that was interrupted), so that they are not taken for the next reply."""
        while self._messages:
            stale = self._messages.popleft()
            logger.warning(
                "discarding an unexpected message of %d bytes from %s", len(stale), self.url
            )

    def _readable_now(self) -> bool:
        sock = self._sock
        assert sock is not None
        if isinstance(sock, ssl.SSLSocket) and sock.pending():
            return True
        readable, _, _ = select.select([sock], [], [], 0)
        return bool(readable)

    def _receive_some(self, deadline: _Deadline | None, cancel: threading.Event | None) -> None:
        """Read once from the socket and turn the bytes into protocol events."""
        if self._closed or self._sock is None:
            raise self.closed_error()
        if deadline is not None or cancel is not None:
            _wait(self._sock, write=False, deadline=deadline, cancel=cancel, what=self.url)
        try:
            data = self._sock.recv(_RECV_BYTES)
        except (OSError, ssl.SSLError) as exc:
            logger.debug("receive from %s failed: %s", self.url, exc)
            self._connection_lost()
            raise self.closed_error() from exc
        if not data:
            self._connection_lost()
            if self._response is None and self._protocol.handshake_exc is not None:
                raise self._protocol.handshake_exc
            raise self.closed_error()
        self._protocol.receive_data(data)
        self._flush()
        for event in self._protocol.events_received():
            if isinstance(event, Frame):
                self._on_frame(event)
            elif isinstance(event, Response):
                self._response = event
        if self._protocol.state is State.CLOSING and self._protocol.close_rcvd is not None:
            # The server closed; the close frame reply went out in _flush().
            self._connection_lost()
        elif self._protocol.state is State.CLOSED:
            self._close_socket()
        if self._closed and not self._messages:
            # Messages that arrived before the close frame are still delivered.
            raise self.closed_error()

    def _on_frame(self, frame: Frame) -> None:
        opcode = frame.opcode
        if opcode is Opcode.BINARY or opcode is Opcode.TEXT:
            if frame.fin:
                data = bytes(frame.data)
                self._messages.append(data.decode() if opcode is Opcode.TEXT else data)
            else:
                self._fragments = [bytes(frame.data)]
                self._fragment_text = opcode is Opcode.TEXT
        elif opcode is Opcode.CONT:
            self._fragments.append(bytes(frame.data))
            if frame.fin:
                data = b"".join(self._fragments)
                self._fragments = []
                self._messages.append(data.decode() if self._fragment_text else data)
        # PING (the protocol queued the PONG), PONG and CLOSE need nothing here.

    def _flush(self) -> None:
        sock = self._sock
        if sock is None:
            return
        for chunk in self._protocol.data_to_send():
            try:
                if chunk:
                    sock.sendall(chunk)
                else:  # SEND_EOF: half-close
                    sock.shutdown(socket.SHUT_WR)
            except (OSError, ssl.SSLError) as exc:
                logger.debug("send to %s failed: %s", self.url, exc)
                self._connection_lost()
                raise self.closed_error() from exc

    # Closing.

    def closed_error(self) -> ConnectionClosed:
        """The exception every call raises once the connection is gone."""
        if self._protocol.state is State.CLOSED:
            return self._protocol.close_exc
        return ConnectionClosedOK(None, Close(CloseCode.NORMAL_CLOSURE, ""), None)

    def _connection_lost(self) -> None:
        self._protocol.receive_eof()  # state -> CLOSED, close_exc available
        self._close_socket()

    def _close_socket(self) -> None:
        self._closed = True
        sock, self._sock = self._sock, None
        if sock is not None:
            try:
                sock.close()
            except OSError:
                pass

    def abort(self) -> None:
        """Wake a call blocked on this connection from another thread.

        Shuts the socket down so that a blocked ``recv`` returns at once; the
        owning thread then sees the connection as closed.
        """
        sock = self._sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self) -> None:
        """Run the closing handshake (bounded by a short timeout) and close the socket."""
        if self._closed:
            return
        try:
            if self._protocol.state is State.OPEN:
                self._protocol.send_close(CloseCode.NORMAL_CLOSURE)
                self._flush()
                deadline = _Deadline(_CLOSE_TIMEOUT_S)
                # The server answers with its close frame, then closes TCP.
                while not self._closed:
                    self._receive_some(deadline, None)
        except (ConnectionClosed, TimeoutError, OSError):
            pass
        finally:
            if not self._closed:
                self._connection_lost()


# msgpack of the constant parts of an openpi array map (see relay_ros.wire.codec).
_NDARRAY_HEAD = b"\x84" + packb(b"__ndarray__") + packb(True) + packb(b"data")
_DTYPE_KEY = packb(b"dtype")
_SHAPE_KEY = packb(b"shape")
# Arrays and bytes at least this large are written from their own memory; smaller
# ones and everything else go through relay_ros.wire.codec.packb as a whole.
_DIRECT_ARRAY_BYTES = 1024
# Kinds written from their own memory: bool, signed, unsigned, float.
_DIRECT_KINDS = frozenset("biuf")
# Frame buffers up to this size are kept for the next request, bytes.
_KEEP_BUFFER_BYTES = 16 * 2**20
# Payload offset in the frame buffer: room for the longest WebSocket header
# (2 + 8 + 4 bytes) in front of it, and 4-byte alignment for in-place masking.
_PAYLOAD_OFFSET = 16


def _container_header(length: int, fix: int, code16: int, code32: int) -> bytes:
    if length < 16:
        return bytes((fix | length,))
    if length < 0x10000:
        return struct.pack(">BH", code16, length)
    return struct.pack(">BI", code32, length)


def _bin_header(length: int) -> bytes:
    if length < 0x100:
        return struct.pack(">BB", 0xC4, length)
    if length < 0x10000:
        return struct.pack(">BH", 0xC5, length)
    return struct.pack(">BI", 0xC6, length)


class _TooDeep(Exception):
    """Nesting beyond what _encode_parts walks; the codec encodes the whole object."""


def _encode_parts(obj: Any, parts: list[bytes | memoryview], depth: int = 0) -> None:
    """Append the msgpack encoding of ``obj`` to ``parts``, byte-identical to
    ``relay_ros.wire.codec.packb(obj)`` when joined, with large arrays as views.

    Maps and arrays are walked here (msgpack packs dict and list/tuple subclasses
    the same way); every other value, and arrays the codec would copy or refuse,
    is encoded by ``packb`` itself. Nesting deeper than 64 levels raises
    ``_TooDeep`` (the caller then uses ``packb`` for everything, so msgpack's own
    nesting limit applies exactly as in the codec).
    """
    if depth > 64:
        raise _TooDeep
    if isinstance(obj, dict):
        parts.append(_container_header(len(obj), 0x80, 0xDE, 0xDF))
        for key, value in obj.items():
            _encode_parts(key, parts, depth + 1)
            _encode_parts(value, parts, depth + 1)
    elif isinstance(obj, (list, tuple)):
        parts.append(_container_header(len(obj), 0x90, 0xDC, 0xDD))
        for value in obj:
            _encode_parts(value, parts, depth + 1)
    elif (
        isinstance(obj, np.ndarray)
        and obj.nbytes >= _DIRECT_ARRAY_BYTES
        and obj.dtype.kind in _DIRECT_KINDS
        and obj.flags.c_contiguous
    ):
        try:
            data = memoryview(obj).cast("B")
        except (TypeError, ValueError, BufferError):  # e.g. non-native byte order
            parts.append(packb(obj))
            return
        parts.append(_NDARRAY_HEAD + _bin_header(data.nbytes))
        parts.append(data)
        parts.append(_DTYPE_KEY + packb(obj.dtype.str) + _SHAPE_KEY + packb(obj.shape))
    elif isinstance(obj, (bytes, bytearray)) and len(obj) >= _DIRECT_ARRAY_BYTES:
        # e.g. JPEG frames: msgpack bin, written from the object's own memory.
        parts.append(_bin_header(len(obj)))
        parts.append(memoryview(obj))
    else:
        parts.append(packb(obj))


class _FrameWriter:
    """Builds a masked binary WebSocket frame in a reusable buffer.

    Why: a π0.5 observation is ~450 kB. ``codec.packb`` + ``ClientProtocol``
    would copy it four times into fresh allocations (msgpack buffer, bytes,
    masked copy, frame assembly), and on a loaded machine the page faults of
    those allocations cost more than the copies. Here each array is copied once
    into a buffer that is kept between requests and masked in place (RFC 6455
    masking with a fresh random key per frame, as websockets does).
    """

    def __init__(self) -> None:
        self._buffer = bytearray(_PAYLOAD_OFFSET + 64 * 1024)

    def frame(self, obj: Any) -> memoryview:
        """Return a view of the complete frame for ``obj``; release it after sending.

        Raises:
            relay_ros.wire.codec.CodecError: ``obj`` cannot be encoded.
        """
        parts: list[bytes | memoryview] = []
        try:
            _encode_parts(obj, parts)
        except _TooDeep:
            parts = [packb(obj)]
        length = sum(len(part) if isinstance(part, bytes) else part.nbytes for part in parts)
        needed = _PAYLOAD_OFFSET + length
        buffer = self._buffer
        if needed > len(buffer):
            buffer = bytearray(max(needed, 2 * len(buffer)))
            if len(buffer) <= _KEEP_BUFFER_BYTES:
                self._buffer = buffer
        offset = _PAYLOAD_OFFSET
        for part in parts:
            end = offset + (len(part) if isinstance(part, bytes) else part.nbytes)
            buffer[offset:end] = part
            offset = end
        mask = secrets.token_bytes(4)
        if length < 126:
            header = struct.pack(">BB", 0x82, 0x80 | length)
        elif length < 0x10000:
            header = struct.pack(">BBH", 0x82, 0x80 | 126, length)
        else:
            header = struct.pack(">BBQ", 0x82, 0x80 | 127, length)
        header += mask
        start = _PAYLOAD_OFFSET - len(header)
        buffer[start:_PAYLOAD_OFFSET] = header
        words = length // 4
        if words:
            # Native-order uint32 XOR keeps byte i paired with mask[i % 4].
            view = np.frombuffer(buffer, np.uint32, count=words, offset=_PAYLOAD_OFFSET)
            np.bitwise_xor(view, np.frombuffer(mask, np.uint32)[0], out=view)
            del view
        for index in range(_PAYLOAD_OFFSET + 4 * words, needed):
            buffer[index] ^= mask[(index - _PAYLOAD_OFFSET) % 4]
        return memoryview(buffer)[start:needed]


def _wait(
    sock: socket.socket,
    *,
    write: bool,
    deadline: _Deadline | None,
    cancel: threading.Event | None,
    what: str,
) -> None:
    """Block until ``sock`` is readable (or writable), the deadline passes or
    ``cancel`` is set.

    Raises:
        TimeoutError: the deadline passed (an ``OSError``, like the seed promises).
        _Cancelled: ``cancel`` was set.
    """
    if not write and isinstance(sock, ssl.SSLSocket) and sock.pending():
        return
    while True:
        if cancel is not None and cancel.is_set():
            raise _Cancelled(what)
        remaining = None if deadline is None else deadline.remaining()
        if remaining is not None and remaining <= 0:
            raise TimeoutError(
                errno.ETIMEDOUT,
                f"timed out after {deadline.timeout} s waiting for {what}",  # type: ignore[union-attr]
            )
        timeout = remaining
        if cancel is not None:
            timeout = _CANCEL_POLL_S if timeout is None else min(timeout, _CANCEL_POLL_S)
        if write:
            _, ready, _ = select.select([], [sock], [], timeout)
        else:
            ready, _, _ = select.select([sock], [], [], timeout)
        if ready:
            return


def _open_tcp(
    ws_uri: WebSocketURI, deadline: _Deadline, cancel: threading.Event | None
) -> socket.socket:
    """Connect to the URI's host and port (every address it resolves to, in order).

    A non-blocking connect waited on with :func:`_wait`, so that the deadline and
    the cancel event apply. Sets TCP_NODELAY: requests are single large writes
    and replies must not wait for Nagle's algorithm.

    Raises:
        OSError: name resolution failed, every address refused or timed out.
    """
    host, port = ws_uri.host, ws_uri.port
    last_exc: OSError | None = None
    for family, type_, proto, _, address in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM):
        sock = socket.socket(family, type_, proto)
        try:
            sock.setblocking(False)
            err = sock.connect_ex(address)
            if err in (errno.EINPROGRESS, errno.EWOULDBLOCK, errno.EAGAIN):
                _wait(sock, write=True, deadline=deadline, cancel=cancel, what=f"{host}:{port}")
                err = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if err:
                # OSError(errno, ...) becomes ConnectionRefusedError etc.
                raise OSError(err, f"{os.strerror(err)}: cannot connect to {host}:{port}")
            sock.setblocking(True)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return sock
        except OSError as exc:
            sock.close()
            last_exc = exc
            if isinstance(exc, TimeoutError):
                raise
        except BaseException:
            sock.close()
            raise
    if last_exc is None:  # getaddrinfo returned nothing (it raises gaierror otherwise)
        last_exc = OSError(errno.EHOSTUNREACH, f"no address for {host}:{port}")
    raise last_exc


def _start_tls(
    sock: socket.socket,
    ws_uri: WebSocketURI,
    deadline: _Deadline,
    cancel: threading.Event | None,
) -> ssl.SSLSocket:
    """Run the TLS handshake for ``wss://`` with the system's default trust store
    (``SSL_CERT_FILE``/``SSL_CERT_DIR`` apply) and hostname checking.

    Raises:
        ssl.SSLError: the handshake failed (an ``OSError``).
    """
    context = ssl.create_default_context()
    tls = context.wrap_socket(sock, server_hostname=ws_uri.host, do_handshake_on_connect=False)
    tls.setblocking(False)
    while True:
        try:
            tls.do_handshake()
            break
        except ssl.SSLWantReadError:
            _wait(tls, write=False, deadline=deadline, cancel=cancel, what=ws_uri.host)
        except ssl.SSLWantWriteError:
            _wait(tls, write=True, deadline=deadline, cancel=cancel, what=ws_uri.host)
    tls.setblocking(True)
    return tls


def _keepalive_loop(
    client_ref: weakref.ref[PolicyClient],
    transport: _Transport,
    lock: threading.Lock,
    stop: threading.Event,
) -> None:
    """Service an idle connection: answer pings and the server's closing handshake.

    Holds only a weak reference to the client, so a client that is dropped without
    ``close()`` is closed here instead of keeping its socket and this thread alive.
    """
    while not stop.wait(_KEEPALIVE_POLL_S):
        # Never wait for the lock: a running call reads the socket itself.
        if not lock.acquire(blocking=False):
            continue
        try:
            client = client_ref()
            if client is None:
                transport.close()
                return
            closed = client._closed
            del client
            if closed or not transport.poll():
                return
        except Exception:  # the helper thread must never die noisily
            logger.debug("keep-alive poll of %s failed", transport.url, exc_info=True)
            return
        finally:
            lock.release()


def _is_error_reply(reply: Any) -> bool:
    return isinstance(reply, dict) and reply.get("type") == "error"


class PolicyClient:
    """A blocking client for one model on a relay (or openpi) policy server.

    Args:
        model: ``"pi05"``, ``"pi0"`` or ``"groot"``; fills ``{model}`` in the URL.
        url: URL to use instead of ``WALLE_URL`` (``{model}`` is filled in too).
        open_timeout: Seconds allowed for opening each connection (TCP, TLS, the
            WebSocket handshake and the metadata frame). ``None`` (the default)
            waits with no timeout, as the seed requires: a loading server answers
            only when ready. A timeout raises ``TimeoutError`` (an ``OSError``).

    Raises:
        relay_ros.wire.env.UnknownModelError: ``model`` is not a known model ID.
        KeyError: ``WALLE_URL`` is not set (and no ``url`` was given).
        websockets.exceptions.InvalidURI: the URL is not a ``ws://``/``wss://`` URL.
        websockets.exceptions.InvalidStatus: the server refused the upgrade, e.g.
            HTTP 404 when no server is deployed for the model.
        OSError: the server cannot be reached (refused, name not found, timeout,
            TLS failure).
        websockets.exceptions.ConnectionClosed: the server closed before sending
            its metadata.
        PolicyServerError: the metadata frame is not a msgpack map.

    A client is used by one thread at a time; calls are serialized by a lock.
    """

    model: str
    last_server_timing: dict[str, Any] | None
    last_roundtrip_s: float | None
    last_sent_at: float | None

    def __init__(self, model: str, *, url: str | None = None, open_timeout: float | None = None):
        self._open(model, url, open_timeout, None)

    @classmethod
    def _open_cancellable(
        cls,
        model: str,
        *,
        url: str | None,
        open_timeout: float | None,
        cancel: threading.Event,
    ) -> PolicyClient:
        """Like the constructor, but gives up (``_Cancelled``) once ``cancel`` is set.

        For :class:`relay_ros.wire.connection.PolicyConnection`, whose ``close()`` must
        return promptly even while the server is still loading.
        """
        client = cls.__new__(cls)
        client._open(model, url, open_timeout, cancel)
        return client

    def _open(
        self,
        model: str,
        url: str | None,
        open_timeout: float | None,
        cancel: threading.Event | None,
    ) -> None:
        self.model = check_model(model)
        self.last_server_timing = None
        self.last_roundtrip_s = None
        self.last_sent_at = None
        self._lock = threading.Lock()
        self._closed = False
        self._transport: _Transport | None = None
        target = resolve_url(model) if url is None else url.replace("{model}", model)
        follow_direct = direct_enabled()

        transport = _Transport(target, deadline=_Deadline(open_timeout), cancel=cancel)
        try:
            metadata = self._read_metadata(transport, _Deadline(open_timeout), cancel)
            direct_url = metadata.get("direct_url")
            if isinstance(direct_url, str) and direct_url and follow_direct:
                logger.info("taking the direct route %s (proxied: %s)", direct_url, target)
                direct = _Transport(direct_url, deadline=_Deadline(open_timeout), cancel=cancel)
                try:
                    direct_metadata = self._read_metadata(direct, _Deadline(open_timeout), cancel)
                except BaseException:
                    direct.close()
                    raise
                transport.close()  # the proxied connection is no longer needed
                transport = direct
                metadata = {**direct_metadata, "direct_url": direct_url}
            elif direct_url:
                logger.info("direct route %s offered but WALLE_DIRECT=0", direct_url)
        except BaseException:
            transport.close()
            raise
        self._transport = transport
        self._metadata: dict[str, Any] = metadata
        self._protocol_version = metadata.get("protocol", 0)
        self._stop_keepalive = threading.Event()
        self._keepalive = threading.Thread(
            target=_keepalive_loop,
            args=(weakref.ref(self), transport, self._lock, self._stop_keepalive),
            name="relay-client-keepalive",
            daemon=True,
        )
        self._keepalive.start()
        logger.info(
            "connected to %s (model %s, protocol %s)",
            transport.url,
            metadata.get("model", model),
            metadata.get("protocol", "openpi"),
        )

    @staticmethod
    def _read_metadata(
        transport: _Transport, deadline: _Deadline, cancel: threading.Event | None
    ) -> dict[str, Any]:
        message = transport.recv(deadline, cancel)
        if isinstance(message, str):
            raise PolicyServerError(
                f"{transport.url} sent a text frame as metadata; expected a binary msgpack map"
            )
        try:
            metadata = unpackb(message)
        except ValueError as exc:
            raise PolicyServerError(f"{transport.url} sent undecodable metadata: {exc}") from exc
        if not isinstance(metadata, dict):
            raise PolicyServerError(
                f"{transport.url} sent metadata of type {type(metadata).__name__}; expected a map"
            )
        return metadata

    # Public API.

    @property
    def url(self) -> str:
        """The URL of the connection in use (the direct URL when the route was taken)."""
        return self._require_open().url

    def infer(self, obs: dict[str, Any]) -> np.ndarray | dict[str, np.ndarray] | dict[str, Any]:
        """Send one observation and wait (no timeout) for the policy's actions.

        Args:
            obs: Camera frames, state, prompt and request options; the keys depend
                on the model (docs/protocol.md).

        Returns:
            π0/π0.5: float32 array ``(action_horizon, action_dim)``. GR00T: dict of
            float32 arrays ``(1, action_horizon, k)``, one per action group. The
            arrays are read-only views of the received bytes; ``.copy()`` one to
            modify it. If the server rejects the observation: the error map
            ``{"type": "error", "message": str}`` (not raised; the connection
            stays usable). An openpi server's text reply (its traceback) is
            returned the same way.

        Also sets :attr:`last_server_timing` (the reply's ``server_timing`` map or
        None), :attr:`last_roundtrip_s` (wall time of this call, seconds) and
        :attr:`last_sent_at` (``time.perf_counter()`` when the observation was
        fully written to the socket, for pipeline latency measurements).

        Raises:
            websockets.exceptions.ConnectionClosed: the connection is closed (by
                ``close()``, the server's idle timeout or the network).
            relay_ros.wire.codec.CodecError: ``obs`` holds a value the encoder refuses
                (object, structured or complex arrays); nothing was sent.
            PolicyServerError: the reply could not be decoded.
        """
        start = time.perf_counter()
        with self._lock:
            transport = self._require_open()
            transport.discard_stale()
            transport.send(obs)
            self.last_sent_at = time.perf_counter()
            message = transport.recv()
        if isinstance(message, str):
            reply: Any = {"type": "error", "message": message}
        else:
            try:
                reply = unpackb(message)
            except ValueError as exc:
                raise PolicyServerError(
                    f"{transport.url} sent an undecodable reply: {exc}"
                ) from exc
        self.last_roundtrip_s = time.perf_counter() - start
        if isinstance(reply, dict):
            timing = reply.get("server_timing")
            self.last_server_timing = timing if isinstance(timing, dict) else None
            if _is_error_reply(reply):
                logger.debug("server refused the observation: %s", reply.get("message"))
                return reply
            if "actions" in reply:
                return reply["actions"]
        else:
            self.last_server_timing = None
        return reply

    def reset(self) -> None:
        """Start the next observation fresh: clears every session on this connection.

        Sends ``{"type": "reset"}`` and waits for the acknowledgement. On a server
        whose metadata has no ``protocol`` >= 1 (an openpi server) this does nothing,
        since such servers know no control frames.

        Raises:
            websockets.exceptions.ConnectionClosed: the connection is closed.
            PolicyServerError: the server answered with an error or an unexpected frame.
        """
        with self._lock:
            transport = self._require_open()
            if not isinstance(self._protocol_version, int) or self._protocol_version < 1:
                logger.debug("reset() is a no-op: the server has no control frames (openpi)")
                return
            transport.discard_stale()
            transport.send({"type": "reset"})
            message = transport.recv()
        reply = unpackb(message) if isinstance(message, bytes) else message
        if not (isinstance(reply, dict) and reply.get("type") == "reset"):
            raise PolicyServerError(
                f"{transport.url} answered reset with {reply!r}; expected {{'type': 'reset', ...}}"
            )
        logger.debug("reset: %s session(s) cleared", reply.get("sessions_cleared"))

    def get_server_metadata(self) -> dict[str, Any]:
        """Return (a copy of) the metadata the server sent on connect; no network call.

        With the direct route taken, this is the direct server's metadata plus the
        ``direct_url`` that was offered.

        Raises:
            websockets.exceptions.ConnectionClosed: after ``close()``.
        """
        self._require_open()
        return dict(self._metadata)

    def close(self) -> None:
        """Close the connection (idempotent). Every later call raises ConnectionClosed.

        Runs the closing handshake (at most 2 s). Called from another thread while
        a call is running, it waits for that call to finish.
        """
        if self._closed:
            return
        self._stop_keepalive.set()
        with self._lock:
            if self._closed:
                return
            self._closed = True
            transport = self._transport
            if transport is not None:
                transport.close()
                logger.debug("closed %s", transport.url)
        if self._keepalive is not threading.current_thread():
            self._keepalive.join()

    def __enter__(self) -> PolicyClient:
        self._require_open()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # Internals shared with PolicyConnection.

    def _require_open(self) -> _Transport:
        transport = self._transport
        assert transport is not None
        if self._closed:
            raise transport.closed_error()
        return transport

    def _poll(self) -> bool:
        """Answer pings and notice a closed connection while idle; False when closed."""
        if self._closed or self._transport is None:
            return False
        if not self._lock.acquire(blocking=False):
            return True  # a call is running and reading the socket
        try:
            return self._transport.poll()
        finally:
            self._lock.release()

    def _closed_error(self) -> ConnectionClosed:
        """The ConnectionClosed that describes how the connection ended."""
        assert self._transport is not None
        return self._transport.closed_error()

    def _abort(self) -> None:
        """From another thread: make a blocked call return (with ConnectionClosed)."""
        if self._transport is not None:
            self._transport.abort()
