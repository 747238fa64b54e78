"""The link emulator's proxy: a TCP proxy on loopback that shapes traffic like a real link.

On loopback a 450 kB request takes a fraction of a millisecond; a robot talks to a
cloud GPU over a link with a few Mbit/s of uplink and tens of ms of round trip.
:class:`LinkProxy` sits between client and server and imposes a
:class:`~relay_ros.sim.link_profiles.LinkProfile`:

- **bandwidth** per direction, as a token bucket (rate = the link's bandwidth, depth
  = ``burst_bytes``): bytes leave no faster than the link can carry them, and a
  backlog queues up behind them;
- **one-way delay with jitter**: each segment is delivered ``delay_ms`` (+- jitter)
  after it left. A new jitter value is drawn whenever the direction was idle, so
  the segments of one message share it (the path's delay changes slowly compared
  to one burst), and release times never decrease, so bytes are never reordered;
- **stalls**: every ``stall_every_s`` seconds nothing is delivered for ``stall_ms``
  (held, not lost: TCP would retransmit it).

Both directions of all connections through one proxy share its link (uplink =
client -> target). The proxy reads from a side only while less than about two
bandwidth-delay products of that direction are queued, so a fast sender is slowed
down by TCP flow control as on a real link. Connecting to the target has a deadline.
:mod:`relay_ros.sim.link` runs a proxy in a thread and from the command line.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import random
import socket
from dataclasses import dataclass

from relay_ros.sim.link_profiles import LinkProfile

__all__ = ["CONNECT_TIMEOUT_S", "LinkError", "LinkProxy", "LinkStats"]

logger = logging.getLogger(__name__)

#: Deadline for connecting to the target, seconds.
CONNECT_TIMEOUT_S = 5.0
# Largest piece of data scheduled as one unit (a few TCP segments), bytes.
_SEGMENT_BYTES = 16 * 1024
# Bytes read from a socket per call.
_READ_BYTES = 64 * 1024
# Shorter waits are not slept: the event loop's timers resolve about 1 ms (epoll), so
# sleeping would add more delay than it models (the lan preset's 0.25 ms).
_MIN_SLEEP_S = 0.0005
# Queue limit of an unlimited-bandwidth direction, bytes.
_UNLIMITED_QUEUE_BYTES = 4 * 2**20


class LinkError(RuntimeError):
    """The proxy cannot start (address in use, bad address) or was used wrongly."""


@dataclass(frozen=True)
class LinkStats:
    """What went through a proxy so far.

    Attributes:
        connections: Connections accepted.
        bytes_up: Bytes delivered client -> target.
        bytes_down: Bytes delivered target -> client.
        stalled_segments: Segments whose delivery a stall postponed.
    """

    connections: int
    bytes_up: int
    bytes_down: int
    stalled_segments: int


class _Stalls:
    """The periodic stall windows ``[start + k*every, start + k*every + length)``, k >= 1."""

    def __init__(self, start: float, every_s: float | None, length_s: float) -> None:
        self._start = start
        self._every = every_s if every_s and length_s > 0 else None
        self._length = length_s

    def push_past(self, t: float) -> float:
        """``t``, or the end of the stall window ``t`` falls into."""
        if self._every is None:
            return t
        k = math.floor((t - self._start) / self._every)
        if k < 1:
            return t
        window_start = self._start + k * self._every
        if t < window_start + self._length:
            return window_start + self._length
        return t


class _Shaper:
    """One direction of the link: token bucket, delay with jitter, stalls, FIFO order."""

    def __init__(
        self,
        mbit_s: float | None,
        burst_bytes: int,
        delay_s: float,
        jitter_s: float,
        stalls: _Stalls,
        rng: random.Random,
        now: float,
    ) -> None:
        self.rate = None if mbit_s is None else mbit_s * 1e6 / 8.0  # bytes per second
        self._burst = float(burst_bytes)
        self._tokens = float(burst_bytes)
        self._t = now
        self._delay = delay_s
        self._jitter_range = jitter_s
        self._jitter = 0.0
        self._stalls = stalls
        self._rng = rng
        self._last_release = now
        self.stalled_segments = 0
        self.queue_limit = (
            _UNLIMITED_QUEUE_BYTES
            if self.rate is None
            else max(4 * _SEGMENT_BYTES, int(2 * self.rate * (delay_s + jitter_s + 0.01)))
        )

    def schedule(self, nbytes: int, now: float) -> float:
        """When ``nbytes`` arriving at ``now`` are delivered at the far end."""
        if self.rate is None:
            sent = now
        else:
            self._tokens = min(self._burst, self._tokens + (now - self._t) * self.rate)
            self._t = now
            self._tokens -= nbytes
            sent = now if self._tokens >= 0 else now + (-self._tokens) / self.rate
        if now >= self._last_release and self._jitter_range > 0:
            self._jitter = self._rng.uniform(-self._jitter_range, self._jitter_range)
        release = sent + max(0.0, self._delay + self._jitter)
        stalled = self._stalls.push_past(release)
        if stalled != release:
            self.stalled_segments += 1
        release = max(stalled, self._last_release)
        self._last_release = release
        return release


class _Pipe:
    """Moves one direction of one connection through a shaper."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        shaper: _Shaper,
        counter: list[int],
    ) -> None:
        self._reader = reader
        self._writer = writer
        self._shaper = shaper
        self._counter = counter
        self._queue: asyncio.Queue[tuple[float, bytes | None]] = asyncio.Queue(
            maxsize=max(2, shaper.queue_limit // _SEGMENT_BYTES)
        )

    async def read_side(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            data = await self._reader.read(_READ_BYTES)
            if not data:
                break
            for i in range(0, len(data), _SEGMENT_BYTES):
                segment = data[i : i + _SEGMENT_BYTES]
                release = self._shaper.schedule(len(segment), loop.time())
                await self._queue.put((release, segment))
        # EOF: forward the half-close after the queued bytes.
        await self._queue.put((0.0, None))

    async def write_side(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            release, segment = await self._queue.get()
            if segment is None:
                if self._writer.can_write_eof() and not self._writer.is_closing():
                    with contextlib.suppress(OSError):
                        self._writer.write_eof()
                return
            wait = release - loop.time()
            if wait > _MIN_SLEEP_S:
                await asyncio.sleep(wait)
            # Counted before the write: another thread may read the bytes (and the
            # stats) before this line would run after it.
            self._counter[0] += len(segment)
            self._writer.write(segment)
            await self._writer.drain()


class LinkProxy:
    """The emulated link as an asyncio TCP proxy (run it on one event loop).

    Args:
        profile: What the link does (a preset from ``PRESETS`` or your own).
        target: (host, port) every accepted connection is forwarded to.
        listen: (host, port) to listen on; port 0 picks a free port.
        seed: Seed of the jitter's random numbers (None: from the OS).
    """

    def __init__(
        self,
        profile: LinkProfile,
        target: tuple[str, int],
        *,
        listen: tuple[str, int] = ("127.0.0.1", 0),
        seed: int | None = None,
    ) -> None:
        if not isinstance(profile, LinkProfile):
            raise LinkError(f"profile is {type(profile).__name__}; expected a LinkProfile")
        self.profile = profile
        self.target = target
        self.listen = listen
        self._seed = seed
        self._server: asyncio.AbstractServer | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._up_bytes = [0]
        self._down_bytes = [0]
        self._connections = 0
        self._up: _Shaper | None = None
        self._down: _Shaper | None = None
        self.port: int | None = None

    async def start(self) -> int:
        """Listen; return the bound port.

        Raises:
            LinkError: the address cannot be bound.
        """
        loop = asyncio.get_running_loop()
        now = loop.time()
        p = self.profile
        rng = random.Random(self._seed)
        stalls = _Stalls(now, p.stall_every_s, p.stall_ms / 1000.0)
        delay, jitter = p.delay_ms / 1000.0, p.jitter_ms / 1000.0
        self._up = _Shaper(p.up_mbit_s, p.burst_bytes, delay, jitter, stalls, rng, now)
        self._down = _Shaper(p.down_mbit_s, p.burst_bytes, delay, jitter, stalls, rng, now)
        host, port = self.listen
        try:
            self._server = await asyncio.start_server(self._handle, host, port)
        except OSError as exc:
            raise LinkError(f"cannot listen on {host}:{port}: {exc}") from exc
        self.port = int(self._server.sockets[0].getsockname()[1])
        logger.info(
            "link %s listening on %s:%d -> %s:%d",
            p.describe(),
            host,
            self.port,
            self.target[0],
            self.target[1],
        )
        return self.port

    def stats(self) -> LinkStats:
        """Counters so far (read from any thread; integers only)."""
        stalled = sum(s.stalled_segments for s in (self._up, self._down) if s is not None)
        return LinkStats(self._connections, self._up_bytes[0], self._down_bytes[0], stalled)

    async def _handle(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None and self._up is not None and self._down is not None
        self._tasks.add(task)
        self._connections += 1
        server_w: asyncio.StreamWriter | None = None
        try:
            host, port = self.target
            try:
                server_r, opened = await asyncio.wait_for(
                    asyncio.open_connection(host, port), CONNECT_TIMEOUT_S
                )
            except (OSError, asyncio.TimeoutError) as exc:
                logger.warning("link: cannot connect to target %s:%d: %r", host, port, exc)
                return
            server_w = opened
            for stream in (client_w, server_w):
                sock = stream.get_extra_info("socket")
                if sock is not None:
                    with contextlib.suppress(OSError):
                        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            up = _Pipe(client_r, server_w, self._up, self._up_bytes)
            down = _Pipe(server_r, client_w, self._down, self._down_bytes)
            parts = [
                asyncio.ensure_future(part)
                for part in (up.read_side(), up.write_side(), down.read_side(), down.write_side())
            ]
            try:
                # A broken side (reset, write to a closed peer) ends the whole connection;
                # a clean EOF is forwarded as a half-close and the other direction goes on.
                done, _ = await asyncio.wait(parts, return_when=asyncio.FIRST_EXCEPTION)
            finally:
                for part in parts:
                    part.cancel()
                await asyncio.wait(parts, timeout=2.0)
            for part in done:
                error = part.exception() if not part.cancelled() else None
                if error is not None and not isinstance(error, OSError):
                    logger.warning("link connection ended with %r", error)
        except asyncio.CancelledError:
            pass
        finally:
            for writer in (client_w, server_w):
                if writer is not None:
                    writer.close()
            self._tasks.discard(task)

    async def close(self) -> None:
        """Stop listening and drop every connection (idempotent)."""
        if self._server is not None:
            self._server.close()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=2.0)
        if self._server is not None:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._server.wait_closed(), 2.0)
            self._server = None
