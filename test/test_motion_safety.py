"""check_motion: position, velocity and acceleration limits over the whole trajectory.

Every case is the trajectory the controller would follow: from where it is to the
first point, through every published point and into the tail it runs when the
next chunk is late. The velocities the points carry are the ones
trajectory.build_points publishes; the extremes are exact (test_interpolation.py
checks them against dense sampling).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from relay_ros.pipeline.gate.motion import MotionLimits, check_motion
from relay_ros.pipeline.interpolation import finite_difference_velocities, segment_extremes
from relay_ros.pipeline.joint_limits import JointLimit
from relay_ros.pipeline.safety import SafetyError

DT = 0.02
H = 25


def limits(vmax: float = 2.0, amax: float = math.inf) -> MotionLimits:
    table = {
        "shoulder": JointLimit(-3.0, 3.0, vmax, amax),
        "wrist": JointLimit(-math.inf, math.inf, vmax, amax),  # continuous
    }
    return MotionLimits.from_joint_limits(table, ["shoulder", "wrist"])


def smooth(start: np.ndarray, speed: float = 0.5) -> tuple[np.ndarray, np.ndarray]:
    tfs = DT * (1 + np.arange(H))
    return start + speed * tfs[:, None] * np.array([1.0, -1.0]), tfs


def peak_speed(start, positions, tfs, start_velocity=None) -> np.ndarray:
    """Largest speed per joint of the trajectory, computed independently of check_motion."""
    points = np.vstack((start[None], positions))
    times = np.concatenate(([0.0], tfs))
    v0 = np.zeros_like(start) if start_velocity is None else start_velocity
    vel = np.vstack((v0[None], finite_difference_velocities(positions, tfs)))
    ext = segment_extremes(points[:-1], vel[:-1], points[1:], vel[1:], np.diff(times))
    return ext.speed.max(axis=0)


START = np.array([0.1, 0.5])


def test_a_smooth_chunk_passes_with_its_peak_speed() -> None:
    positions, tfs = smooth(START)
    result = check_motion(START, positions, tfs, limits())
    assert result.ok and result.note is None
    np.testing.assert_array_equal(result.positions, positions)
    # From rest to 0.5/s within the first 20 ms: the cubic peaks at 4/3 of that.
    assert result.peak_speed_ratio == pytest.approx(peak_speed(START, positions, tfs).max() / 2.0)
    assert result.peak_speed_ratio == pytest.approx(0.5 * 4 / 3 / 2.0)


def test_a_jump_in_the_last_action_is_refused() -> None:
    """Issue 21: the last action jumped 2.65 rad inside the position limits."""
    positions, tfs = smooth(START)
    positions[-1, 0] += 2.65
    assert positions[-1, 0] <= 3.0  # within the position limits
    result = check_motion(START, positions, tfs, limits())
    assert not result.ok and result.positions is None
    assert result.refusal.kind == "velocity"
    assert result.refusal.reason.startswith(
        "joint 'shoulder' would move at 199.251/s between points 23 and 24 (t = 0.480 to "
        "0.500 s), from 0.3400 to 3.0000; its velocity limit is 2.0000/s"
    )
    assert result.refusal.reason.endswith("refusing the chunk (limits_mode=refuse)")


def test_the_segment_from_the_controller_to_the_first_point_is_checked() -> None:
    positions, tfs = smooth(START)
    far = START + np.array([0.0, 0.2])  # the controller is 0.2 away from the chunk's start
    result = check_motion(far, positions, tfs, limits())
    assert result.refusal is not None
    assert "joint 'wrist' would move at" in result.refusal.reason
    assert "from where the controller is to the first point (in 0.020 s)" in result.refusal.reason
    # With room for it (a first point 0.2 s away) the same step is fine.
    assert check_motion(far, positions, tfs + 0.2, limits()).ok


def test_the_controllers_own_velocity_starts_the_first_segment() -> None:
    positions, tfs = smooth(START)
    # Moving at 1.9 the other way: the cubic from there turns round within 20 ms.
    backwards = np.array([-1.9, 1.9])
    result = check_motion(START, positions, tfs, limits(amax=200.0), start_velocity=backwards)
    assert result.refusal is not None and result.refusal.kind == "acceleration"
    assert "from where the controller is to the first point" in result.refusal.reason
    assert check_motion(START, positions, tfs, limits(amax=200.0)).ok


def test_the_tail_past_the_execute_horizon_is_checked() -> None:
    """In early mode the whole rest of the chunk is published: the robot runs it when
    the next chunk is late, so a jump there counts as much as one in the first half."""
    positions, tfs = smooth(START)
    positions[20:, 1] -= 1.0  # point 20 of 25, past an execute horizon of 12
    result = check_motion(START, positions, tfs, limits())
    assert result.refusal is not None
    assert (
        "joint 'wrist'" in result.refusal.reason
        and "between points 19 and 20" in result.refusal.reason
    )


def test_the_published_velocities_are_within_the_limit_when_accepted() -> None:
    positions, tfs = smooth(START, speed=1.4)
    result = check_motion(START, positions, tfs, limits())
    assert result.ok
    published = finite_difference_velocities(result.positions, tfs)
    assert np.abs(published).max() <= 2.0


def test_acceleration_limits_where_given() -> None:
    tfs = DT * (1 + np.arange(H))
    # 0.5 rad/s reached within one step: about 0.5 / 0.02 = 25 rad/s^2 and more.
    positions = START + np.where(tfs[:, None] > 0.1, 0.5 * (tfs[:, None] - 0.1), 0.0)
    assert check_motion(START, positions, tfs, limits()).ok
    result = check_motion(START, positions, tfs, limits(amax=10.0))
    assert result.refusal is not None and result.refusal.kind == "acceleration"
    assert "would accelerate at" in result.refusal.reason
    assert "its acceleration limit is 10.0000/s^2" in result.refusal.reason
    # Clamping slows a joint down; it cannot meet an acceleration limit it breaks.
    clamped = check_motion(START, positions, tfs, limits(amax=10.0), mode="clamp")
    assert clamped.refusal is not None
    assert "clamping cannot meet the limits" in clamped.refusal.reason


def test_position_limits_between_points_and_a_start_outside_them() -> None:
    positions, tfs = smooth(START)
    positions[5:, 0] = 3.05  # above the upper limit 3.0
    result = check_motion(START, positions, tfs, limits(vmax=100.0))
    assert result.refusal is not None and result.refusal.kind == "limits"
    assert "joint 'shoulder' would reach 3.0500, above its upper limit 3.0000" in (
        result.refusal.reason
    )
    # A controller a hair past a limit may move back in, not further out.
    inside, tfs = smooth(np.array([3.0, 0.0]), speed=-0.5)
    assert check_motion(np.array([3.001, 0.0]), inside, tfs, limits()).ok
    outwards = inside + 0.2
    assert not check_motion(np.array([3.001, 0.0]), outwards, tfs, limits()).ok


def test_clamp_mode_slows_the_jump_and_says_so() -> None:
    positions, tfs = smooth(START)
    positions[-1, 0] += 2.65
    result = check_motion(START, positions, tfs, limits(), mode="clamp")
    assert result.ok and result.note is not None
    assert result.note.startswith(
        "clamped the trajectory into the joint limits: joint 'shoulder' would move at 199.251/s"
    )
    assert "joints slowed to at most" in result.note
    assert "lagging the chunk by up to" in result.note
    assert (peak_speed(START, result.positions, tfs) <= 2.0 + 1e-9).all()
    assert result.peak_speed_ratio <= 1.0
    # Only the jump changed; the smooth part is as the policy sent it.
    np.testing.assert_array_equal(result.positions[:-1], positions[:-1])
    assert result.positions[-1, 0] < positions[-1, 0]


@pytest.mark.parametrize("seed", range(4))
def test_clamp_mode_always_ends_within_the_velocity_limit(seed: int) -> None:
    rng = np.random.default_rng(seed)
    tfs = DT * (1 + np.arange(H))
    positions = START + np.cumsum(rng.normal(0, 0.08, (H, 2)), axis=0)  # ~4 rad/s steps
    start_velocity = rng.uniform(-2.0, 2.0, 2)
    result = check_motion(
        START, positions, tfs, limits(), start_velocity=start_velocity, mode="clamp"
    )
    if result.ok:
        assert (peak_speed(START, result.positions, tfs, start_velocity) <= 2.0 + 1e-9).all()
        assert (np.abs(result.positions[:, 0]) <= 3.0).all()
    else:
        assert "clamping cannot meet the limits" in result.refusal.reason


def test_argument_errors() -> None:
    positions, tfs = smooth(START)
    with pytest.raises(SafetyError, match="expected \\(N, J\\) and \\(N,\\)"):
        check_motion(START, positions[:, :1], tfs, limits())
    with pytest.raises(SafetyError, match="times after the stamp that strictly increase"):
        check_motion(START, positions, tfs - DT, limits())
    with pytest.raises(SafetyError, match="limits mode 'slow'"):
        check_motion(START, positions, tfs, limits(), mode="slow")  # type: ignore[arg-type]
    with pytest.raises(SafetyError, match=r"no joint limits for joints \['elbow'\]"):
        MotionLimits.from_joint_limits({}, ["elbow"])
