"""``PolicyClient``: the blocking client API for a relay (or openpi) policy server.

- ``PolicyClient(model)`` reads ``WALLE_URL`` (environment, else the nearest
  ``.env``), fills ``{model}``, opens the WebSocket and blocks until the server's
  metadata frame arrives, with no timeout by default: a server that is loading
  its model answers only when ready. ``KeyError`` when ``WALLE_URL`` is unset;
  ``websockets.exceptions.InvalidStatus`` (e.g. HTTP 404), ``InvalidURI`` or
  ``OSError`` when the server cannot be reached, raised as they are.
- When the metadata offers ``direct_url`` and ``WALLE_DIRECT`` is unset or ``1``,
  the client opens the direct URL, reads its metadata and closes the proxied
  connection, unless the direct route would leave TLS (``wss://`` to ``ws://``):
  that route is refused and the proxied connection kept.
- ``infer`` returns the actions (π0/π0.5: a float32 ``(action_horizon, action_dim)``
  array; GR00T: a dict of float32 ``(1, action_horizon, k)`` arrays) as read-only
  views of the received bytes, or the server's ``{"type": "error", "message": str}``
  map without raising; the connection stays usable. Replies are decoded under
  :data:`~relay_ros.wire.codec.REPLY_LIMITS` and a size cap, and checked against
  the model family. ``infer_reply`` returns the same as a
  :class:`~relay_ros.wire.reply.Reply` that also says when the request went out,
  its round trip and the server's timing.
- After ``close()``, every call raises ``websockets.exceptions.ConnectionClosed``.

The socket, TLS, framing, pings and deadlines live in
:mod:`relay_ros.wire.transport`. Between calls, an
:class:`~relay_ros.wire.idle_servicer.IdleServicer` thread services the idle socket
(pings, the server's closing handshake) so that an idle client behaves like
websockets' own.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

import numpy as np
from websockets.exceptions import ConnectionClosed
from websockets.frames import Close, CloseCode

from relay_ros.logsafe import shorten
from relay_ros.models import get_model
from relay_ros.wire.codec import REPLY_LIMITS, CodecError, DecodeLimits, unpackb
from relay_ros.wire.deadline import Deadline
from relay_ros.wire.env import direct_enabled, parse_server_url, redact_url, resolve_url
from relay_ros.wire.errors import OpenCancelled, PolicyServerError, RequestTimeout
from relay_ros.wire.idle_servicer import DEFAULT_IDLE_POLL_S, IdleServicer
from relay_ros.wire.metadata import read_metadata
from relay_ros.wire.reply import Reply, decode_reply
from relay_ros.wire.request_timing import RequestTiming, server_seconds
from relay_ros.wire.transport import Transport

__all__ = [
    "DEFAULT_MAX_REPLY_BYTES",
    "DEFAULT_PING_INTERVAL_S",
    "DEFAULT_PING_TIMEOUT_S",
    "OpenCancelled",
    "PolicyClient",
    "PolicyServerError",
    "Reply",
    "RequestTimeout",
]

_module_logger = logging.getLogger(__name__)

#: Default cap on one reply, bytes. An action chunk is a few kB (π0.5: 50 x 32
#: float32 = 6.4 kB); the cap leaves room for larger custom policies.
DEFAULT_MAX_REPLY_BYTES = 8 * 2**20
#: Default seconds without incoming bytes before a ping is sent while waiting.
DEFAULT_PING_INTERVAL_S = 20.0
#: Default seconds a ping may go unanswered before the connection is failed.
DEFAULT_PING_TIMEOUT_S = 20.0


def _abandon(transport: Transport, exc: BaseException) -> None:
    """Close the connection of an open that failed with ``exc``, at once: no closing
    handshake, so the open ends by its deadline and bad metadata fails right away.
    The close frame tells the server why (1002 for metadata the client refused)."""
    if isinstance(exc, PolicyServerError):
        transport.abandon(CloseCode.PROTOCOL_ERROR, "unusable metadata")
    else:
        transport.abandon(CloseCode.NORMAL_CLOSURE, "open abandoned")


class PolicyClient:
    """A blocking client for one model on a relay (or openpi) policy server.

    Args:
        model: ``"pi05"``, ``"pi0"`` or ``"groot"``; fills ``{model}`` in the URL.
        url: URL to use instead of ``WALLE_URL`` (``{model}`` is filled in too).
        open_timeout: Seconds allowed for the whole open: DNS, TCP, TLS, the
            WebSocket handshake, the metadata frame and the direct route, together.
            ``None`` (the default) waits with no timeout: a loading server answers
            only when ready. A timeout raises ``TimeoutError`` (an ``OSError``).
        max_reply_bytes: Largest reply accepted, bytes (default 8 MiB); a larger
            one raises ``PolicyServerError`` naming the size and the cap, and closes
            the connection.
        ping_interval: Seconds without incoming bytes, while a call waits or the
            client is idle (not while opening), before a ping is sent. None: no pings.
        ping_timeout: Seconds a ping may go unanswered before the connection is
            failed (the waiting call raises ``ConnectionClosed``). None: wait for ever.
        cancel: When this event is set, opening gives up with
            :class:`~relay_ros.wire.errors.OpenCancelled` (used by ``PolicyConnection``
            so that its ``close()`` returns promptly while a server is loading).
        idle_poll_s: Seconds between two services of the idle connection (pings,
            the server's closing handshake) by the client's idle servicer thread.
        on_close: Called on that thread when it finds the connection closed
            between calls (server close, network, unanswered ping).
        logger: A ``logging.Logger``-like object for this client's messages
            (default: this module's logger), e.g. a ROS node's logger.

    Raises:
        relay_ros.models.UnknownModelError: ``model`` is not a known model ID.
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

    def __init__(
        self,
        model: str,
        *,
        url: str | None = None,
        open_timeout: float | None = None,
        max_reply_bytes: int = DEFAULT_MAX_REPLY_BYTES,
        ping_interval: float | None = DEFAULT_PING_INTERVAL_S,
        ping_timeout: float | None = DEFAULT_PING_TIMEOUT_S,
        cancel: threading.Event | None = None,
        idle_poll_s: float = DEFAULT_IDLE_POLL_S,
        on_close: Callable[[], None] | None = None,
        logger: Any = None,
    ) -> None:
        self.model = get_model(model).id
        if not (isinstance(max_reply_bytes, int) and max_reply_bytes > 0):
            raise ValueError(f"max_reply_bytes={max_reply_bytes!r}; expected a positive int")
        if not idle_poll_s > 0:
            raise ValueError(f"idle_poll_s={idle_poll_s!r}; expected a positive number of seconds")
        for name, value in (("ping_interval", ping_interval), ("ping_timeout", ping_timeout)):
            if value is not None and not value > 0:
                raise ValueError(f"{name}={value!r}; expected a positive number of seconds or None")
        self._log = logger if logger is not None else _module_logger
        self._lock = threading.Lock()
        self._closed = False
        self._transport: Transport | None = None
        self._reply_limits: DecodeLimits = dataclasses.replace(
            REPLY_LIMITS, max_bytes=max_reply_bytes
        )
        self._max_reply_bytes = max_reply_bytes
        self._ping = (ping_interval, ping_timeout)
        target = resolve_url(model) if url is None else url.replace("{model}", model)
        parse_server_url(target)  # a bad URL fails here, its secrets redacted
        follow_direct = direct_enabled()
        deadline = Deadline(open_timeout)

        transport = self._connect(target, deadline, cancel)
        try:
            metadata = read_metadata(transport, deadline, cancel, self.model)
            direct_url = metadata.get("direct_url")
            if isinstance(direct_url, str) and direct_url and follow_direct:
                if self._downgrades(target, direct_url):
                    self._log.warning(
                        "not taking the direct route %s offered by %s: it would leave TLS "
                        "(wss:// to ws://); staying on the proxied connection",
                        redact_url(direct_url),
                        transport.display_url,
                    )
                else:
                    self._log.info(
                        "taking the direct route %s (proxied: %s)",
                        redact_url(direct_url),
                        transport.display_url,
                    )
                    direct = self._connect(direct_url, deadline, cancel)
                    try:
                        direct_metadata = read_metadata(direct, deadline, cancel, self.model)
                    except BaseException as exc:
                        _abandon(direct, exc)
                        raise
                    # The proxied connection is no longer needed: a closing handshake,
                    # within what is left of the open's deadline.
                    transport.close(deadline)
                    transport = direct
                    metadata = {**direct_metadata, "direct_url": direct_url}
            elif direct_url:
                self._log.info(
                    "direct route %s offered but WALLE_DIRECT=0",
                    shorten(redact_url(str(direct_url))),
                )
        except BaseException as exc:
            _abandon(transport, exc)
            raise
        self._transport = transport
        self._metadata: dict[str, Any] = metadata
        self._protocol_version = metadata.get("protocol", 0)
        self._idle = IdleServicer(
            self, transport, self._lock, interval_s=idle_poll_s, on_close=on_close, logger=self._log
        )
        self._log.info(
            "connected to %s (model %s, protocol %s)",
            transport.display_url,
            shorten(metadata.get("model", model), 40),
            shorten(metadata.get("protocol", "openpi"), 20),
        )

    def _connect(self, url: str, deadline: Deadline, cancel: threading.Event | None) -> Transport:
        return Transport(
            url,
            deadline=deadline,
            cancel=cancel,
            max_message_bytes=self._max_reply_bytes,
            ping_interval=self._ping[0],
            ping_timeout=self._ping[1],
            logger=self._log,
        )

    @staticmethod
    def _downgrades(target: str, direct_url: str) -> bool:
        """True when ``direct_url`` would leave TLS that ``target`` uses."""
        try:
            direct_scheme = urlsplit(direct_url).scheme.lower()
        except ValueError:
            return False  # the transport refuses it with InvalidURI
        return urlsplit(target).scheme.lower() == "wss" and direct_scheme != "wss"

    # Public API.

    @property
    def url(self) -> str:
        """The URL of the connection in use (the direct URL when the route was taken).
        It may hold secrets: show :attr:`display_url` instead."""
        return self._require_open().url

    @property
    def display_url(self) -> str:
        """:attr:`url` with user info and query values replaced by ``***``."""
        return self._require_open().display_url

    def infer(
        self, obs: dict[str, Any], timeout: float | None = None
    ) -> np.ndarray | dict[str, np.ndarray] | dict[str, Any]:
        """Send one observation and wait for the policy's actions.

        Args:
            obs: Camera frames, state, prompt and request options; the keys depend
                on the model (docs/protocol.md).
            timeout: Seconds for the whole request (sending and waiting). None
                (default) waits with no timeout. When it passes,
                :class:`~relay_ros.wire.errors.RequestTimeout` is raised and the
                client is closed: a reply that arrived late would otherwise be read
                as the answer to the next request. Open a new client to continue.

        Returns:
            π0/π0.5: float32 array ``(action_horizon, action_dim)``. GR00T: dict of
            float32 arrays ``(1, action_horizon, k)``, one per action group. The
            arrays are read-only views of the received bytes; ``.copy()`` one to
            modify it. If the server rejects the observation: the error map
            ``{"type": "error", "message": str}`` (not raised; the connection
            stays usable). An openpi server's text reply (its traceback) is
            returned the same way.

        Raises:
            websockets.exceptions.ConnectionClosed: the connection is closed (by
                ``close()``, the server's idle timeout, the network, or a ping the
                server did not answer).
            relay_ros.wire.codec.CodecError: ``obs`` holds a value the encoder refuses
                (object, structured or complex arrays); nothing was sent.
            RequestTimeout: ``timeout`` passed (a ``TimeoutError``); the client is closed.
            PolicyServerError: the reply could not be decoded, is over the size cap,
                or is not the model family's action type.
        """
        reply = self.infer_reply(obs, timeout)
        if reply.error is not None:
            self._log.debug("server refused the observation: %s", shorten(reply.error["message"]))
        return reply.result()

    def infer_reply(
        self,
        obs: dict[str, Any],
        timeout: float | None = None,
        *,
        on_sent: Callable[[], None] | None = None,
    ) -> Reply:
        """:meth:`infer`, returning the whole result of the request: the actions or
        error map, the reply's ``server_timing``, and its
        :class:`~relay_ros.wire.request_timing.RequestTiming` (when it was sent, the
        round trip, bytes each way, the upload / server / download split).

        Args:
            obs, timeout: As for :meth:`infer`.
            on_sent: Called on this thread as soon as the observation is fully
                written to the socket, before the reply is awaited
                (``PolicyConnection`` uses it to hand the GIL back to the node's
                executor).

        Raises:
            As :meth:`infer`.
        """
        if timeout is not None and not timeout > 0:
            raise ValueError(f"timeout={timeout!r}; expected a positive number of seconds or None")
        with self._lock:
            transport = self._require_open()
            message, timing = self._exchange(transport, obs, timeout, "infer", on_sent)
        reply = decode_reply(self.model, message, self._reply_limits, transport.display_url)
        timing = dataclasses.replace(timing, server_s=server_seconds(reply.server_timing))
        return dataclasses.replace(reply, timing=timing)

    def _exchange(
        self,
        transport: Transport,
        obj: Any,
        timeout: float | None,
        what: str,
        on_sent: Callable[[], None] | None = None,
    ) -> tuple[bytes | str, RequestTiming]:
        """Send ``obj`` and return the next message and the request's timing, all
        within ``timeout``; on a timeout close the connection and raise
        RequestTimeout. ``on_sent`` is called once ``obj`` is written. Holds the lock."""
        deadline = Deadline(timeout)
        transport.discard_stale()
        sent, received = transport.bytes_sent, transport.bytes_received
        try:
            transport.first_rx_at = None
            send_start = time.perf_counter()
            transport.send(obj, deadline if timeout is not None else None)
            send_done = time.perf_counter()
            if on_sent is not None:
                on_sent()
            message = transport.recv(deadline if timeout is not None else None)
            done = time.perf_counter()
            timing = RequestTiming(
                bytes_sent=transport.bytes_sent - sent,
                bytes_received=transport.bytes_received - received,
                send_start=send_start,
                send_done=send_done,
                first_byte=transport.first_rx_at if transport.first_rx_at is not None else done,
                reply_done=done,
            )
            return message, timing
        except TimeoutError as exc:
            self._closed = True
            self._idle.stop()
            transport.abort()
            transport.close()
            self._log.debug(
                "%s: no reply to %s within %.3g s; connection closed",
                transport.display_url,
                what,
                timeout,
            )
            raise RequestTimeout(
                exc.errno,
                f"no reply from {transport.display_url} to {what} within {timeout:g} s; "
                "the client is closed",
            ) from None

    def _decode_control(self, transport: Transport, message: bytes) -> Any:
        try:
            return unpackb(message, self._reply_limits)
        except CodecError as exc:
            raise PolicyServerError(
                f"{transport.display_url} sent an undecodable reply: {exc}"
            ) from exc

    def reset(self, timeout: float | None = None) -> None:
        """Start the next observation fresh: clears every session on this connection.

        Sends ``{"type": "reset"}`` and waits for the acknowledgement. On a server
        whose metadata has no ``protocol`` >= 1 (an openpi server) this does nothing,
        since such servers know no control frames.

        Args:
            timeout: As for :meth:`infer`.

        Raises:
            websockets.exceptions.ConnectionClosed: the connection is closed.
            RequestTimeout: ``timeout`` passed; the client is closed.
            PolicyServerError: the server answered with an error or an unexpected frame.
        """
        with self._lock:
            transport = self._require_open()
            if not isinstance(self._protocol_version, int) or self._protocol_version < 1:
                self._log.debug("reset() is a no-op: the server has no control frames (openpi)")
                return
            message, _timing = self._exchange(transport, {"type": "reset"}, timeout, "reset")
        reply = self._decode_control(transport, message) if isinstance(message, bytes) else message
        if not (isinstance(reply, dict) and reply.get("type") == "reset"):
            raise PolicyServerError(
                f"{transport.display_url} answered reset with {shorten(reply, 80)}; "
                "expected {'type': 'reset', ...}"
            )
        self._log.debug("reset: %s session(s) cleared", shorten(reply.get("sessions_cleared"), 20))

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
        a call is running, it waits for that call to finish (use :meth:`abort` first
        to end the call at once).
        """
        self._idle.stop()
        with self._lock:
            if not self._closed:
                self._closed = True
                transport = self._transport
                if transport is not None:
                    transport.close()
                    self._log.debug("closed %s", transport.display_url)
        self._idle.join()

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

    def _require_open(self) -> Transport:
        transport = self._transport
        assert transport is not None
        if self._closed:
            raise transport.closed_error()
        return transport

    # For owners that run the client on a thread of their own (PolicyConnection).

    @property
    def is_open(self) -> bool:
        """True until the connection is closed (by :meth:`close`, the server, the
        network or an unanswered ping); no network call."""
        transport = self._transport
        return not self._closed and transport is not None and transport.is_open

    def closed_error(self) -> ConnectionClosed:
        """The ``ConnectionClosed`` that describes how the connection ended.

        Waits for the call lock: the idle servicer may be in the middle of the
        closing handshake (:attr:`is_open` is already False), and only once it is
        done does the error say who closed with which code.
        """
        assert self._transport is not None
        with self._lock:
            return self._transport.closed_error()

    @property
    def close_received(self) -> Close | None:
        """The close frame the server sent, if it closed the connection (e.g. code
        1000, reason ``"idle for 30 s"`` after the server's idle timeout)."""
        return None if self._transport is None else self._transport.close_received

    def abort(self) -> None:
        """From another thread: make a blocked call return at once (it raises
        ``ConnectionClosed``). The client is unusable afterwards; call :meth:`close`."""
        if self._transport is not None:
            self._transport.abort()
