"""The paired loop of bench/motion.py: early and sync see the same world from their
first chunk, and the node starts without refused first steps at 200 ms and on lte."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from relay_ros.server.policy_robot import VISUAL_MAX_SPEED, PolicyRobot
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


def test_each_kind_of_draw_has_its_own_stream_per_request() -> None:
    """Early and sync requests draw the same inference time and chunk noise for their
    k-th request, whatever else differs between the runs."""
    early, sync = (
        _Loop(LoopRun(request_mode=m, seed=4, duration_s=2.0)) for m in ("early", "sync")
    )
    for loop in (early, sync):
        loop.loop()
    n = min(len(early.inference_s), len(sync.inference_s))
    assert n >= 4 and len(early.inference_s) > len(sync.inference_s)
    assert early.inference_s[:n] == sync.inference_s[:n]
    assert len(set(early.inference_s[:n])) == n  # a new draw per request
    noise = [loop.stream(7, 3).standard_normal(3) for loop in (early, sync)]
    np.testing.assert_array_equal(noise[0], noise[1])
    assert not np.array_equal(early.stream(7, 3).random(3), early.stream(13, 3).random(3))
    assert not np.array_equal(early.stream(7, 3).random(3), early.stream(7, 4).random(3))


@pytest.mark.slow
def test_the_default_beats_sync_smoothly_without_the_prefix_extension() -> None:
    """On the seeds' server (no action_prefix) with an exact arm: the default (early,
    splice, automatic timing) tracks better than sync on these seeds, refuses nothing,
    moves more smoothly than openpi's broker (sync, no smoothing) and its switches stay
    within a typical step (bench/motion.py measures 10 seeds)."""
    for seed in (1, 3):
        base = LoopRun(seed=seed, duration_s=6.0, tracking_lag_s=0.0)
        default = run_streaming_loop(base)
        sync = run_streaming_loop(dataclasses.replace(base, request_mode="sync"))
        broker = run_streaming_loop(
            dataclasses.replace(base, request_mode="sync", smoothing="none")
        )
        assert default.smoothing.startswith("splice") and default.execute_horizon < 25
        assert default.refusals == 0 and default.stall_time_s == 0.0
        assert default.task.median_m < sync.task.median_m
        assert default.jerk_rms < broker.jerk_rms
        assert default.switches.c0_p95_over_step < 1.0


def test_a_splice_that_needs_its_limiter_keeps_to_the_default_bound_between_points() -> None:
    """Seed 1 at 300 ms, the arm 40 ms behind: one switch's fade (0.8 rad over 0.46 s)
    was too fast for the velocity limit, so the splice's limiter ran at 2/3 of it and,
    without an acceleration limit, turned in one step onto the chunk coming the other
    way (-1.67 to +0.86 rad/s, 126.5 rad/s^2): the publication check's default bound on
    the points' second differences (125 rad/s^2) refused it. The splice holds to the
    check it is published through, that bound included: nothing is refused."""
    result = run_streaming_loop(
        LoopRun(latency_s=0.3, tracking_lag_s=0.04, seed=1, duration_s=10.0)
    )
    assert result.refusals == 0, result.refusal_reasons


@pytest.mark.slow
@pytest.mark.parametrize("layout", ["droid", "aloha"])
def test_a_layout_demo_streams_without_refusals(layout: str) -> None:
    """``make demo LAYOUT=droid`` (and ``aloha``) as the node runs it: the layout's
    config, camera map and wire format, the reference server told the layout's robot
    (relay_ros.sim.robot.policy_robot: its speed and rest pose). Before, the server's
    policy moved like the simulated arm: 1.6 rad/s secants, run by the controller's
    cubics at up to 2.4 rad/s against the Franka's 2.175 ("joint1 at 2.39/s"), and its
    idle joints relaxed towards 0, outside the Franka's joint 4 (-3.07..-0.07) and onto
    the gripper's lower limit: both refused, run after run."""
    base = LoopRun(layout=layout, duration_s=10.0, seed=0)
    result = run_streaming_loop(base)
    assert result.refusals == 0, result.refusal_reasons
    assert result.startup.refusals == 0
    assert result.stall_time_s == 0.0
    if layout == "droid":
        arm_as_simulated = run_streaming_loop(
            dataclasses.replace(base, policy_robot=PolicyRobot((VISUAL_MAX_SPEED,)))
        )
        assert arm_as_simulated.refusals > 0


def test_a_controller_that_starts_from_the_measured_state_streams_without_refusals() -> None:
    """JTC's default (``interpolate_from_desired_state: false``), the node told so as
    docs/node.md says, the arm 40 ms behind: each new trajectory starts where the arm
    is, and so do the check and the splice (the gate's commanded motion shifted by the
    tracking offset: one model of what the controllers follow). Splicing from the
    command instead made every first segment a jump back to the lagging arm: 144
    refusals in 10 runs of 10 s at 80 ms."""
    run = LoopRun(interpolate_from_desired_state=False, seed=0, duration_s=6.0)
    assert _Loop(run).config.interpolate_from_desired_state is False  # the node is told
    result = run_streaming_loop(run)
    assert result.refusals == 0, result.refusal_reasons
