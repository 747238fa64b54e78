"""Rolling latency percentiles and counters for the policy node's diagnostics.

The node reports inference latency (p50/p99), chunk counts, errors and refusal
reasons on ``/diagnostics`` at 1 Hz, and the chunk scheduler derives its
automatic request lead from a high latency percentile. These helpers keep that
bookkeeping in one small, tested place.

Thread safety: every class here guards its state with a lock, because the node
updates some of them from its request worker thread while the diagnostics timer
reads them from the executor thread. Each method is atomic; a ``snapshot()`` is a
consistent copy.
"""

from __future__ import annotations

import math
import threading
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

__all__ = [
    "Counters",
    "LatencySnapshot",
    "LatencyStats",
    "MessageCounter",
    "StatsError",
]


class StatsError(ValueError):
    """A value or option given to a stats helper is invalid."""


@dataclass(frozen=True)
class LatencySnapshot:
    """A consistent copy of :class:`LatencyStats` (seconds; ``None`` when empty)."""

    count: int
    window_count: int
    mean: float | None
    p50: float | None
    p95: float | None
    p99: float | None
    max: float | None


class LatencyStats:
    """Latencies in seconds over a rolling window of the last ``window`` samples.

    ``count`` is the number of samples ever added (also those that left the
    window); the statistics are over the window. Percentiles use NumPy's default
    linear interpolation between the closest ranks.
    """

    def __init__(self, window: int = 100) -> None:
        if isinstance(window, bool) or not isinstance(window, int) or window < 1:
            raise StatsError(f"latency window {window!r} must be an integer >= 1")
        self._window = window
        self._samples: deque[float] = deque(maxlen=window)
        self._count = 0
        # Percentiles of the current window, by q: the scheduler asks for its lead
        # percentile on every tick and frame, far more often than samples arrive.
        self._percentiles: dict[float, float] = {}
        self._generation = 0  # bumped by every change of the window
        self._lock = threading.Lock()

    @property
    def window(self) -> int:
        """Maximum number of samples the statistics are computed over."""
        return self._window

    def add(self, seconds: float) -> None:
        """Record one latency in seconds (finite, >= 0)."""
        value = float(seconds)
        if not math.isfinite(value) or value < 0.0:
            raise StatsError(f"latency {seconds!r} s must be a finite number >= 0")
        with self._lock:
            self._samples.append(value)
            self._count += 1
            self._generation += 1
            self._percentiles.clear()

    def extend(self, values: Iterable[float]) -> None:
        """Record several latencies in seconds, in order."""
        for value in values:
            self.add(value)

    def clear(self) -> None:
        """Forget all samples and the total count."""
        with self._lock:
            self._samples.clear()
            self._count = 0
            self._generation += 1
            self._percentiles.clear()

    @property
    def count(self) -> int:
        """Number of samples ever added."""
        with self._lock:
            return self._count

    @property
    def window_count(self) -> int:
        """Number of samples currently in the window."""
        with self._lock:
            return len(self._samples)

    def values(self) -> list[float]:
        """The samples in the window, oldest first (seconds)."""
        with self._lock:
            return list(self._samples)

    def percentile(self, q: float) -> float | None:
        """The ``q``-th percentile (0 <= q <= 100) over the window in seconds, or
        ``None`` when there are no samples yet."""
        qf = float(q)
        if not 0.0 <= qf <= 100.0:
            raise StatsError(f"percentile {q!r} must be between 0 and 100")
        with self._lock:
            cached = self._percentiles.get(qf)
            if cached is not None:
                return cached
            values = list(self._samples)
            generation = self._generation
        if not values:
            return None
        result = float(np.percentile(np.asarray(values, dtype=np.float64), qf))
        with self._lock:
            if self._generation == generation:
                self._percentiles[qf] = result
        return result

    @property
    def mean(self) -> float | None:
        """Mean over the window in seconds, or ``None`` when empty."""
        values = self.values()
        return float(np.mean(values)) if values else None

    @property
    def p50(self) -> float | None:
        """Median over the window in seconds, or ``None`` when empty."""
        return self.percentile(50.0)

    @property
    def p99(self) -> float | None:
        """99th percentile over the window in seconds, or ``None`` when empty."""
        return self.percentile(99.0)

    def snapshot(self) -> LatencySnapshot:
        """A consistent copy of all statistics."""
        with self._lock:
            values = list(self._samples)
            count = self._count
        if not values:
            return LatencySnapshot(count, 0, None, None, None, None, None)
        arr = np.asarray(values, dtype=np.float64)
        p50, p95, p99 = (float(v) for v in np.percentile(arr, [50.0, 95.0, 99.0]))
        return LatencySnapshot(
            count=count,
            window_count=len(values),
            mean=float(arr.mean()),
            p50=p50,
            p95=p95,
            p99=p99,
            max=float(arr.max()),
        )


class Counters:
    """Named non-negative event counters (e.g. ``"error_replies"``), all starting at 0."""

    def __init__(self, names: Iterable[str] = ()) -> None:
        self._counts: dict[str, int] = {str(name): 0 for name in names}
        self._lock = threading.Lock()

    def increment(self, name: str, n: int = 1) -> int:
        """Add ``n`` (>= 0) to counter ``name`` and return its new value."""
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise StatsError(f"counter increment {n!r} for {name!r} must be an integer >= 0")
        with self._lock:
            value = self._counts.get(name, 0) + n
            self._counts[name] = value
            return value

    def get(self, name: str) -> int:
        """Current value of counter ``name`` (0 if never incremented)."""
        with self._lock:
            return self._counts.get(name, 0)

    def __getitem__(self, name: str) -> int:
        return self.get(name)

    def snapshot(self) -> dict[str, int]:
        """A copy of all counters, sorted by name."""
        with self._lock:
            return dict(sorted(self._counts.items()))

    def clear(self) -> None:
        """Set every known counter back to 0."""
        with self._lock:
            for name in self._counts:
                self._counts[name] = 0


class MessageCounter:
    """Counts occurrences per distinct message, so each one is logged only once.

    ``add(message)`` returns ``True`` the first time a message is seen (log it
    then) and ``False`` afterwards. At most ``max_messages`` distinct messages are
    remembered; beyond that, new messages are counted in ``overflow`` and
    reported as new only once, so a server sending endless distinct errors
    cannot grow memory.
    """

    def __init__(self, max_messages: int = 100) -> None:
        if isinstance(max_messages, bool) or not isinstance(max_messages, int) or max_messages < 1:
            raise StatsError(f"max_messages {max_messages!r} must be an integer >= 1")
        self._max = max_messages
        self._counts: dict[str, int] = {}
        self._overflow = 0
        self._total = 0
        self._lock = threading.Lock()

    def add(self, message: str) -> bool:
        """Count ``message``; ``True`` if it is new (first occurrence)."""
        with self._lock:
            self._total += 1
            if message in self._counts:
                self._counts[message] += 1
                return False
            if len(self._counts) < self._max:
                self._counts[message] = 1
                return True
            self._overflow += 1
            return self._overflow == 1

    @property
    def total(self) -> int:
        """Number of messages counted, repeats included."""
        with self._lock:
            return self._total

    @property
    def overflow(self) -> int:
        """Messages not remembered individually because ``max_messages`` was reached."""
        with self._lock:
            return self._overflow

    def counts(self) -> dict[str, int]:
        """A copy of the per-message counts, in first-seen order."""
        with self._lock:
            return dict(self._counts)
