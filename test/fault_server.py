"""A policy server that misbehaves on purpose, for fault-injection tests.

``FaultServer`` speaks the relay protocol (π0.5 metadata, valid action replies) on a
real loopback WebSocket, except where a fault is queued. Faults are consumed one per
event in the order given (the next request, or the next connection for the
``OPEN_FAULTS``); when the queue is empty every request gets a valid reply. So
``FaultServer(["swallow"])`` swallows the first request and serves every later one,
which is what a recovery test needs.

Request faults (what the server does with a request):

- ``swallow``: reads it and never replies (keeps answering pings: a hung model).
- ``freeze``: reads it, then stops reading the socket (no pongs): a stopped
  process or a half-open TCP connection.
- ``close_mid_frame``: sends the first bytes of a reply frame, then drops TCP.
- ``garbage``: a binary reply that is not msgpack.
- ``bad_utf8``: a text reply that is not valid UTF-8.
- ``amplify``: ``0xdd + n + 0x90 * n``: n empty msgpack arrays (16 MiB).
- ``oversize``: a 9 MiB binary reply (over the client's default 8 MiB cap).
- ``wrong_type``: a valid msgpack reply whose actions are the int 7.
- ``slow``: replies correctly after ``slow_s`` seconds.
- ``jump_last``: a valid reply whose last action moves the first joint 2.65 rad
  (within its position limits, far beyond its velocity limit).

A valid reply holds the observed state (every action is the observation's state),
so that a robot following it stands still.

Open faults (what the server does with a new connection):

- ``stall_open``: accepts TCP and never answers the HTTP upgrade.
- ``no_metadata``: completes the upgrade and never sends metadata.
- ``bad_metadata``: metadata as a text frame that is not valid UTF-8.
- ``frozen_open``: completes the upgrade, then stops reading (no metadata, no pongs),
  like a server busy loading its model.
- ``garbage_metadata``: binary metadata that is not msgpack, then stops reading (it
  never answers the client's close).
- ``wrong_model_metadata``: valid metadata of another model family (GR00T for a π0
  server, π0.5 for a GR00T one), then stops reading.
- ``freeze_after_metadata``: sends its metadata, then stops reading (a proxy that
  offers a direct route and never answers the client's close).

Usable from any test module (client, connection, node): ``with FaultServer([...]) as
server: server.url_template``.
"""

from __future__ import annotations

import asyncio
import struct
import threading
from collections import deque
from collections.abc import Iterable
from typing import Any

import numpy as np
from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed

from relay_ros.formats.embodiment import load_embodiment
from relay_ros.server.metadata import build_metadata
from relay_ros.wire.codec import packb, unpackb

REQUEST_FAULTS = frozenset(
    {
        "swallow",
        "freeze",
        "close_mid_frame",
        "garbage",
        "bad_utf8",
        "amplify",
        "oversize",
        "wrong_type",
        "slow",
        "jump_last",
    }
)
#: How far the ``jump_last`` fault moves the first joint in its last action (rad).
JUMP_RAD = 2.65
OPEN_FAULTS = frozenset(
    {
        "stall_open",
        "no_metadata",
        "bad_metadata",
        "frozen_open",
        "garbage_metadata",
        "wrong_model_metadata",
        "freeze_after_metadata",
    }
)
AMPLIFY_COUNT = 16 * 2**20


def _server_frame(opcode: int, payload: bytes) -> bytes:
    """An unmasked server-to-client frame (RFC 6455), written raw to the socket."""
    length = len(payload)
    if length < 126:
        header = struct.pack(">BB", 0x80 | opcode, length)
    elif length < 0x10000:
        header = struct.pack(">BBH", 0x80 | opcode, 126, length)
    else:
        header = struct.pack(">BBQ", 0x80 | opcode, 127, length)
    return header + payload


