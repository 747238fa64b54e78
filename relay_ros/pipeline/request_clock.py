"""Every time measured about the node's requests, in one place (no rclpy).

:class:`RequestClock` is the streaming core's stopwatch: when a request started on
the node (its tick's frame reads included) and when it went on the wire, what the
frames cost, how long it has been in flight, the observation -> reply latency on the
node clock and the upload / server / download split of each request
(:class:`~relay_ros.wire.request_timing.RequestTiming`). A request is timed through
the :class:`RequestStart` the clock hands out when it begins; that handle travels
with the request (in its tag) and comes back with the outcome.

The scheduler plans with :attr:`RequestClock.estimate`, the time from each request
to its reply (for an observation that shows its frames' moment, ``t_obs`` is
earlier than the request: the frames' age is not latency the request lead must
cover), without the first reply of each connection: a server's first inference (loading, compiling,
warming caches) can take seconds, and one such spike kept in the estimate sizes the
early-request lead and the action prefix's delay for it until it leaves the window
(lerobot #4223, #4454). It stands in only while it is the only measurement (for the
second request: a warm server's first reply is a good guess, and a slow warm-up only
makes that request early and its prefix long); the second reply replaces it.
:attr:`RequestClock.latency` keeps every reply, for the diagnostics and the request
timeout.

Two clocks: ``perf_clock`` (monotonic wall time, for the node's own work) and the
node clock (``now`` passed in, sim time or ROS time, for everything the scheduler
plans with). Not thread-safe except the :class:`LatencyStats`, which the diagnostics
and the connection's worker may read from any thread.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from relay_ros.pipeline.stats import LatencyStats, StatsError
from relay_ros.wire.request_timing import RequestTiming

__all__ = [
    "WarmupExcluded",
    "FIRST_REQUEST_TIMEOUT_S",
    "MIN_REQUEST_TIMEOUT_S",
    "REQUEST_TIMEOUT_P99_FACTOR",
    "RequestClock",
    "RequestStart",
]

#: Request timeout while no latency has been measured yet (s): a server's first
#: inference after it started may take much longer than the following ones.
FIRST_REQUEST_TIMEOUT_S = 30.0
#: Shortest automatic request timeout (s), and the factor on the p99 latency.
MIN_REQUEST_TIMEOUT_S = 2.0
REQUEST_TIMEOUT_P99_FACTOR = 10.0


@dataclass(frozen=True, eq=False)
class RequestStart:
    """The start of one request, as :meth:`RequestClock.start` recorded it.

    Attributes:
        started: ``perf_clock()`` when the request's tick began reading frames (or
            when the request was decided, on a tick that read none): the start of
            ``request_to_wire``.
        frame_before_s: Processing time (read and conversion) of the request's
            newest frame when that was done on an earlier tick; 0 when this tick
            read or converted it (``started`` covers it then).
        requested_at: When the request was made, node clock (s): ``t_obs``, or
            later when the observation shows an earlier moment (its frames').
    """

    started: float
    frame_before_s: float
    requested_at: float


class WarmupExcluded(LatencyStats):
    """:class:`LatencyStats` that leaves out the first sample after :meth:`expect_warmup`.

    That sample (a connection's first reply) stands in for the statistics only while
    the window has nothing else; the next sample replaces it.
    """

    def __init__(self, window: int = 100) -> None:
        super().__init__(window)
        self._expect = False
        self._warmup: float | None = None

    def expect_warmup(self) -> None:
        """The next sample is a warm-up."""
        self._expect = True

    def add(self, seconds: float) -> None:
        """Record one latency in seconds (finite, >= 0), unless it is the warm-up."""
        if self._expect:
            value = float(seconds)
            if not math.isfinite(value) or value < 0.0:
                raise StatsError(f"latency {seconds!r} s must be a finite number >= 0")
            self._expect = False
            if super().percentile(50) is None:
                self._warmup = value
            return  # after a reconnect the earlier samples speak for the server
        self._warmup = None
        super().add(seconds)

    def percentile(self, q: float) -> float | None:
        """As :meth:`LatencyStats.percentile`; the warm-up sample while it is the only one."""
        value = super().percentile(q)
        return self._warmup if value is None else value


class RequestClock:
    """Times the node's requests (see the module docstring).

    Args:
        perf_clock: Monotonic clock for the node's own work (seconds).
    """

    def __init__(self, perf_clock: Callable[[], float] = time.perf_counter) -> None:
        self.perf_clock = perf_clock
        #: Observation -> reply on the node clock, every action reply (refused ones too).
        self.latency = LatencyStats()
        #: The same without the warm-up reply: what the scheduler plans with.
        self.estimate = WarmupExcluded()
        self.frame_processing = LatencyStats()
        self.request_to_wire = LatencyStats()
        self.image_to_wire = LatencyStats()
        self.upload = LatencyStats()
        self.server = LatencyStats()
        self.download = LatencyStats()
        self.total = LatencyStats()
        self.request_bytes = LatencyStats()
        self._in_flight: RequestStart | None = None
        self._sent_at: float | None = None  # node clock

    # ------------------------------------------------------------------ what is known
    @property
    def pipeline(self) -> dict[str, LatencyStats]:
        """``frame_processing``, ``request_to_wire`` and ``image_to_wire`` (seconds)."""
        return {
            "frame_processing": self.frame_processing,
            "request_to_wire": self.request_to_wire,
            "image_to_wire": self.image_to_wire,
        }

    @property
    def network(self) -> dict[str, LatencyStats]:
        """``upload``, ``server``, ``download``, ``total`` (s) and ``request_bytes``."""
        return {
            "upload": self.upload,
            "server": self.server,
            "download": self.download,
            "total": self.total,
            "request_bytes": self.request_bytes,
        }

    def request_timeout(self, fixed_s: float | None) -> float:
        """Seconds one request may take before the connection drops it and reconnects.

        ``fixed_s`` (the ``request_timeout_s`` setting) when set; automatic (None):
        ``max(2 s, 10 x p99)`` of the measured latency, and 30 s before the first
        reply (a server's first inference may be slow). Safe from any thread.
        """
        if fixed_s is not None:
            return fixed_s
        p99 = self.latency.percentile(99)
        if p99 is None:
            return FIRST_REQUEST_TIMEOUT_S
        return max(MIN_REQUEST_TIMEOUT_S, REQUEST_TIMEOUT_P99_FACTOR * p99)

    def in_flight_for(self, now: float) -> float | None:
        """Seconds the request on the wire has been in flight (node clock), or None."""
        return None if self._sent_at is None else now - self._sent_at

    # ------------------------------------------------------------------ a request's life
    def frames_processed(self, seconds: float, count: int = 1) -> None:
        """``count`` frames were read and converted in ``seconds`` in all."""
        if count > 0:
            for _ in range(count):
                self.frame_processing.add(seconds / count)

    def start(self, started: float, frame_before_s: float, now: float) -> RequestStart:
        """A request begins at ``now`` (node clock); ``started`` is on ``perf_clock``
        (see :class:`RequestStart`)."""
        return RequestStart(started, frame_before_s, now)

    def sent(self, start: RequestStart, now: float) -> None:
        """The connection took the request at ``now`` (node clock)."""
        self._in_flight = start
        self._sent_at = now

    def finished(self, start: RequestStart, outcome: Any) -> None:
        """The request's outcome (a ``wire.connection.InferOutcome``) came back: its
        time to the wire and its network split are recorded, whatever the reply."""
        if outcome.sent_at is not None:
            to_wire = outcome.sent_at - start.started
            self.request_to_wire.add(to_wire)
            self.image_to_wire.add(start.frame_before_s + to_wire)
        timing = getattr(outcome, "timing", None)
        if isinstance(timing, RequestTiming):
            self.upload.add(timing.upload_s)
            self.download.add(timing.download_s)
            self.total.add(max(0.0, timing.total_s))
            self.request_bytes.add(timing.bytes_sent)
            if timing.server_s is not None:
                self.server.add(timing.server_s)
        if start is self._in_flight:
            self.abandon()

    def replied(self, t_obs: float, start: RequestStart, now: float) -> None:
        """An action reply to the observation taken at ``t_obs`` (requested as
        ``start``) arrived at ``now``: ``latency`` from ``t_obs``, ``estimate`` from
        the request (what the scheduler can plan with: it requests at ``now``)."""
        self.latency.add(now - t_obs)
        self.estimate.add(now - start.requested_at)

    def connected(self) -> None:
        """A new connection: its first reply is a warm-up (see :class:`WarmupExcluded`)."""
        self.estimate.expect_warmup()

    def abandon(self) -> None:
        """Nothing is in flight any more (a disconnect, a reply)."""
        self._in_flight = None
        self._sent_at = None
