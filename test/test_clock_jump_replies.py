"""A jump of the node clock with a request in flight (issue 26, fault 1), on the
synthetic clock: the reply from before the jump is dropped, counted and logged, never
scheduled, and no latency is negative. Before, forward 100 s raised
``SchedulerStateError: chunk_received(...) without a request in flight`` and back 10 s
``StatsError: latency -9.68 s``: clock_jump.py swapped the scheduler but the reply
still matched the session. The node-level test is in test_clock_jumps.py."""

from __future__ import annotations

import pytest
from streaming_rig import CoreRig


@pytest.mark.parametrize("delta_s", [100.0, -10.0], ids=["forward-100s", "back-10s"])
def test_a_reply_from_before_a_clock_jump_is_dropped_counted_and_logged(delta_s: float) -> None:
    rig = CoreRig(latency_s=0.15)
    rig.connect()
    rig.run_until(lambda: len(rig.chunks()) >= 2)
    rig.run_until(lambda: rig.in_flight is not None)
    in_flight = rig.in_flight
    assert in_flight is not None
    # The clock jumps: the reply comes when it would have, on the new clock.
    rig.now = round(rig.now + delta_s, 9)
    in_flight.arrival += delta_s
    in_flight.deadline += delta_s
    rig.core.clock_jumped(delta_s, rig.now)
    published = len(rig.chunks())
    rig.run_until(lambda: rig.in_flight is None)  # the old reply delivered
    counts = rig.core.counts
    assert counts["replies_before_clock_jump"] == 1
    assert counts["clock_jumps"] == 1
    assert "dropped a reply to the observation taken at" in rig.log.text("warning")
    # Streaming again on the new timeline; every latency measured is >= 0.
    rig.run_until(lambda: len(rig.chunks()) >= published + 2)
    assert rig.core.hold_reason is None
    latency = rig.core.latency.percentile(0)
    assert latency is not None and latency >= 0.0
    assert rig.core.counts["refusals"] == 0


def test_a_reply_handled_before_the_jump_event_is_dropped_too() -> None:
    """policy_node queues the jump and the reply as events; when the reply is handled
    first, on the clock already back, it is older than its own observation."""
    rig = CoreRig(latency_s=0.15)
    rig.connect()
    rig.run_until(lambda: len(rig.chunks()) >= 2)
    rig.run_until(lambda: rig.in_flight is not None)
    in_flight = rig.in_flight
    assert in_flight is not None
    rig.now = round(rig.now - 10.0, 9)
    in_flight.arrival -= 10.0
    in_flight.deadline -= 10.0
    rig.run_until(lambda: rig.in_flight is None)  # before clock_jumped is called
    assert rig.core.counts["replies_before_clock_jump"] == 1
    rig.core.clock_jumped(-10.0, rig.now)
    published = len(rig.chunks())
    rig.run_until(lambda: len(rig.chunks()) >= published + 2)
    assert rig.core.latency.percentile(0) >= 0.0
