"""``PolicyConnection``: a :class:`PolicyClient` on its own worker thread.

The ROS node must never block its executor on the network: opening a
connection can take minutes (a server loading its model), and one inference
takes tens to hundreds of milliseconds. This module gives the node a
non-blocking front:

- A worker thread owns the :class:`~relay_ros.wire.client.PolicyClient`. It connects
  in the background (the node starts even when the server is not up), and after
  a failed attempt or a lost connection it reconnects with exponential backoff;
  while it waits, a cheap TCP probe of the server's port ends the wait as soon as a
  server that was down is back (:mod:`relay_ros.wire.reconnect`).
- :meth:`PolicyConnection.submit` hands over one observation and returns at
  once; at most one request is in flight. The worker delivers exactly one
  :class:`InferOutcome` per accepted request through ``on_result``, called on
  the worker thread (the node forwards it to its executor).
- While idle, the client's idle servicer answers the server's pings, pings a silent
  server and wakes the worker when the connection closes. The server's idle close
  (30 s without a request, e.g. while the robot waits for its cameras) is expected:
  the worker reconnects at once and says so at INFO the first time, DEBUG afterwards.
- A request has a timeout (``request_timeout_s``, a number or a function asked
  before each request); when it passes the outcome carries ``connection_error``
  naming the timeout, and the worker drops the connection and reconnects, since
  a late reply would otherwise be taken for the next one.
- Whatever goes wrong on the worker (even ``MemoryError``) ends the request with a
  ``connection_error`` and a reconnect; the worker itself never dies.
- :meth:`PolicyConnection.close` returns promptly in every state: opening is cancelled
  through a stop event, a blocked request woken by a socket shutdown, the thread joined.

Plain Python, no rclpy, so it is tested on its own.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from websockets.exceptions import ConnectionClosed

from relay_ros.models import get_model
from relay_ros.wire.client import PolicyClient
from relay_ros.wire.codec import CodecError
from relay_ros.wire.env import parse_server_url, redact_text, redact_url, resolve_url
from relay_ros.wire.errors import OpenCancelled, PolicyServerError, RequestTimeout
from relay_ros.wire.reconnect import DEFAULT_PROBE_S, Backoff, RetryWait, WaitEnd
from relay_ros.wire.reply import Reply
from relay_ros.wire.request_timing import RequestTiming

__all__ = ["InferOutcome", "PolicyConnection"]

_module_logger = logging.getLogger(__name__)

#: What a request timeout may be: seconds, None (no timeout), or a function that
#: returns either, asked before each request.
RequestTimeoutSetting = float | Callable[[], float | None] | None


@dataclass(frozen=True)
class InferOutcome:
    """What became of one submitted observation.

    Attributes:
        tag: The caller's tag passed to :meth:`PolicyConnection.submit`.
        reply: What ``PolicyClient.infer`` returned: the actions (array or dict of
            arrays) or the server's error map ``{"type": "error", "message": str}``;
            an observation the encoder refuses also comes back as an error map.
            None when the connection failed (see ``connection_error``).
        roundtrip_s: Wall time of the request in seconds, None when it failed.
        server_timing: The reply's ``server_timing`` map, if any.
        connection_error: None on success, else why the request could not complete
            (connection lost or closed, ``request timed out after N s``, a reply
            the client refused, an unexpected fault); the worker then reconnects.
        sent_at: ``time.perf_counter()`` when the observation was fully written to
            the socket; None when nothing was sent.
        timing: Bytes and timestamps of the request (``Reply.timing``) for the
            upload / server / download split; None when it failed.
    """

    tag: object
    reply: np.ndarray | dict[str, Any] | None
    roundtrip_s: float | None
    server_timing: dict[str, Any] | None
    connection_error: str | None
    sent_at: float | None = None
    timing: RequestTiming | None = None

    @classmethod
    def of_reply(cls, tag: object, reply: Reply) -> InferOutcome:
        """The outcome of a request that got ``reply`` (actions or an error map)."""
        result, timing = reply.result(), reply.timing
        return cls(tag, result, reply.roundtrip_s, reply.server_timing, None, reply.sent_at, timing)


def _describe(exc: BaseException) -> str:
    """``Type: text`` of an exception, with any URL in it redacted."""
    text = redact_text(str(exc))
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _is_idle_close(client: PolicyClient) -> bool:
    """True when the server ended the connection with a normal close (code 1000),
    as the reference server does after its idle timeout."""
    close = client.close_received
    return close is not None and close.code == 1000


class PolicyConnection:
    """Keeps one policy connection alive on a worker thread (started in the
    constructor) and runs requests on it.

    Args:
        model: ``"pi05"``, ``"pi0"`` or ``"groot"``.
        on_result: Called on the worker thread with one :class:`InferOutcome` per
            accepted :meth:`submit`.
        url: URL instead of ``WALLE_URL`` (``{model}`` is filled in).
        on_connect: Called on the worker thread with the server metadata each time
            a connection opens.
        on_disconnect: Called on the worker thread with a reason when an open
            connection is lost (not after :meth:`close`).
        open_timeout: Seconds allowed for each connection attempt, including the
            metadata wait (a loading server is retried after it). None: no limit.
        reconnect_initial_s: Delay before retrying after the first failed attempt,
            seconds; doubles (``reconnect_factor``) per failure. Each delay is
            jittered down by up to 20 %.
        reconnect_max_s: Upper bound of the retry delay, seconds.
        reconnect_factor: Growth factor of the retry delay.
        reconnect_probe_s: While waiting to retry, probe the server's port with a TCP
            connect this often (seconds); the first probe that connects after the port
            was closed ends the wait. None: no probes, the delay alone decides.
        idle_poll_s: How often the client's idle servicer services the idle socket
            (pings, close detection), seconds.
        request_timeout_s: Seconds one request may take (send and reply), a
            function returning that (asked before each request, so it can follow
            measured latency), or None for no timeout.
        ping_interval, ping_timeout: The client's keepalive pings (seconds, see
            :class:`~relay_ros.wire.client.PolicyClient`).
        max_reply_bytes: The client's reply size cap, bytes.
        logger: A ``logging.Logger``-like object for the connection's and its
            clients' messages (default: this module's logger).

    Raises:
        relay_ros.models.UnknownModelError: unknown model ID.
        KeyError: ``WALLE_URL`` is not set and no ``url`` was given.
        websockets.exceptions.InvalidURI: the URL is not a ws:// or wss:// URL.
        ValueError: a timing option is not positive.
    """

    def __init__(
        self,
        model: str,
        *,
        on_result: Callable[[InferOutcome], None],
        url: str | None = None,
        on_connect: Callable[[dict[str, Any]], None] | None = None,
        on_disconnect: Callable[[str], None] | None = None,
        open_timeout: float | None = 60.0,
        reconnect_initial_s: float = 0.5,
        reconnect_max_s: float = 10.0,
        reconnect_factor: float = 2.0,
        reconnect_probe_s: float | None = DEFAULT_PROBE_S,
        idle_poll_s: float = 1.0,
        request_timeout_s: RequestTimeoutSetting = None,
        ping_interval: float | None = 20.0,
        ping_timeout: float | None = 20.0,
        max_reply_bytes: int = 8 * 2**20,
        logger: Any = None,
    ) -> None:
        get_model(model)
        for name, value in (
            ("idle_poll_s", idle_poll_s),
            ("open_timeout", 1.0 if open_timeout is None else open_timeout),
        ):
            if not value > 0:
                raise ValueError(f"{name}={value!r} must be a positive number of seconds")
        if not (request_timeout_s is None or callable(request_timeout_s)):
            if not request_timeout_s > 0:
                raise ValueError(
                    f"request_timeout_s={request_timeout_s!r} must be a positive number of "
                    "seconds, a function returning one, or None"
                )
        self._backoff = Backoff(reconnect_initial_s, reconnect_max_s, reconnect_factor)
        self.model = model
        self.url = resolve_url(model) if url is None else url.replace("{model}", model)
        ws_uri = parse_server_url(self.url)  # a bad URL is a configuration error: fail now
        self._stop = threading.Event()
        self._retry = RetryWait(ws_uri.host, ws_uri.port, self._stop, probe_s=reconnect_probe_s)
        self._attempts = 0
        self._on_result = on_result
        self._on_connect = on_connect
        self._on_disconnect = on_disconnect
        self._open_timeout = open_timeout
        self._idle_poll_s = idle_poll_s
        self._request_timeout = request_timeout_s
        self._client_options: dict[str, Any] = {
            "ping_interval": ping_interval,
            "ping_timeout": ping_timeout,
            "max_reply_bytes": max_reply_bytes,
        }
        self._log = logger if logger is not None else _module_logger
        self.display_url = redact_url(self.url)
        self._idle_closes = 0

        self._lock = threading.Lock()
        self._work = threading.Event()
        self._sent = threading.Event()  # the pending observation is written (or failed)
        self._client: PolicyClient | None = None
        self._connected = False
        self._metadata: dict[str, Any] | None = None
        self._last_error: str | None = None
        self._pending: tuple[dict[str, Any], object] | None = None
        self._in_flight = False
        self._reset_requested = False
        self._thread = threading.Thread(target=self._run, name=f"relay-policy-{model}", daemon=True)
        self._thread.start()

    # State, readable from any thread.

    @property
    def connected(self) -> bool:
        """True while a connection is open (metadata received)."""
        return self._connected

    @property
    def metadata(self) -> dict[str, Any] | None:
        """The metadata of the current connection (a copy), None while disconnected."""
        metadata = self._metadata
        return None if metadata is None else dict(metadata)

    @property
    def last_error(self) -> str | None:
        """Why the last attempt failed or the connection was lost; None once connected."""
        return self._last_error

    @property
    def idle_closes(self) -> int:
        """How many times the server closed the connection as idle (normal close,
        e.g. ``idle for 30 s``); each was reconnected at once. Expected while no
        requests are sent, so not a fault."""
        return self._idle_closes

    @property
    def busy(self) -> bool:
        """True while a request is in flight."""
        return self._in_flight

    @property
    def connect_attempts(self) -> int:
        """Connections the worker tried to open so far (each a full open: TCP, TLS,
        upgrade, metadata), successful or not."""
        return self._attempts

    @property
    def probes(self) -> int:
        """TCP probes of the server's port sent while waiting to reconnect."""
        return self._retry.probes

    @property
    def reconnect_shortcuts(self) -> int:
        """Reconnect waits a probe cut short (the server's port was back)."""
        return self._retry.shortcuts

    # Commands, callable from any thread.

    def submit(self, obs: dict[str, Any], tag: object, *, handoff_s: float = 0.0) -> bool:
        """Queue one observation for inference.

        Args:
            obs: The observation.
            tag: Returned with its outcome.
            handoff_s: Block the caller up to this long, until the worker has written
                the observation to the socket or its request ended (0: return at
                once). A caller that would go on running Python code (an executor
                thread) holds the GIL that the worker needs to encode and send;
                waiting here lets the observation go out first. On a fast link that
                takes about a millisecond; the bound matters when the worker is busy
                (a reset, a reconnect) or the link is slow.

        Returns:
            True when accepted (``on_result`` will be called exactly once with
            ``tag``); False when not connected, closed, or a request is in flight.

        Raises:
            ValueError: ``handoff_s`` is negative or not a number.
        """
        if not handoff_s >= 0:
            raise ValueError(f"handoff_s={handoff_s!r} must be a number of seconds >= 0")
        with self._lock:
            if self._stop.is_set() or not self._connected or self._in_flight:
                return False
            self._pending = (obs, tag)
            self._in_flight = True
            self._sent.clear()
        self._work.set()
        if handoff_s > 0:
            self._sent.wait(handoff_s)
        return True

    def request_reset(self) -> None:
        """Ask the worker to call ``PolicyClient.reset()`` before the next request
        (a new episode). Dropped if the connection is lost first: a new connection
        starts with no sessions anyway."""
        with self._lock:
            self._reset_requested = True
        self._work.set()

    def close(self, timeout: float = 5.0) -> None:
        """Stop the worker, close the connection and join the thread (idempotent).

        A request still pending gets its outcome with ``connection_error``.

        Args:
            timeout: Seconds to wait for the thread to finish.
        """
        self._stop.set()
        self._work.set()
        if threading.current_thread() is self._thread:
            return  # called from a callback: the worker stops when the callback returns
        client = self._client
        if client is not None and self._in_flight:
            client.abort()  # wake a request blocked on the socket
        self._thread.join(timeout)
        if self._thread.is_alive():
            self._log.warning("policy connection worker did not stop within %.1f s", timeout)

    def __enter__(self) -> PolicyConnection:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # Worker thread.

    def _run(self) -> None:
        while not self._stop.is_set():
            self._attempts += 1
            try:
                client = PolicyClient(
                    self.model,
                    url=self.url,
                    open_timeout=self._open_timeout,
                    cancel=self._stop,
                    idle_poll_s=self._idle_poll_s,
                    on_close=self._work.set,
                    logger=self._log,
                    **self._client_options,
                )
            except OpenCancelled:
                break
            except Exception as exc:  # every failure to connect is retried
                self._last_error = _describe(exc)
                delay = self._backoff.next()
                self._log.warning(
                    "cannot connect to %s (%s); retrying in %.1f s",
                    self.display_url,
                    self._last_error,
                    delay,
                )
                end = self._retry.wait(delay, failure=exc)
                if end == WaitEnd.STOPPED:
                    break
                if end == WaitEnd.REACHABLE:
                    self._log.info("%s accepts connections again; reconnecting", self.display_url)
                continue

            self._backoff.reset()
            metadata = client.get_server_metadata()
            with self._lock:
                self._client = client
                self._metadata = metadata
                self._connected = True
                self._last_error = None
            self._call(self._on_connect, dict(metadata))
            try:
                reason = self._serve(client)
            except Exception as exc:  # a fault of any kind: drop the connection, go on
                reason = f"unexpected fault on the connection worker: {_describe(exc)}"
                self._log.error("%s; reconnecting", reason, exc_info=True)
            with self._lock:
                self._connected = False
                self._metadata = None
                self._client = None
                self._reset_requested = False
            idle = reason is not None and _is_idle_close(client)
            try:
                client.close()
            except Exception:
                self._log.debug("closing the client failed", exc_info=True)
            if reason is None:  # stopping
                break
            self._last_error = reason
            if idle:
                self._idle_closes += 1
                level = logging.INFO if self._idle_closes == 1 else logging.DEBUG
                self._log.log(
                    level,
                    "%s closed the idle connection (%s); reconnecting (expected while no "
                    "requests are sent; further idle closes are logged at DEBUG)",
                    self.display_url,
                    reason,
                )
            else:
                self._log.warning(
                    "connection to %s lost: %s; reconnecting", self.display_url, reason
                )
            self._fail_pending(reason)
            self._call(self._on_disconnect, reason)
        self._fail_pending("connection closed")

    def _timeout_now(self) -> float | None:
        setting = self._request_timeout
        if not callable(setting):
            return setting
        try:
            value = setting()
        except Exception:
            self._log.exception("request_timeout_s function failed; no timeout for this request")
            return None
        if value is None:
            return None
        if not value > 0:
            self._log.warning("request_timeout_s function returned %r; no timeout used", value)
            return None
        return float(value)

    def _serve(self, client: PolicyClient) -> str | None:
        """Run requests until the connection is lost (returns why) or stop (None)."""
        while True:
            self._work.wait(self._idle_poll_s)
            self._work.clear()
            if self._stop.is_set():
                return None
            with self._lock:
                reset, self._reset_requested = self._reset_requested, False
                pending = self._pending
            if reset:
                try:
                    client.reset(timeout=self._timeout_now())
                except RequestTimeout as exc:
                    return f"reset timed out: {_describe(exc)}"
                except ConnectionClosed as exc:
                    return _describe(exc)
                except PolicyServerError as exc:
                    self._log.warning("reset refused: %s", redact_text(str(exc)))
            if pending is not None:
                reason = self._infer(client, *pending)
                if reason is not None:
                    return None if self._stop.is_set() else reason
            elif not client.is_open:
                return _describe(client.closed_error())

    def _infer(self, client: PolicyClient, obs: dict[str, Any], tag: object) -> str | None:
        """Run one request and deliver its outcome; returns a loss reason or None."""
        reason: str | None = None
        timeout = self._timeout_now()
        try:
            outcome = InferOutcome.of_reply(
                tag, client.infer_reply(obs, timeout, on_sent=self._sent.set)
            )
        except CodecError as exc:  # nothing was sent; the connection is fine
            message = f"observation cannot be encoded: {exc}"
            outcome = InferOutcome(tag, {"type": "error", "message": message}, None, None, None)
        except RequestTimeout:
            reason = f"request timed out after {timeout:g} s (request_timeout_s)"
            outcome = InferOutcome(tag, None, None, None, reason)
        except (ConnectionClosed, PolicyServerError, OSError) as exc:
            reason = _describe(exc)
            outcome = InferOutcome(tag, None, None, None, reason)
        except Exception as exc:  # anything else: this request failed, the worker goes on
            reason = f"unexpected fault during the request: {_describe(exc)}"
            self._log.error("%s", reason, exc_info=True)
            outcome = InferOutcome(tag, None, None, None, reason)
        with self._lock:
            self._pending = None
            self._in_flight = False
            self._sent.set()  # also when it failed before it was written
        self._call(self._on_result, outcome)
        return reason

    def _fail_pending(self, reason: str) -> None:
        with self._lock:
            pending, self._pending = self._pending, None
            self._in_flight = False
            self._sent.set()  # a submitter waiting for the hand-off need not wait longer
        if pending is not None:
            self._call(self._on_result, InferOutcome(pending[1], None, None, None, reason))

    def _call(self, callback: Callable[[Any], None] | None, argument: Any) -> None:
        if callback is None:
            return
        try:
            callback(argument)
        except Exception:
            self._log.exception("policy connection callback %r failed", callback)
