"""Acceleration limits (ros2_control's ``has_acceleration_limits``): what the node
publishes stays within them, the stop at the end of every chunk and the start of a
still arm included, and the reference policies stream without a refusal.

Before, with any realistic limit (5 to 20 rad/s^2) every chunk that ended moving was
refused at its last point (joint_trajectory_controller's zero last velocity: a stop
within one 20 ms segment), a still arm never started (from rest to the chunk's speed in
one segment), and a smooth turn at 5 rad/s^2 ran at 16.7 on the controller's cubics
(monotone velocities stop at every turning point): nothing was ever published.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from test_gate_chunks import _publication as publication

from relay_ros.pipeline.gate.chunks import check_publication
from relay_ros.pipeline.gate.controller import CommandedMotion
from relay_ros.pipeline.gate.motion import MotionLimits, check_motion
from relay_ros.pipeline.gate.retiming import brake_tail
from relay_ros.pipeline.interpolation import (
    finite_difference_velocities,
    published_velocities,
    segment_extremes,
)
from relay_ros.pipeline.joint_limits import JointLimit
from relay_ros.pipeline.publication import Publication
from relay_ros.server.policy_robot import PolicyRobot
from relay_ros.sim.streaming_loop import LoopRun, run_streaming_loop

DT = 0.02
ACCELERATION = 10.0
LIMITS = {name: JointLimit(-2.9, 2.9, 2.5, ACCELERATION, source="test") for name in ("j1", "j2")}
JOINTS = ("j1", "j2")


def motion_limits(limits=LIMITS) -> MotionLimits:
    return MotionLimits.from_joint_limits(limits, JOINTS, dt=DT)


def cubic_peaks(start, start_velocity, pub: Publication, limits: MotionLimits) -> np.ndarray:
    """The largest acceleration on each segment the controller runs (per joint)."""
    points = np.vstack((start[None, :], pub.positions))
    times = np.concatenate(([0.0], pub.time_from_start))
    velocities = np.vstack(
        (
            start_velocity[None, :],
            published_velocities(start, pub.positions, pub.time_from_start, limits.centred),
        )
    )
    ext = segment_extremes(points[:-1], velocities[:-1], points[1:], velocities[1:], np.diff(times))
    return ext.acceleration


def test_a_chunk_that_ends_moving_brakes_to_rest_within_the_limit() -> None:
    # 1 rad/s (joint 1) and -0.5 rad/s (joint 2) to the last point: stopping there in
    # one 20 ms segment is 200 rad/s^2 on the controller's cubic.
    t = DT * np.arange(1, 41)
    rows = np.stack([0.1 + 1.0 * t, -0.2 - 0.5 * t], axis=1)
    limits = motion_limits()
    start, moving = rows[0] - [1.0 * DT, -0.5 * DT], np.array([1.0, -0.5])
    pub = publication(rows)
    refused = check_motion(start, rows, pub.time_from_start, limits, start_velocity=moving)
    assert refused.refusal is not None and refused.refusal.kind == "acceleration"
    assert "between points 38 and 39" in refused.refusal.reason
    braked = brake_tail(pub, limits)
    assert braked is not None
    # The same path, the same times up to where it brakes; the chunk's last point,
    # later; every point on the action period's grid.
    n = len(braked.positions) - len(rows)
    assert 1 <= n <= 20
    np.testing.assert_array_equal(braked.positions[: len(rows) - n], rows[: len(rows) - n])
    np.testing.assert_array_equal(braked.positions[-1], rows[-1])
    np.testing.assert_allclose(np.diff(braked.time_from_start), DT)
    assert braked.switch_time == pub.switch_time
    # The points slow down monotonically to the last one, which is at rest.
    steps = np.diff(braked.positions[len(rows) - n - 1 :, 0])
    assert (steps >= -1e-12).all() and (np.diff(steps) <= 1e-12).all()
    accepted = check_motion(
        start, braked.positions, braked.time_from_start, limits, start_velocity=moving
    )
    assert accepted.refusal is None, accepted.refusal
    assert cubic_peaks(start, moving, braked, limits).max() <= ACCELERATION * (1 + 1e-9)


def test_without_an_acceleration_limit_nothing_is_re_timed_and_the_tail_stays_checked() -> None:
    t = DT * np.arange(1, 41)
    rows = np.stack([0.1 + 1.0 * t, -0.2 - 0.5 * t], axis=1)
    unlimited = {
        name: dataclasses.replace(limit, max_acceleration=math.inf)
        for name, limit in LIMITS.items()
    }
    assert brake_tail(publication(rows), motion_limits(unlimited)) is None
    # A chunk over the limit between its own points is not helped by braking its
    # tail: the check still refuses it (or its tail, had braking not fit).
    jumpy = rows.copy()
    jumpy[20:, 0] += 0.05
    motion = CommandedMotion()
    start = rows[0] - [1.0 * DT, -0.5 * DT]
    motion.follow(
        -1.0,
        start - 1.0 * np.array([1.0, -0.5]),
        np.array([1.0, -0.5]),
        start[None, :],
        np.array([1.0]),
    )
    verdict = check_publication(
        publication(jumpy),
        joints=JOINTS,
        joint_limits=LIMITS,
        limits_mode="refuse",
        max_joint_step=0.25,
        motion=motion,
        measured=start,
        dt=DT,
    )
    assert verdict.refusal is not None and "between points 19 and 20" in verdict.refusal.reason


def test_a_still_arm_ramps_in_within_the_limit() -> None:
    # From rest to 1.2 rad/s in the first segment: 240 rad/s^2; ten slots later is not
    # enough either. The chunk's start is re-timed from rest instead, the whole chunk
    # (switch and timeline) later by what the ramp takes.
    t = DT * np.arange(0, 40)
    rows = np.stack([0.3 + 1.2 * t, -0.4 + 0.6 * t], axis=1)
    pub = publication(rows)
    verdict = check_publication(
        pub,
        joints=JOINTS,
        joint_limits=LIMITS,
        limits_mode="refuse",
        max_joint_step=0.25,
        motion=CommandedMotion(),
        measured=rows[0],
        dt=DT,
    )
    assert verdict.refusal is None, verdict.refusal
    ramped = verdict.publication
    assert ramped is not None
    delay = ramped.shift_s - pub.shift_s
    assert delay > 0.0 and ramped.switch_time == pytest.approx(pub.switch_time + delay)
    np.testing.assert_allclose(ramped.positions[0], rows[0], atol=1e-9)  # where it stands
    # After the ramp (2 n periods), the chunk's own points n periods later (its tail
    # braked as every tail that ends moving).
    n = round(delay / DT)
    limits = motion_limits()
    braked = brake_tail(pub, limits)
    assert braked is not None
    np.testing.assert_allclose(ramped.positions[2 * n :], braked.positions[n:], atol=1e-12)
    assert len(ramped.positions) == len(braked.positions) + n
    assert cubic_peaks(rows[0], np.zeros(2), ramped, limits).max() <= ACCELERATION * (1 + 1e-9)
    # The published velocities are the ones it was checked with.
    assert ramped.velocities is not None


def test_a_smooth_turn_runs_at_its_own_acceleration_where_a_limit_is_set() -> None:
    """Monotone velocities stop at every point where a motion turns, so a turn at
    5 rad/s^2 sampled at 50 Hz runs at up to 16.7 rad/s^2; centred ones (the joints
    with an acceleration limit) run it at 5, overshooting the turning point by at
    most a h^2 / 8."""
    worst = {"monotone": 0.0, "centred": 0.0}
    overshoot = 0.0
    for phase in np.linspace(0.0, 1.0, 21):
        times = DT * (np.arange(50) + phase)
        x = (-2.5 * (times - 0.5) ** 2)[:, None]
        for rule, centred in (("monotone", False), ("centred", True)):
            v = finite_difference_velocities(x, times, centred)
            ext = segment_extremes(x[:-1], v[:-1], x[1:], v[1:], np.diff(times))
            worst[rule] = max(worst[rule], float(ext.acceleration[2:-2].max()))
            if centred:
                overshoot = max(overshoot, float(ext.highest.max() - x.max()))
    assert worst["monotone"] == pytest.approx(16.67, abs=0.01)
    assert worst["centred"] == pytest.approx(5.0, abs=1e-6)
    assert 0.0 < overshoot <= 5.0 * DT**2 / 8 + 1e-12
    # A gripper closing onto its limit (a stop, not a turn) keeps the monotone rule
    # where no acceleration limit is set: no overshoot past 1.0.
    closing = np.array([[0.8], [0.9], [1.0], [1.0], [1.0]])
    stops = finite_difference_velocities(closing, DT * np.arange(5), centred=False)
    assert stops[2, 0] == 0.0


def _acceleration_parameters(model_joints, acceleration: float):
    return tuple(
        item
        for joint in model_joints
        for item in (
            (f"joint_limits.{joint}.has_acceleration_limits", True),
            (f"joint_limits.{joint}.max_acceleration", acceleration),
        )
    )


@pytest.mark.slow
@pytest.mark.parametrize(("policy", "noise"), [("visual", 1.0), ("flow", 0.0)])
@pytest.mark.parametrize("latency_s", [0.08, 0.2])
def test_the_reference_policies_stream_under_acceleration_limits(
    policy: str, noise: float, latency_s: float
) -> None:
    """config/pi05.yaml plus ``joint_limits.<joint>.has_acceleration_limits: true`` and
    ``max_acceleration: 10.0`` on every joint, as a ros2_control joint_limits file
    gives them; the reference policy moves like a robot with those limits (0.3 of
    them, ``relay-policy-server --max-acceleration 3``). Nothing is refused, the start
    included, and the chunks' tails are braked (they end later than unbraked)."""
    joints = [f"joint{i}" for i in range(1, 7)] + ["gripper_joint"]
    run = LoopRun(
        latency_s=latency_s,
        duration_s=6.0,
        policy=policy,
        chunk_noise=noise,
        node_parameters=_acceleration_parameters(joints, ACCELERATION),
        policy_robot=PolicyRobot((1.6,), (0.3 * ACCELERATION,)),
    )
    result = run_streaming_loop(run)
    assert result.startup.refusals == 0
    assert result.refusals == 0, result.refusal_reasons
    assert result.stall_time_s == 0.0
