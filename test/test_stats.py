"""Rolling latency statistics and counters used for diagnostics."""

from __future__ import annotations

import math
import threading

import numpy as np
import pytest

from relay_ros.pipeline.stats import (
    Counters,
    LatencySnapshot,
    LatencyStats,
    MessageCounter,
    StatsError,
)


def test_empty_stats() -> None:
    stats = LatencyStats()
    assert stats.count == 0 and stats.window_count == 0
    assert stats.p50 is None and stats.p99 is None and stats.mean is None
    assert stats.percentile(95) is None
    assert stats.snapshot() == LatencySnapshot(0, 0, None, None, None, None, None)


def test_percentiles_over_rolling_window() -> None:
    stats = LatencyStats(window=4)
    stats.extend([10.0, 0.1, 0.2, 0.3, 0.4])  # 10.0 leaves the window
    assert stats.count == 5
    assert stats.window_count == 4
    assert stats.values() == [0.1, 0.2, 0.3, 0.4]
    assert stats.p50 == pytest.approx(0.25)
    assert stats.percentile(95) == pytest.approx(np.percentile([0.1, 0.2, 0.3, 0.4], 95))
    assert stats.p99 == pytest.approx(np.percentile([0.1, 0.2, 0.3, 0.4], 99))
    assert stats.mean == pytest.approx(0.25)
    snap = stats.snapshot()
    assert snap.count == 5 and snap.window_count == 4
    assert snap.max == 0.4
    assert snap.p50 == pytest.approx(0.25)
    stats.clear()
    assert stats.count == 0 and stats.p50 is None


def test_cached_percentiles_follow_every_change_of_the_window() -> None:
    # The scheduler asks for its lead percentile on every tick; the answer is
    # cached until a sample arrives, leaves the window or the stats are cleared.
    stats = LatencyStats(window=3)
    stats.extend([0.1, 0.2, 0.3])
    assert stats.p99 == pytest.approx(np.percentile([0.1, 0.2, 0.3], 99))
    assert stats.p99 == pytest.approx(np.percentile([0.1, 0.2, 0.3], 99))  # from the cache
    stats.add(0.3)  # same length and same last value, different window
    assert stats.p50 == pytest.approx(0.3)
    assert stats.p99 == pytest.approx(np.percentile([0.2, 0.3, 0.3], 99))
    stats.clear()
    assert stats.p99 is None
    stats.add(5.0)
    assert stats.p99 == 5.0


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (-0.1, "latency -0.1 s must be a finite number >= 0"),
        (math.nan, "latency nan s must be a finite number >= 0"),
    ],
)
def test_bad_latency(value: float, message: str) -> None:
    with pytest.raises(StatsError) as info:
        LatencyStats().add(value)
    assert str(info.value) == message


def test_bad_options() -> None:
    with pytest.raises(StatsError) as info:
        LatencyStats(window=0)
    assert str(info.value) == "latency window 0 must be an integer >= 1"
    with pytest.raises(StatsError) as info:
        LatencyStats().percentile(101)
    assert str(info.value) == "percentile 101 must be between 0 and 100"


def test_thread_safe_updates() -> None:
    stats = LatencyStats(window=10_000)
    counters = Counters()

    def work() -> None:
        for _ in range(2000):
            stats.add(0.01)
            counters.increment("replies")

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert stats.count == 8000
    assert counters["replies"] == 8000


def test_counters() -> None:
    counters = Counters(["errors", "chunks"])
    assert counters.snapshot() == {"chunks": 0, "errors": 0}
    assert counters.increment("errors") == 1
    assert counters.increment("errors", 2) == 3
    assert counters.get("unknown") == 0
    counters.clear()
    assert counters["errors"] == 0
    with pytest.raises(StatsError) as info:
        counters.increment("errors", -1)
    assert str(info.value) == "counter increment -1 for 'errors' must be an integer >= 0"


def test_message_counter_reports_each_message_once() -> None:
    messages = MessageCounter(max_messages=2)
    assert messages.add("Internal inference error")
    assert not messages.add("Internal inference error")
    assert messages.add("Invalid request payload")
    assert messages.add("third")  # beyond the limit: reported once as new
    assert not messages.add("fourth")
    assert messages.counts() == {"Internal inference error": 2, "Invalid request payload": 1}
    assert messages.overflow == 2
    assert messages.total == 5
