"""The paired loop of bench/motion.py: early and sync see the same world from their
first chunk, and the node starts without refused first steps at 200 ms and on lte."""

from __future__ import annotations

import numpy as np
import pytest

from relay_ros.sim.streaming_loop import LoopRun, _Loop, run_streaming_loop


def test_the_target_moves_from_the_first_chunk_on() -> None:
    early, sync = (
        _Loop(LoopRun(request_mode=m, seed=3, duration_s=1.0)) for m in ("early", "sync")
    )
    before = early.world_time(np.array([0.0, 5.0]))
    assert before.tolist() == [1000.0, 1000.0]  # stands still until a chunk is published
    for loop in (early, sync):
        loop.loop()
    t = np.array([0.0, 0.3, 0.9])
    for loop in (early, sync):
        assert loop.first_chunk is not None
        np.testing.assert_allclose(loop.world_time(loop.first_chunk + t), 1000.0 + t)


@pytest.mark.parametrize(("latency_s", "link"), [(0.2, None), (0.08, "lte")], ids=["200ms", "lte"])
@pytest.mark.parametrize("smoothing", ["none", "splice", "prefix"])
def test_the_start_needs_one_round_trip_and_no_refusal(
    latency_s: float, link: str | None, smoothing: str
) -> None:
    r = run_streaming_loop(
        LoopRun(
            latency_s=latency_s,
            link=link,
            smoothing=smoothing,
            server_prefix=smoothing == "prefix",
            duration_s=1.0,
        )
    )
    assert r.startup.refusals == 0
    assert r.startup.first_chunk_s <= r.startup.round_trip_s + 0.011
    assert r.startup.first_point_distance < 0.1  # far below max_joint_step (0.25)
    assert r.switches.moving >= 1


def test_unchecked_runs_publish_the_jumps_the_checks_refuse() -> None:
    """The bench's reference for smoothing: without smoothing the node refuses the
    switches' jumps (holds); unchecked, the same runs publish them, refusing nothing,
    and read far more jerk than the splice."""
    checked = run_streaming_loop(LoopRun(smoothing="none", duration_s=3.0))
    unchecked = run_streaming_loop(LoopRun(smoothing="none", duration_s=3.0, unchecked=True))
    splice = run_streaming_loop(LoopRun(smoothing="splice", duration_s=3.0))
    assert checked.refusals > 0 and unchecked.refusals == 0
    assert unchecked.jerk_rms > 10 * splice.jerk_rms
