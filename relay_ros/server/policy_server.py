"""The reference policy server: asyncio WebSocket transport around validation and a policy.

One :class:`PolicyServer` serves one or more models on ``/{model}`` (unknown path ->
HTTP 404; ``/healthz`` -> 200). Per connection: metadata once the model is "loaded",
then exactly one reply per binary frame, in order. Every failure a client can cause is
answered with one of the protocol's error maps and the connection stays open; internal
details are logged here, never sent. Frames above ``max_message_mib`` get
``Invalid request payload``; frames above the hard cap (twice that, at least 1 MiB
more) make websockets close the socket with code 1009, because they are not
buffered at all.

Decoding is bounded (:data:`relay_ros.wire.codec.OBSERVATION_LIMITS`: objects,
nesting, string, map and array lengths, checked before anything is built) and runs,
with validation, on the server's decode threads (started with the server, at most
``DECODE_THREADS``), so a client sending a costly frame delays only its own reply.
Log lines quote client values through :func:`relay_ros.logsafe.shorten`.

Its options are :mod:`relay_ros.server.options`; :mod:`relay_ros.server.in_thread`
runs it in a background thread.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import functools
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any
from urllib.parse import urlsplit

import numpy as np
from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request as HttpRequest
from websockets.http11 import Response

from relay_ros.formats import WireFormat, format_for
from relay_ros.formats.embodiment import Embodiment, load_embodiment
from relay_ros.formats.requests import (
    INTERNAL_ERROR,
    INVALID_PAYLOAD,
    ObservationError,
    PublicRequestError,
    Request,
)
from relay_ros.logsafe import shorten
from relay_ros.server.chunk_noise import ChunkNoise
from relay_ros.server.idle_watchdog import IdleWatchdog
from relay_ros.server.metadata import build_metadata
from relay_ros.server.options import (
    ServerOptions,
    ServerStartError,
    hard_size_limit,
    load_policy_factory,
)
from relay_ros.server.sessions import Session, SessionTable
from relay_ros.server.stats import ServerStats
from relay_ros.server.synthetic import ReferencePolicy
from relay_ros.wire.codec import OBSERVATION_LIMITS, CodecError, packb, unpackb

__all__ = ["DECODE_THREADS", "PolicyServer"]

logger = logging.getLogger(__name__)

#: Threads that decode and validate frames off the event loop.
DECODE_THREADS = 4


@dataclass(frozen=True)
class _Refusal:
    """An error reply decided off the loop: public message and log detail."""

    message: str
    detail: str | None


@dataclass(frozen=True)
class _Control:
    """A decoded control frame (a map with ``"type"``)."""

    frame: dict[str, Any]


@dataclass(frozen=True)
class _Accepted:
    """A decoded and validated observation."""

    obs: dict[str, Any]
    request: Request


@dataclass
class _Connection:
    model: str
    peer: str
    sessions: SessionTable


def _error(message: str) -> dict[str, str]:
    return {"type": "error", "message": message}


def _model_from_path(path: str) -> str:
    return urlsplit(path).path.strip("/")


class PolicyServer:
    """Serves the models of ``options`` until :meth:`request_stop`.

    Construction resolves the embodiment and the ``--policy`` import (fast failure on
    typos); the policy factory itself runs during "loading", after the socket listens.

    Raises:
        ServerStartError: bad embodiment or policy spec.
    """

    def __init__(self, options: ServerOptions) -> None:
        self.options = options
        self.stats = ServerStats()
        self.port: int | None = None
        self._embodiment: Embodiment | None = None
        self._formats: dict[str, WireFormat] = {
            model: format_for(model, options.layout) for model in options.models
        }
        if any(fmt.needs_embodiment for fmt in self._formats.values()):
            try:
                self._embodiment = load_embodiment(options.embodiment)
            except (ValueError, RuntimeError) as exc:
                raise ServerStartError(str(exc)) from exc
        self._factory: Callable[[], Any] | None = (
            load_policy_factory(options.policy)
            if isinstance(options.policy, str)
            else options.policy
        )
        self._policy: Any = None
        self._metadata: dict[str, dict[str, Any]] = {}
        self._synthetic: dict[str, ReferencePolicy] = {}
        self._sessions_made = 0
        self._validators: dict[str, Callable[[dict[str, Any]], Request]] = {}
        self._action_dims: dict[str, int] = {}
        self._max_message_bytes = options.max_message_bytes
        self._limits = dataclasses.replace(
            OBSERVATION_LIMITS, max_bytes=options.max_message_bytes, max_bin_len=None
        )
        self._jitter = random.Random()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._loaded: asyncio.Event | None = None
        self._stop_requested = False
        self._decoder: concurrent.futures.ThreadPoolExecutor | None = None
        self._build_metadata(None)

    # ----------------------------------------------------------------- metadata
    def _build_metadata(self, overrides: dict[str, Any] | None) -> None:
        opts = self.options
        for model in opts.models:
            meta = build_metadata(
                model,
                lora_adapters=opts.lora_adapters,
                needs_session_id=opts.needs_session_id,
                direct_url=opts.direct_url,
                embodiment=self._embodiment,
                overrides=overrides,
                # The seeds' extension: an openpi layout's server (like openpi's) has none.
                action_prefix=opts.action_prefix and self._factory is None and not opts.layout,
                layout=opts.layout,
            )
            self._metadata[model] = meta
            self._synthetic[model] = ReferencePolicy(
                opts.synthetic,
                action_horizon=int(meta["action_horizon"]),
                control_hz=float(meta["control_hz"]),
                noise=ChunkNoise(scale=opts.chunk_noise),
                robot=opts.policy_robot,
            )
            self._validators[model] = self._make_validator(model, meta)

    def _make_validator(
        self, model: str, meta: dict[str, Any]
    ) -> Callable[[dict[str, Any]], Request]:
        """The checks for ``model`` with its per-model arguments bound once (its wire
        format's, :mod:`relay_ros.formats`)."""
        opts = self.options
        fmt = self._formats[model]
        try:
            self._action_dims[model] = fmt.action_width(meta, self._embodiment)
        except (KeyError, TypeError, ValueError):
            # A custom policy's metadata made it unusable; its own policy makes the
            # actions, so only the checks below (which then refuse) need it.
            self._action_dims.pop(model, None)
        return fmt.validator(
            meta,
            embodiment=self._embodiment,
            needs_session_id=opts.needs_session_id,
            adapters=opts.lora_adapters,
            prefix_horizon=int(meta["action_horizon"]) if meta.get("action_prefix") else None,
        )

    def metadata(self, model: str) -> dict[str, Any]:
        """A copy of the metadata sent on ``/{model}``."""
        return dict(self._metadata[model])

    # ------------------------------------------------------------------ lifetime
    async def serve_forever(self, on_bound: Callable[[int], None] | None = None) -> None:
        """Listen, "load", and serve until :meth:`request_stop`; then close every connection.

        Args:
            on_bound: called with the bound port as soon as the socket listens.

        Raises:
            OSError: the address cannot be bound.
            ServerStartError: the policy factory failed.
        """
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        self._loaded = asyncio.Event()
        if self._stop_requested:
            self._stop.set()
        opts = self.options
        self._decoder = concurrent.futures.ThreadPoolExecutor(
            max_workers=DECODE_THREADS, thread_name_prefix="relay-server-decode"
        )
        # Start the first decode thread now, not on the first request's path.
        await self._loop.run_in_executor(self._decoder, time.perf_counter)
        try:
            await self._serve(opts, on_bound)
        finally:
            self._decoder.shutdown(wait=False, cancel_futures=True)

    async def _serve(self, opts: ServerOptions, on_bound: Callable[[int], None] | None) -> None:
        assert self._stop is not None
        async with serve(
            self._handler,
            opts.host,
            opts.port,
            process_request=self._process_request,
            compression=None,
            max_size=hard_size_limit(opts.max_message_bytes),
            # One request is in flight per connection; a client that pipelines frames gets
            # TCP backpressure instead of making the server buffer many large frames.
            max_queue=4,
        ) as server:
            self.port = int(next(iter(server.sockets)).getsockname()[1])
            logger.info("listening on ws://%s:%d", opts.host, self.port)
            if on_bound is not None:
                on_bound(self.port)
            loader = asyncio.create_task(self._load())
            stopper = asyncio.create_task(self._stop.wait())
            await asyncio.wait({loader, stopper}, return_when=asyncio.FIRST_COMPLETED)
            if loader.done() and loader.exception() is None:
                await stopper
            failure = loader.exception() if loader.done() and not loader.cancelled() else None
            loader.cancel()
            stopper.cancel()
        logger.info("server on port %d stopped", self.port)
        if failure is not None:
            raise ServerStartError(f"policy failed to load: {failure}") from failure

    async def _load(self) -> None:
        started = time.monotonic()
        if self._factory is not None:
            self._policy = await asyncio.to_thread(self._factory)
            if not callable(getattr(self._policy, "infer", None)):
                raise TypeError(f"policy {self._policy!r} has no infer(obs) method")
            overrides = getattr(self._policy, "metadata", None)
            if isinstance(overrides, dict):
                self._build_metadata(overrides)
        remaining = self.options.load_delay_s - (time.monotonic() - started)
        if remaining > 0:
            await asyncio.sleep(remaining)
        assert self._loaded is not None
        self._loaded.set()
        logger.info("models %s loaded", ", ".join(self.options.models))

    def request_stop(self) -> None:
        """Ask :meth:`serve_forever` to return; safe from any thread, idempotent."""
        self._stop_requested = True
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # loop closed meanwhile
                loop.call_soon_threadsafe(stop.set)

    # ---------------------------------------------------------------- transport
    def _process_request(
        self, connection: ServerConnection, request: HttpRequest
    ) -> Response | None:
        path = urlsplit(request.path).path
        if path == "/healthz":
            return connection.respond(HTTPStatus.OK, "OK\n")
        if _model_from_path(request.path) not in self._metadata:
            logger.info("404 for path %s (serving %s)", shorten(path, 100), list(self._metadata))
            return connection.respond(
                HTTPStatus.NOT_FOUND,
                f"no model at {path!r}; this server serves {list(self._metadata)!r}\n",
            )
        return None

    async def _wait_loaded(self, ws: ServerConnection) -> bool:
        """True once loaded; False if the client went away first."""
        assert self._loaded is not None
        if self._loaded.is_set():
            return True
        loaded = asyncio.ensure_future(self._loaded.wait())
        closed = asyncio.ensure_future(ws.wait_closed())
        done, pending = await asyncio.wait({loaded, closed}, return_when=asyncio.FIRST_COMPLETED)
        for task in pending:
            task.cancel()
        return loaded in done

    async def _handler(self, ws: ServerConnection) -> None:
        assert ws.request is not None
        model, peer = _model_from_path(ws.request.path), str(ws.remote_address)
        sessions = SessionTable(
            self.options.max_sessions,
            self._new_session,
            f"{peer} {model}",
            functools.partial(self.stats.bump, "sessions_evicted"),
        )
        conn = _Connection(model=model, peer=peer, sessions=sessions)
        self.stats.bump("connections_opened")
        watchdog: IdleWatchdog | None = None
        try:
            if not await self._wait_loaded(ws):
                return
            await ws.send(packb(self._metadata[conn.model]))
            recv, send, reply = ws.recv, ws.send, self._reply
            if not self.options.idle_timeout_s:
                while True:
                    await send(await reply(conn, await recv()))
            watchdog = IdleWatchdog(ws, self.options.idle_timeout_s, conn.peer)
            while True:
                message = await recv()  # raises ConnectionClosed once the watchdog closed
                watchdog.busy = True
                await send(await reply(conn, message))
                watchdog.idle()
        except ConnectionClosed:
            pass
        except Exception:
            # One bad client never hurts another: log with the traceback and drop only it.
            logger.error("connection %s failed", conn.peer, exc_info=True)
        finally:
            try:
                if watchdog is not None:
                    await watchdog.stop()
            finally:
                self.stats.bump("connections_closed")

    # ----------------------------------------------------------------- requests
    async def _reply(self, conn: _Connection, message: str | bytes) -> bytes:
        """Encoded reply to one client frame; never raises for client input."""
        self.stats.bump("frames")
        try:
            return await self._answer(conn, message)
        except Exception:
            # A check or policy bug must not drop the connection: log it, answer generically.
            logger.error("%s %s: request failed", conn.peer, conn.model, exc_info=True)
            return self._refuse(conn, INTERNAL_ERROR, None)

    def inspect_frame(self, model: str, message: str | bytes) -> _Refusal | _Control | _Accepted:
        """Decode and validate one client frame for ``model``: a refusal (public
        message and log detail), a control frame, or an accepted observation.

        Pure and thread-safe (the server runs it on a worker thread). Never raises
        for any client input.
        """
        if isinstance(message, str):
            return _Refusal(INVALID_PAYLOAD, "text frame; expected binary msgpack")
        if len(message) > self._max_message_bytes:
            return _Refusal(
                INVALID_PAYLOAD,
                f"frame of {len(message)} bytes exceeds limit of {self._max_message_bytes} bytes",
            )
        try:
            obs = unpackb(message, self._limits)
        except CodecError as exc:
            return _Refusal(INVALID_PAYLOAD, str(exc))
        if not isinstance(obs, dict):
            return _Refusal(INVALID_PAYLOAD, f"frame holds {type(obs).__name__}; expected a map")
        if "type" in obs:
            return _Control(obs)
        try:
            return _Accepted(obs, self._validators[model](obs))
        except PublicRequestError as exc:
            return _Refusal(str(exc), str(exc))
        except ObservationError as exc:
            return _Refusal(INTERNAL_ERROR, str(exc))

    async def _answer(self, conn: _Connection, message: str | bytes) -> bytes:
        started = time.perf_counter()
        assert self._loop is not None and self._decoder is not None
        verdict = await self._loop.run_in_executor(
            self._decoder, self.inspect_frame, conn.model, message
        )
        if isinstance(verdict, _Refusal):
            return self._refuse(conn, verdict.message, verdict.detail)
        if isinstance(verdict, _Control):
            return await self._control(conn, verdict.frame)
        obs, request = verdict.obs, verdict.request
        session = conn.sessions.get(request.session_id)
        session.steps += 1
        if self.options.observation_hook is not None:
            self.options.observation_hook(conn.model, obs)
        if self._policy is not None:
            # A real model may block for a long time: keep the loop free for other clients.
            result = await asyncio.to_thread(self._policy.infer, obs)
            reply = dict(result) if isinstance(result, dict) else {"actions": result}
        else:
            reply = {"actions": self._synthetic_actions(conn.model, request, session)}
        opts = self.options
        if opts.latency_ms or opts.jitter_ms:
            delay_ms = opts.latency_ms
            if opts.jitter_ms:
                delay_ms += self._jitter.uniform(-opts.jitter_ms, opts.jitter_ms)
            elapsed_ms = (time.perf_counter() - started) * 1000.0
            if delay_ms > elapsed_ms:
                await asyncio.sleep((delay_ms - elapsed_ms) / 1000.0)
        timing = reply.get("server_timing")
        timing = dict(timing) if timing else {}
        timing["infer_ms"] = (time.perf_counter() - started) * 1000.0
        reply["server_timing"] = timing
        return packb(reply)

    def _new_session(self) -> Session:
        """A session whose random stream is seeded from ``options.seed`` when set."""
        if self.options.seed is None:
            return Session()
        self._sessions_made += 1
        return Session(rng=np.random.default_rng([self.options.seed, self._sessions_made]))

    def _refuse(self, conn: _Connection, message: str, detail: str | None) -> bytes:
        self.stats.bump("errors")
        if detail is not None:
            logger.warning(
                "%s %s: %s (%s)", conn.peer, conn.model, shorten(message), shorten(detail)
            )
        return packb(_error(message))

    def _synthetic_actions(
        self, model: str, request: Request, session: Session
    ) -> np.ndarray | dict[str, np.ndarray]:
        """The built-in policy's chunk in the model's wire format (π0/π0.5 an array,
        GR00T action groups, a layout its action parts)."""
        rng = (
            np.random.default_rng(request.seed % 2**64) if request.seed is not None else session.rng
        )
        flat = self._synthetic[model].chunk(request, rng, action_dim=self._action_dims[model])
        return self._formats[model].reply_actions(flat, self._embodiment)

    async def _control(self, conn: _Connection, frame: dict[str, Any]) -> bytes:
        kind = frame.get("type")
        if kind == "reset":
            cleared = conn.sessions.clear()
            reset = getattr(self._policy, "reset", None)
            if callable(reset):
                await asyncio.to_thread(reset)
            logger.info("%s %s: reset, %d session(s) cleared", conn.peer, conn.model, cleared)
            return packb({"type": "reset", "sessions_cleared": cleared})
        return self._refuse(
            conn, INVALID_PAYLOAD, f"unknown control frame type {shorten(kind, 80)}"
        )
