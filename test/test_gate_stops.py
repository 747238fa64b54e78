"""The stop a hold commands (pipeline/gate/stops.py), on inputs with a known answer."""

from __future__ import annotations

import numpy as np
import pytest

from relay_ros.pipeline.gate.controller import CommandedMotion, ControllerModel
from relay_ros.pipeline.gate.motion import MotionLimits, check_motion
from relay_ros.pipeline.gate.stops import (
    HOLD_DELIVERY_S,
    HOLD_MIN_S,
    HOLD_SAMPLE_S,
    hold_starts,
    plan_stop,
)
from relay_ros.pipeline.interpolation import segment_extremes
from relay_ros.pipeline.joint_limits import JointLimit

DT = 0.02
JOINTS = ("a", "b")


def limits(max_acceleration: float = float("inf"), upper: float = 3.0) -> MotionLimits:
    joint = JointLimit(-3.0, upper, 2.5, max_acceleration=max_acceleration)
    return MotionLimits.from_joint_limits({j: joint for j in JOINTS}, JOINTS, dt=DT)


def moving(speed: float, *, start: float = 0.0, until: float = 2.0) -> CommandedMotion:
    """A command through ``start`` at t = 0, at ``speed`` until ``until``."""
    motion = CommandedMotion()
    tfs = DT * np.arange(1, int(until / DT) + 1)
    points = start + speed * tfs[:, None] * np.ones((1, 2))
    velocity = np.full(2, speed)
    motion.follow(0.0, np.full(2, start), velocity, points, tfs)
    return motion


def starts_of(motion: CommandedMotion, *, offset: float = 0.0, desired: bool = True):
    model = ControllerModel(interpolate_from_desired_state=desired)
    return hold_starts(motion, model, 0.0, offset=np.full(2, offset), measured=np.zeros(2))


def peaks(plan, bounds: MotionLimits) -> tuple[float, float]:
    """Largest speed and acceleration ratio to the limits over every start."""
    speed = acceleration = 0.0
    for p, v in plan.starts:
        ext = segment_extremes(
            p[None], v[None], plan.target[None], np.zeros((1, 2)), np.array([plan.duration])
        )
        speed = max(speed, float((ext.speed / bounds.max_velocity).max()))
        acceleration = max(acceleration, float((ext.acceleration / bounds.stop_acceleration).max()))
    return speed, acceleration


def test_a_standing_arm_is_held_where_it_stands() -> None:
    motion = CommandedMotion()
    motion.follow(0.0, np.zeros(2), np.zeros(2), np.full((1, 2), 0.3), np.array([0.1]))
    starts = hold_starts(motion, ControllerModel(), 1.0, offset=np.zeros(2), measured=np.zeros(2))
    assert len(starts) == 1  # every arrival finds it standing at 0.3
    plan = plan_stop(starts, limits(), dt=DT)
    assert plan is not None and not plan.moves
    np.testing.assert_allclose(plan.target, 0.3)
    assert plan.duration == pytest.approx(HOLD_MIN_S)


def test_a_moving_arm_stops_where_it_brakes_to_within_the_limits_for_any_arrival() -> None:
    """1.5 rad/s: arrivals every 5 ms over 0.2 s start 0 to 0.3 rad along. The target is
    where a prompt arrival brakes to, 1.5 * T / 2 ahead; T is the shortest of the
    ladder that keeps every start within the velocity limit and the stop bound (2.5 /
    0.02 = 125 rad/s^2), which the ladder's step before does not."""
    motion = moving(1.5)
    starts = starts_of(motion)
    assert len(starts) == round(HOLD_DELIVERY_S / HOLD_SAMPLE_S) + 1
    bounds = limits()
    plan = plan_stop(starts, bounds, dt=DT)
    assert plan is not None and plan.moves
    np.testing.assert_allclose(plan.target, 1.5 * plan.duration / 2.0)
    speed, acceleration = peaks(plan, bounds)
    assert speed <= 1.0 + 1e-9 and acceleration <= 1.0 + 1e-9
    shorter = (plan.duration / 1.25) * np.ones(1)
    assert plan.duration > HOLD_MIN_S
    too_short = [
        check_motion(
            p, (1.5 * shorter[0] / 2.0) * np.ones((1, 2)), shorter, bounds, start_velocity=v
        )
        for p, v in plan.starts
    ]
    assert not all(result.ok for result in too_short)


