"""``Transport``: one WebSocket connection driven by the calling thread.

websockets' Sans-I/O ``ClientProtocol`` does the HTTP upgrade, parses incoming
frames (with its size cap), answers pings and runs the closing handshake; this
module moves bytes between it and a socket, under deadlines:

- Opening (DNS, TCP, TLS, the upgrade) runs under one :class:`Deadline` and can be
  cancelled through a ``threading.Event`` (:class:`~relay_ros.wire.errors.OpenCancelled`).
  Name resolution runs on a helper thread when a deadline or cancel event applies,
  because ``getaddrinfo`` itself cannot be interrupted.
- While a caller waits for a message, and while the owner polls an idle
  connection, a ping goes out after ``ping_interval`` seconds without incoming
  bytes; when nothing arrives within ``ping_timeout`` after it, the connection is
  failed with close code 1011 ("keepalive ping timeout"), as websockets' own
  keepalive does. So a dead peer or a half-open TCP connection is noticed.
- Outgoing data frames are built by :class:`~relay_ros.wire.frame_writer.FrameWriter`:
  the msgpack pieces copied once into a reusable buffer and masked in place.

Why not ``websockets.sync.client``: it reads the socket on a background thread and
hands each message over through a condition variable. A policy client makes one
request at a time and waits for its reply, so the reply is read by the thread that
waits for it (see docs/client.md and the client round-trip figures in
docs/benchmarks.md).
"""

from __future__ import annotations

import logging
import secrets
import select
import socket
import ssl
import threading
import time
from collections import deque
from typing import Any

from websockets.client import ClientProtocol
from websockets.exceptions import ConnectionClosed, ConnectionClosedOK, PayloadTooBig
from websockets.frames import Close, CloseCode, Frame, Opcode
from websockets.http11 import Response
from websockets.protocol import State

from relay_ros._version import __version__
from relay_ros.wire.deadline import Deadline, timeout_error, wait_slice
from relay_ros.wire.env import parse_server_url, redact_url
from relay_ros.wire.errors import PolicyServerError
from relay_ros.wire.frame_writer import FrameWriter
from relay_ros.wire.tcp import open_tcp, start_tls

__all__ = ["Transport"]

_module_logger = logging.getLogger(__name__)


class _RedactingFilter(logging.Filter):
    """Redacts what websockets' protocol logs at DEBUG that may hold secrets: the
    request line's query and the ``Authorization`` header (user:password)."""

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        if text.startswith("> GET ") and "?" in text:
            text = redact_url("ws://h" + text[6:].split(" ")[0]).removeprefix("ws://h")
            record.msg, record.args = f"> GET {text} HTTP/1.1", None
        elif text.lower().startswith("> authorization:"):
            record.msg, record.args = "> Authorization: ***", None
        return True


# websockets' ClientProtocol logs through this logger (its name tells whose it is).
_protocol_logger = logging.getLogger("relay_ros.wire.websockets")
_protocol_logger.addFilter(_RedactingFilter())

# Bytes read from the socket per recv() call. Below glibc's mmap threshold so
# that each read is a cheap heap allocation.
_RECV_BYTES = 64 * 1024
# How long close() waits for the server to answer the closing handshake, seconds
# (never past the deadline of the operation it is part of).
_CLOSE_TIMEOUT_S = 2.0
_USER_AGENT = f"relay_ros/{__version__}"