class FaultServer:
    """A misbehaving policy server on 127.0.0.1 in a background thread.

    Args:
        faults: fault names (see the module docstring), consumed in order.
        slow_s: reply delay of the ``slow`` fault, seconds.
        model: model ID in the metadata (``"pi05"``, ``"pi0"`` or ``"groot"``).
    """

    def __init__(self, faults: Iterable[str] = (), *, slow_s: float = 1.0, model: str = "pi05"):
        self._request_faults: deque[str] = deque()
        self._open_faults: deque[str] = deque()
        for fault in faults:
            if fault in REQUEST_FAULTS:
                self._request_faults.append(fault)
            elif fault in OPEN_FAULTS:
                self._open_faults.append(fault)
            else:
                known = sorted(REQUEST_FAULTS | OPEN_FAULTS)
                raise ValueError(f"unknown fault {fault!r}; expected one of {known}")
        self.slow_s = slow_s
        embodiment = load_embodiment(None) if model == "groot" else None
        self.metadata = build_metadata(model, embodiment=embodiment)
        self.model = model
        self.connections = 0
        self.requests = 0
        self.replies = 0
        self.port = 0
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Future[None] | None = None
        self._thread: threading.Thread | None = None

    # Set-up.

    @property
    def url_template(self) -> str:
        """``ws://127.0.0.1:PORT/{model}``."""
        return f"ws://127.0.0.1:{self.port}/{{model}}"

    def add_faults(self, *faults: str) -> None:
        """Queue more faults (thread-safe)."""
        with self._lock:
            for fault in faults:
                (self._open_faults if fault in OPEN_FAULTS else self._request_faults).append(fault)

    def __enter__(self) -> FaultServer:
        ready = threading.Event()
        self._thread = threading.Thread(
            target=asyncio.run, args=(self._main(ready),), name="fault-server", daemon=True
        )
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("fault server did not start within 10 s")
        return self

    def __exit__(self, *exc_info: object) -> None:
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None:
            loop.call_soon_threadsafe(lambda: stop.done() or stop.set_result(None))
        if self._thread is not None:
            self._thread.join(10)

    # Server.

    def _next(self, queue: deque[str]) -> str | None:
        with self._lock:
            return queue.popleft() if queue else None

    async def _main(self, ready: threading.Event) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = self._loop.create_future()
        async with serve(
            self._handler,
            "127.0.0.1",
            0,
            process_request=self._process_request,
            compression=None,
            max_size=None,
            ping_interval=None,
        ) as server:
            self.port = int(next(iter(server.sockets)).getsockname()[1])
            ready.set()
            await self._stop
            server.close(close_connections=False)
            for connection in list(server.connections):
                connection.transport.abort()

    async def _process_request(self, connection: ServerConnection, request: Any) -> None:
        with self._lock:
            self.connections += 1
            stall = bool(self._open_faults) and self._open_faults[0] == "stall_open"
            if stall:
                self._open_faults.popleft()
        if stall:
            assert self._stop is not None
            await asyncio.shield(self._stop)  # never answer the upgrade
            connection.transport.abort()
        return None

    async def _handler(self, ws: ServerConnection) -> None:
        fault = self._next(self._open_faults)
        try:
            if fault == "no_metadata":
                await ws.wait_closed()
                return
            if fault == "frozen_open":
                ws.transport.pause_reading()
                await ws.wait_closed()
                return
            if fault == "bad_metadata":
                ws.transport.write(_server_frame(0x1, b"\xff\xfe not utf-8"))
                await ws.wait_closed()
                return
            if fault in ("garbage_metadata", "wrong_model_metadata"):
                await ws.send(b"\xc1 not msgpack" if fault == "garbage_metadata" else self._other())
                ws.transport.pause_reading()
                await ws.wait_closed()
                return
            await ws.send(packb(self.metadata))
            if fault == "freeze_after_metadata":
                ws.transport.pause_reading()
                await ws.wait_closed()
                return
            async for message in ws:
                with self._lock:
                    self.requests += 1
                if not await self._answer(ws, message):
                    return
        except ConnectionClosed:
            pass

    async def _answer(self, ws: ServerConnection, message: Any) -> bool:
        """Reply to one request (or misbehave); False ends the connection handler."""
        fault = self._next(self._request_faults)
        if fault == "swallow":
            return True
        if fault == "freeze":
            ws.transport.pause_reading()
            await ws.wait_closed()
            return False
        if fault == "close_mid_frame":
            ws.transport.write(struct.pack(">BBH", 0x82, 126, 1000) + b"\x00" * 10)
            ws.transport.abort()
            return False
        if fault == "garbage":
            await ws.send(b"\xc1\xc1 not msgpack")
        elif fault == "bad_utf8":
            ws.transport.write(_server_frame(0x1, b"bad \xff\xfe text"))
        elif fault == "amplify":
            await ws.send(b"\xdd" + struct.pack(">I", AMPLIFY_COUNT) + b"\x90" * AMPLIFY_COUNT)
        elif fault == "oversize":
            await ws.send(b"\x00" * (9 * 2**20))
        elif fault == "wrong_type":
            await ws.send(packb({"actions": 7}))
        else:
            if fault == "slow":
                await asyncio.sleep(self.slow_s)
            actions = self._actions(message)
            if fault == "jump_last":
                actions[-1, 0] += JUMP_RAD
            await ws.send(packb({"actions": actions, "server_timing": {"infer_ms": 1.0}}))
        with self._lock:
            self.replies += 1
        return True

    def _other(self) -> bytes:
        """Metadata of a model of the other family."""
        if self.model == "groot":
            return packb(build_metadata("pi05"))
        return packb(build_metadata("groot", embodiment=load_embodiment(None)))

    def _actions(self, message: Any) -> Any:
        """Actions that hold the observed state (zeros for GR00T, or when the request
        carries no state)."""
        meta = self.metadata
        horizon = int(meta["action_horizon"])
        if self.model == "groot":
            return {
                key: np.zeros((1, horizon, 1), np.float32) for key in meta.get("action_keys", [])
            }
        width = int(meta["action_dim"])
        state = np.zeros(width, np.float32)
        try:
            observed = np.asarray(unpackb(message)["state"], np.float32).reshape(-1)[:width]
            state[: observed.size] = observed
        except (KeyError, TypeError, ValueError):
            pass
        return np.tile(state, (horizon, 1))