def test_an_acceleration_limit_where_set_makes_the_stop_longer() -> None:
    bounds = limits(max_acceleration=10.0)
    plan = plan_stop(starts_of(moving(1.5)), bounds, dt=DT)
    assert plan is not None
    speed, acceleration = peaks(plan, bounds)
    assert acceleration <= 1.0 + 1e-9 and speed <= 1.0 + 1e-9
    assert plan.duration >= 1.5 / 10.0  # at least the time a 10 rad/s^2 brake takes


def test_a_hold_in_the_first_segment_starts_from_the_command_not_the_first_point() -> None:
    """The delayed start: from rest at 0 to a first point 0.24 rad away 0.2 s later.
    A hold 30% into that segment stops from where the command is then (a few cm in),
    nowhere near the first point, within the limits."""
    motion = CommandedMotion()
    tfs = 0.2 + DT * np.arange(10)
    points = 0.24 + 0.04 * np.arange(10)[:, None] * np.ones((1, 2))
    motion.follow(0.0, np.zeros(2), np.zeros(2), points, tfs)
    position, velocity = motion.state_at(0.06)
    assert 0.0 < position[0] < 0.1 and velocity[0] > 0.0
    starts = hold_starts(motion, ControllerModel(), 0.06, offset=np.zeros(2), measured=np.zeros(2))
    bounds = limits()
    plan = plan_stop(starts, bounds, dt=DT)
    assert plan is not None
    assert plan.target[0] < 0.2
    speed, acceleration = peaks(plan, bounds)
    assert speed <= 1.0 + 1e-9 and acceleration <= 1.0 + 1e-9


def test_near_a_position_limit_the_stop_stays_inside_or_none_is_sent() -> None:
    # 1 rad/s towards an upper limit 0.3 rad ahead of the window's last start: the stop
    # ends inside the range.
    bounds = limits(upper=0.5)
    plan = plan_stop(starts_of(moving(1.0)), bounds, dt=DT)
    assert plan is not None and plan.target[0] <= 0.5
    # 2.4 rad/s with the limit 1 mm past the last arrival's start: no stop can stay
    # inside (the brake needs 2.4^2 / (2 * 125) = 23 mm), so none is planned.
    tight = limits(upper=2.4 * HOLD_DELIVERY_S + 0.001)
    assert plan_stop(starts_of(moving(2.4)), tight, dt=DT) is None


def test_an_arm_that_does_not_follow_is_held_where_it_was_measured() -> None:
    starts = starts_of(moving(1.0))
    measured = np.array([-0.2, -0.2])
    plan = plan_stop(starts, limits(), dt=DT, target=measured)
    assert plan is not None
    np.testing.assert_allclose(plan.target, measured)
    speed, acceleration = peaks(plan, limits())
    assert speed <= 1.0 + 1e-9 and acceleration <= 1.0 + 1e-9


def test_a_controller_starting_from_the_measured_state_stops_from_the_lagging_arm() -> None:
    """interpolate_from_desired_state false: each start is the command shifted by the
    tracking offset (a lagging arm keeps lagging), moving at the commanded velocity."""
    motion = moving(1.0)
    desired = starts_of(motion)
    measured = starts_of(motion, offset=-0.05, desired=False)
    for (p_d, v_d), (p_m, v_m) in zip(desired, measured):
        np.testing.assert_allclose(p_m, p_d - 0.05)
        np.testing.assert_allclose(v_m, v_d)
    plan = plan_stop(measured, limits(), dt=DT)
    assert plan is not None
    np.testing.assert_allclose(plan.target, -0.05 + plan.duration / 2.0)


def test_after_a_clock_jump_back_the_controller_keeps_its_last_command() -> None:
    motion = moving(1.0)
    position, velocity = motion.state_at(0.5)
    motion.freeze(-9.5, position, velocity)  # the clock jumped back 10 s at 0.5
    starts = hold_starts(motion, ControllerModel(), -9.5, offset=np.zeros(2), measured=np.zeros(2))
    assert len(starts) == 1
    np.testing.assert_allclose(starts[0][0], position)
    np.testing.assert_allclose(starts[0][1], velocity)
    plan = plan_stop(starts, limits(), dt=DT)
    assert plan is not None
    np.testing.assert_allclose(plan.target, position + velocity * plan.duration / 2.0)