class Transport:
    """One WebSocket connection, opened in the constructor. Not thread-safe, except
    :meth:`abort`.

    Args:
        url: ``ws://`` or ``wss://`` URL (secrets in it are sent, never logged).
        deadline: bounds the whole open.
        cancel: when set, opening gives up with ``OpenCancelled``.
        max_message_bytes: largest incoming message; a larger one fails the
            connection (close code 1009) and raises ``PolicyServerError``.
        ping_interval: seconds without incoming bytes before a ping is sent while
            waiting; None sends no pings.
        ping_timeout: seconds a ping may go unanswered before the connection is
            failed; None waits for ever.
        logger: where to log (a ``logging.Logger``-like object).

    Raises:
        websockets.exceptions.InvalidURI: not a ws:// or wss:// URL.
        websockets.exceptions.InvalidStatus: the server refused the upgrade.
        OSError: DNS, TCP or TLS failed; ``TimeoutError`` when the deadline passed.
        OpenCancelled: ``cancel`` was set.
    """

    def __init__(
        self,
        url: str,
        *,
        deadline: Deadline,
        cancel: threading.Event | None = None,
        max_message_bytes: int,
        ping_interval: float | None = None,
        ping_timeout: float | None = None,
        logger: Any = None,
    ) -> None:
        self.url = url
        self.display_url = redact_url(url)
        self._log = logger if logger is not None else _module_logger
        ws_uri = parse_server_url(url)  # raises InvalidURI (the URL redacted)
        self.secure = ws_uri.secure
        self._max_message_bytes = max_message_bytes
        self._protocol = ClientProtocol(ws_uri, max_size=max_message_bytes, logger=_protocol_logger)
        self._messages: deque[bytes | str] = deque()
        self._fragments: list[bytes] = []
        self._fragment_text = False
        self._failure: Exception | None = None
        self._response: Response | None = None
        self._writer = FrameWriter()
        self._sock: socket.socket | None = None
        self._closed = False
        self._ping_interval = ping_interval
        self._ping_timeout = ping_timeout
        self._last_rx = time.monotonic()
        self._ping_sent_at: float | None = None
        # For RequestTiming: bytes written / read on this connection, and when the
        # first bytes arrived after the caller last cleared ``first_rx_at``.
        self.bytes_sent = 0
        self.bytes_received = 0
        self.first_rx_at: float | None = None
        try:
            self._sock = open_tcp(ws_uri.host, ws_uri.port, deadline, cancel, self.display_url)
            if ws_uri.secure:
                self._sock = start_tls(self._sock, ws_uri.host, deadline, cancel, self.display_url)
            self._handshake(deadline, cancel)
        except BaseException:
            self._close_socket()
            raise

    # Opening.

    def _handshake(self, deadline: Deadline, cancel: threading.Event | None) -> None:
        request = self._protocol.connect()
        request.headers["User-Agent"] = _USER_AGENT
        self._protocol.send_request(request)
        self._flush()
        while self._response is None:
            self._receive_some(deadline, cancel, keepalive=False)
        if self._protocol.handshake_exc is not None:
            raise self._protocol.handshake_exc
        self._log.debug("WebSocket open: %s", self.display_url)

    # Messages.

    @property
    def is_open(self) -> bool:
        """True until the connection closed, failed or was aborted."""
        return not self._closed and self._protocol.state is State.OPEN

    def send(self, obj: Any, deadline: Deadline | None = None) -> None:
        """Encode ``obj`` (codec format) and send it as one binary message.

        The frame is written straight to the socket; ``ClientProtocol`` keeps no
        state about outgoing data frames, and every other write (pings, pongs,
        close) goes through it on this same thread.

        Raises:
            relay_ros.wire.codec.CodecError: ``obj`` cannot be encoded (nothing was sent).
            ConnectionClosed: the connection is closed or broke while sending.
            TimeoutError: ``deadline`` passed while the socket would not take the
                frame; the connection is closed (part of a frame may have gone out).
        """
        if not self.is_open:
            raise self.closed_error()
        frame = self._writer.frame(obj)
        sock = self._sock
        if sock is None:
            frame.release()
            raise self.closed_error()
        remaining = None if deadline is None else deadline.remaining()
        try:
            if remaining is not None:
                if remaining <= 0:
                    raise timeout_error(deadline, self.display_url)  # type: ignore[arg-type]
                sock.settimeout(remaining)
            sock.sendall(frame)
            self.bytes_sent += len(frame)
        except (OSError, ssl.SSLError) as exc:
            self._log.debug("send to %s failed: %s", self.display_url, exc)
            self._connection_lost()
            if isinstance(exc, (socket.timeout, TimeoutError)) and deadline is not None:
                raise timeout_error(deadline, self.display_url) from exc
            raise self.closed_error() from exc
        finally:
            frame.release()
            if remaining is not None and self._sock is not None:
                self._sock.settimeout(None)

    def recv(
        self,
        deadline: Deadline | None = None,
        cancel: threading.Event | None = None,
        *,
        keepalive: bool = True,
    ) -> bytes | str:
        """Return the next complete message, blocking until one arrives; with
        ``keepalive``, pings the server while waiting (see the module docstring).

        Raises:
            ConnectionClosed: the connection closed (or failed) before a message arrived.
            PolicyServerError: the server sent a message over the size cap or a text
                frame that is not UTF-8 (the connection is failed).
            TimeoutError: ``deadline`` passed (the connection stays as it was; the
                caller decides).
            OpenCancelled: ``cancel`` was set.
        """
        while not self._messages:
            self._receive_some(deadline, cancel, keepalive=keepalive)
        return self._messages.popleft()

    def poll(self) -> bool:
        """Process whatever has arrived without blocking: answer pings, send a
        keepalive ping when one is due, fail a connection whose ping went unanswered.

        Returns False when the connection is closed. Messages that arrive while
        no request is in flight are kept for :meth:`discard_stale`.
        """
        if self._closed or self._sock is None:
            return False
        try:
            while self._readable_now():
                self._receive_some(None, None, keepalive=False)
            self._keepalive(time.monotonic())
        except (ConnectionClosed, PolicyServerError):
            return False
        return self.is_open

    def discard_stale(self) -> None:
        """Drop messages that arrived while no request was in flight, so that they
        are not taken for the next reply."""
        while self._messages:
            stale = self._messages.popleft()
            self._log.warning(
                "discarding an unexpected message of %d bytes from %s",
                len(stale),
                self.display_url,
            )

    def _readable_now(self) -> bool:
        sock = self._sock
        assert sock is not None
        if isinstance(sock, ssl.SSLSocket) and sock.pending():
            return True
        readable, _, _ = select.select([sock], [], [], 0)
        return bool(readable)

    def _keepalive(self, now: float) -> float | None:
        """Send a ping or fail the connection when due; return seconds until the
        next keepalive event (None: none scheduled)."""
        if self._ping_interval is None:
            return None
        if self._ping_sent_at is not None:
            if self._ping_timeout is None:
                return None
            overdue = self._ping_sent_at + self._ping_timeout - now
            if overdue <= 0:
                self._log.warning(
                    "%s did not answer a ping within %.1f s; closing the connection",
                    self.display_url,
                    self._ping_timeout,
                )
                self._protocol.fail(CloseCode.INTERNAL_ERROR, "keepalive ping timeout")
                try:
                    self._flush()
                finally:
                    self._connection_lost()
                raise self.closed_error()
            return overdue
        due = self._last_rx + self._ping_interval - now
        if due <= 0:
            self._protocol.send_ping(secrets.token_bytes(4))
            self._flush()
            self._ping_sent_at = now
            return self._ping_timeout
        return due

    def _wait_readable(
        self, deadline: Deadline | None, cancel: threading.Event | None, keepalive: bool
    ) -> None:
        sock = self._sock
        assert sock is not None
        if isinstance(sock, ssl.SSLSocket) and sock.pending():
            return
        next_event = (lambda: self._keepalive(time.monotonic())) if keepalive else None
        while True:
            timeout = wait_slice(deadline, cancel, self.display_url, next_event)
            if timeout is None:
                return  # block in recv()
            readable, _, _ = select.select([sock], [], [], max(timeout, 0.0))
            if readable:
                return

    def _receive_some(
        self, deadline: Deadline | None, cancel: threading.Event | None, keepalive: bool
    ) -> None:
        """Read once from the socket and turn the bytes into protocol events."""
        if self._failure is not None:
            raise self._failure
        if self._closed or self._sock is None:
            raise self.closed_error()
        self._wait_readable(deadline, cancel, keepalive)
        try:
            data = self._sock.recv(_RECV_BYTES)
        except (OSError, ssl.SSLError) as exc:
            self._log.debug("receive from %s failed: %s", self.display_url, exc)
            self._connection_lost()
            raise self.closed_error() from exc
        if not data:
            self._connection_lost()
            if self._response is None and self._protocol.handshake_exc is not None:
                raise self._protocol.handshake_exc
            raise self.closed_error()
        self._last_rx = time.monotonic()
        self.bytes_received += len(data)
        if self.first_rx_at is None:
            self.first_rx_at = time.perf_counter()
        self._ping_sent_at = None  # the peer is alive
        self._protocol.receive_data(data)
        self._flush()
        for event in self._protocol.events_received():
            if isinstance(event, Frame):
                self._on_frame(event)
            elif isinstance(event, Response):
                self._response = event
        if isinstance(self._protocol.parser_exc, PayloadTooBig) and self._failure is None:
            self._failure = PolicyServerError(
                f"{self.display_url} sent a message over the size cap of "
                f"{self._max_message_bytes} bytes ({self._protocol.parser_exc})"
            )
        if self._protocol.state is State.CLOSING and self._protocol.close_rcvd is not None:
            # The server closed; the close frame reply went out in _flush().
            self._connection_lost()
        elif self._protocol.state is State.CLOSED:
            self._close_socket()
        if self._failure is not None:
            self._connection_lost()
            raise self._failure
        if self._closed and not self._messages:
            # Messages that arrived before the close frame are still delivered.
            raise self.closed_error()

    def _on_frame(self, frame: Frame) -> None:
        opcode = frame.opcode
        if opcode is Opcode.BINARY or opcode is Opcode.TEXT:
            if frame.fin:
                self._deliver(bytes(frame.data), opcode is Opcode.TEXT)
            else:
                self._fragments = [bytes(frame.data)]
                self._fragment_text = opcode is Opcode.TEXT
        elif opcode is Opcode.CONT:
            self._fragments.append(bytes(frame.data))
            if frame.fin:
                data = b"".join(self._fragments)
                self._fragments = []
                self._deliver(data, self._fragment_text)
        # PING (the protocol queued the PONG), PONG and CLOSE need nothing here.

    def _deliver(self, data: bytes, text: bool) -> None:
        if not text:
            self._messages.append(data)
            return
        try:
            self._messages.append(data.decode())
        except UnicodeDecodeError as exc:
            # RFC 6455: invalid UTF-8 in a text message fails the connection (1007).
            reason = f"{exc.reason} at position {exc.start}"
            self._protocol.fail(CloseCode.INVALID_DATA, reason)
            self._failure = PolicyServerError(
                f"{self.display_url} sent a text frame of {len(data)} bytes that is not "
                f"valid UTF-8 ({reason}); the connection is closed"
            )

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
                self._log.debug("send to %s failed: %s", self.display_url, exc)
                self._connection_lost()
                raise self.closed_error() from exc

    # Closing.

    def closed_error(self) -> ConnectionClosed:
        """The exception every call raises once the connection is gone."""
        if self._protocol.state is State.CLOSED:
            return self._protocol.close_exc
        return ConnectionClosedOK(None, Close(CloseCode.NORMAL_CLOSURE, ""), None)

    @property
    def close_received(self) -> Close | None:
        """The close frame the server sent, if any (e.g. code 1000 "idle for 30 s")."""
        return self._protocol.close_rcvd

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

        Shuts the socket down so that a blocked read returns at once; the owning
        thread then sees the connection as closed.
        """
        sock = self._sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self, deadline: Deadline | None = None) -> None:
        """Run the closing handshake and close the socket.

        Waits for the server's answer at most 2 s, and never past ``deadline`` (the
        deadline of the operation this close is part of, e.g. an open): when it has
        passed, the close frame is sent and the socket closed at once.
        """
        if self._closed:
            return
        wait = Deadline(_CLOSE_TIMEOUT_S) if deadline is None else deadline.capped(_CLOSE_TIMEOUT_S)
        try:
            if self._protocol.state is State.OPEN:
                self._protocol.send_close(CloseCode.NORMAL_CLOSURE)
                self._flush()
                # The server answers with its close frame, then closes TCP.
                while not self._closed:
                    self._receive_some(wait, None, keepalive=False)
        except (ConnectionClosed, PolicyServerError, TimeoutError, OSError):
            pass
        finally:
            if not self._closed:
                self._connection_lost()

    def abandon(self, code: int = CloseCode.NORMAL_CLOSURE, reason: str = "") -> None:
        """Close without waiting for anything: send a close frame (``code``, ``reason``)
        if the socket takes it at once, then close the socket.

        For an open that failed (bad metadata, deadline passed, cancelled): the
        server learns why, and the caller's error is raised now, not after a
        closing handshake with a server that may never answer.
        """
        if self._closed:
            return
        try:
            if self._protocol.state is State.OPEN and self._sock is not None:
                self._protocol.fail(code, reason)
                self._sock.setblocking(False)  # a full send buffer must not block us
                self._flush()
        except (ConnectionClosed, OSError):
            pass
        finally:
            if not self._closed:
                self._connection_lost()
