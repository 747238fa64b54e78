"""TrajectoryFollower against hand-built trajectories: joint_trajectory_controller rules
(stamps, replacement, interpolation, hold, rejections) and the streaming measures."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import numpy as np
import pytest

from relay_ros.pipeline.trajectory import format_t_obs, parse_t_obs
from relay_ros.sim.trajectory_command import REJECT_CODES, TrajectoryCommand, TrajectoryPoint
from relay_ros.sim.trajectory_follower import FollowerConfigError, TrajectoryFollower

JOINTS = ["j1", "j2"]


def follower(**kwargs) -> TrajectoryFollower:
    kwargs.setdefault("name", "arm")
    return TrajectoryFollower(JOINTS, [0.0, 0.0], **kwargs)


def ramp(stamp: float, times, start: float = 0.0, step: float = 1.0, **kwargs) -> TrajectoryCommand:
    """Positions-only trajectory: joint j1 = start + step * k at point k, j2 = -j1."""
    points = [(t, [start + step * k, -(start + step * k)], None) for k, t in enumerate(times)]
    return TrajectoryCommand(stamp=stamp, joint_names=JOINTS, points=points, **kwargs)


# ---------------------------------------------------------------- header.stamp cases


def test_zero_stamp_starts_at_first_cycle_after_arrival() -> None:
    f = follower()
    assert f.receive(ramp(0.0, [1.0, 2.0], start=1.0), now=5.0)
    # Nothing moves before the first control cycle; it starts at 6.0, not at arrival (5.0).
    f.update(6.0)
    np.testing.assert_allclose(f.sample(6.5), [0.5, -0.5])  # halfway from 0 to point 0 at 7.0
    np.testing.assert_allclose(f.sample(7.0), [1.0, -1.0])
    np.testing.assert_allclose(f.sample(7.5), [1.5, -1.5])


def test_future_stamp_interpolates_from_current_state_without_waiting() -> None:
    f = follower()
    f.receive(ramp(0.0, [1.0], start=2.0), now=0.0)
    np.testing.assert_allclose(f.sample(0.0), [0.0, 0.0])
    np.testing.assert_allclose(f.sample(1.0), [2.0, -2.0])  # holding at 2.0
    # Stamp 10, first point at 10 + 1 = 11: motion starts now (t=1) from the held 2.0.
    assert f.receive(ramp(10.0, [1.0, 2.0], start=12.0), now=1.0)
    np.testing.assert_allclose(f.sample(1.0), [2.0, -2.0])
    np.testing.assert_allclose(f.sample(6.0), [7.0, -7.0])  # 2 + (12 - 2) * 5/10
    np.testing.assert_allclose(f.sample(11.0), [12.0, -12.0])
    np.testing.assert_allclose(f.sample(11.5), [12.5, -12.5])


def test_past_stamp_jumps_into_the_segment_containing_now() -> None:
    f = follower()
    f.update(0.0)
    # Stamp 10, points at 10.0, 10.5, 11.0, 11.5 with j1 = 0, 1, 2, 3; now = 11.25.
    assert f.receive(ramp(10.0, [0.0, 0.5, 1.0, 1.5]), now=11.2)
    np.testing.assert_allclose(f.sample(11.25), [2.5, -2.5])  # middle of segment 2 -> 3
    np.testing.assert_allclose(f.sample(11.5), [3.0, -3.0])


def test_new_message_replaces_the_running_trajectory_on_arrival() -> None:
    f = follower()
    f.receive(ramp(0.0, [1.0, 2.0, 3.0], start=0.0, step=1.0), now=0.0)
    f.update(0.0)
    np.testing.assert_allclose(f.sample(1.5), [0.5, -0.5])
    # Replacement going the other way, stamp 0: starts from the current command (0.5 at 1.5).
    f.receive(ramp(0.0, [0.5, 1.0], start=-1.0, step=-1.0), now=1.5)
    np.testing.assert_allclose(f.sample(1.5), [0.5, -0.5])
    np.testing.assert_allclose(f.sample(2.0), [-1.0, 1.0])  # reached new point 0
    np.testing.assert_allclose(f.sample(2.5), [-2.0, 2.0])  # new point 1; old one never resumes
    np.testing.assert_allclose(f.sample(4.0), [-2.0, 2.0])


def test_only_the_latest_of_two_messages_between_cycles_runs() -> None:
    f = follower()
    f.receive(ramp(0.0, [1.0], start=5.0), now=0.1)
    f.receive(ramp(0.0, [1.0], start=7.0), now=0.2)
    f.update(0.2)
    np.testing.assert_allclose(f.sample(1.2), [7.0, -7.0])
    assert f.measures.metrics().superseded == 1
    assert f.measures.metrics().accepted == 2


def test_holds_the_last_point_after_the_end() -> None:
    f = follower()
    f.receive(ramp(0.0, [0.5, 1.0], start=1.0), now=0.0)
    f.update(0.0)
    for t in (1.0, 2.0, 100.0):
        sample = f.update(t)
        np.testing.assert_allclose(sample.positions, [2.0, -2.0])
        np.testing.assert_allclose(sample.velocities, [0.0, 0.0])
        assert sample.holding


# ---------------------------------------------------------------- interpolation


def test_positions_only_gives_linear_segments() -> None:
    f = follower()
    f.update(0.0)
    command = TrajectoryCommand(
        stamp=0.0,
        joint_names=JOINTS,
        points=[TrajectoryPoint(1.0, [0.0, 0.0]), TrajectoryPoint(2.0, [1.0, 2.0])],
    )
    f.receive(command, now=0.0)
    f.update(0.0)
    sample = f.update(1.25)
    np.testing.assert_allclose(sample.positions, [0.25, 0.5])
    np.testing.assert_allclose(sample.velocities, [1.0, 2.0])


def test_positions_and_velocities_give_cubic_hermite_segments() -> None:
    f = follower()
    f.update(0.0)
    command = TrajectoryCommand(
        stamp=0.0,
        joint_names=JOINTS,
        points=[(1.0, [0.0, 0.0], [1.0, 0.0]), (2.0, [1.0, 1.0], [0.0, 0.0])],
    )
    assert f.receive(command, now=0.0)
    f.update(0.0)
    # p(s) = s + s^2 - s^3 for j1 (v0=1, v1=0), 3s^2 - 2s^3 for j2 (v0=v1=0), s = 0.5.
    sample = f.update(1.5)
    np.testing.assert_allclose(sample.positions, [0.625, 0.5])
    np.testing.assert_allclose(sample.velocities, [1.25, 1.5])


def test_segment_is_linear_when_one_end_has_no_velocities() -> None:
    f = follower()
    f.update(0.0)
    command = TrajectoryCommand(
        stamp=0.0,
        joint_names=JOINTS,
        points=[(1.0, [0.0, 0.0], [5.0, 5.0]), (2.0, [1.0, 1.0], None)],
    )
    assert f.receive(command, now=0.0)
    f.update(0.0)
    np.testing.assert_allclose(f.sample(1.5), [0.5, 0.5])


def test_partial_goal_holds_missing_joints_at_their_command() -> None:
    f = TrajectoryFollower(JOINTS, [0.0, 3.0], name="arm", allow_partial_joints=True)
    f.update(0.0)
    command = TrajectoryCommand(stamp=0.0, joint_names=["j1"], points=[(1.0, [1.0], None)])
    assert f.receive(command, now=0.0)
    f.update(0.0)
    np.testing.assert_allclose(f.sample(1.0), [1.0, 3.0])


def test_joint_order_of_the_message_is_mapped_to_controller_order() -> None:
    f = follower()
    command = TrajectoryCommand(stamp=0.0, joint_names=["j2", "j1"], points=[(1.0, [2.0, 1.0])])
    assert f.receive(command, now=0.0)
    f.update(0.0)
    np.testing.assert_allclose(f.sample(1.0), [1.0, 2.0])


def test_first_order_lag_trails_the_command() -> None:
    f = follower(tracking_time_constant_s=0.1)
    f.update(0.0)
    f.receive(TrajectoryCommand(0.0, JOINTS, [(0.01, [1.0, 1.0])]), now=0.0)
    f.update(0.0)
    sample = f.update(0.1)
    np.testing.assert_allclose(sample.commanded_positions, [1.0, 1.0])
    np.testing.assert_allclose(sample.positions, [1 - np.exp(-1.0)] * 2)
    history = f.measures.history()
    np.testing.assert_allclose(history.commanded[-1], [1.0, 1.0])
    np.testing.assert_allclose(history.positions[-1], sample.positions)


def test_the_lag_is_a_first_order_step_response_on_every_cycle() -> None:
    # A command that reaches 1.0 at the first cycle: the arm at t = k * 10 ms is
    # 1 - exp(-t / tau), exactly (one exp(-dt / tau) per cycle).
    f = follower(tracking_time_constant_s=0.04)
    f.update(1.0)
    f.receive(TrajectoryCommand(1.0, JOINTS, [(0.01, [1.0, 1.0])]), now=1.0)
    for k in range(1, 21):
        sample = f.update(1.0 + 0.01 * k)
        np.testing.assert_allclose(sample.commanded_positions, [1.0, 1.0])
        np.testing.assert_allclose(sample.positions, [1.0 - np.exp(-0.01 * k / 0.04)] * 2)


def _lagging_ramp(desired: bool) -> tuple[TrajectoryFollower, np.ndarray, np.ndarray]:
    """An arm (40 ms lag) following j1 = 10 rad/s from 1.0 s; a new message at 1.452 s
    (stamp 1.45, points 0.05 s and 0.15 s later) is adopted at the cycle 1.46 s.
    Returns the follower, the measured and the commanded state at 1.45 s."""
    f = follower(tracking_time_constant_s=0.04, interpolate_from_desired_state=desired)
    f.update(1.0)
    f.receive(ramp(1.0, [0.1 * k for k in range(1, 11)], start=1.0), now=1.0)
    for k in range(1, 46):
        f.update(1.0 + 0.01 * k)
    measured, commanded = f.positions, f.commanded_positions
    f.receive(
        TrajectoryCommand(1.45, JOINTS, [(0.05, [20.0, -20.0]), (0.15, [21.0, -21.0])]), 1.452
    )
    return f, measured, commanded


def test_a_new_trajectory_starts_from_the_last_command_or_the_measured_state() -> None:
    desired, measured, commanded = _lagging_ramp(True)
    np.testing.assert_allclose(commanded, [4.5, -4.5])
    assert measured[0] < 4.5 - 0.3  # 40 ms behind a 10 rad/s command
    # interpolate_from_desired_state: from the old command at the adoption cycle (4.6),
    # linear to the first point (positions only) at 1.45 + 0.05 s.
    np.testing.assert_allclose(desired.update(1.46).commanded_positions, [4.6, -4.6])
    np.testing.assert_allclose(desired.update(1.48).commanded_positions, [12.3, -12.3])
    # JTC's default: from the measured state, behind the old command.
    from_measured, measured, _ = _lagging_ramp(False)
    np.testing.assert_allclose(from_measured.update(1.46).commanded_positions, measured)
    expected = measured + (np.array([20.0, -20.0]) - measured) * (0.02 / 0.04)
    np.testing.assert_allclose(from_measured.update(1.48).commanded_positions, expected)


def test_the_2026_replacement_splices_from_the_previous_cycle() -> None:
    """allow_trajectory_replacement (ros2_controllers PR 2419): the bridge is the old
    trajectory where the controller sampled it on the previous cycle, placed at the
    adoption cycle; a past stamp is not honoured (the points run from the adoption)."""
    f = follower(allow_trajectory_replacement=True)
    f.update(1.0)
    f.receive(ramp(1.0, [0.1 * k for k in range(1, 11)], start=1.0), now=1.0)
    for k in range(1, 46):
        f.update(1.0 + 0.01 * k)
    f.receive(
        TrajectoryCommand(1.45, JOINTS, [(0.05, [20.0, -20.0]), (0.15, [21.0, -21.0])]), 1.452
    )
    np.testing.assert_allclose(f.update(1.46).commanded_positions, [4.5, -4.5])  # repeated
    np.testing.assert_allclose(f.update(1.485).commanded_positions, [12.25, -12.25])
    np.testing.assert_allclose(f.update(1.51).commanded_positions, [20.0, -20.0])  # 1.46 + 0.05
    np.testing.assert_allclose(f.update(1.61).commanded_positions, [21.0, -21.0])
    # A stamp in the future: the old trajectory runs on to it, then the bridge (the old
    # one at the previous cycle's time plus the stamp's lead), then the new points at
    # stamp + time_from_start.
    g = follower(allow_trajectory_replacement=True)
    g.update(1.0)
    g.receive(ramp(1.0, [0.1 * k for k in range(1, 11)], start=1.0), now=1.0)
    for k in range(1, 46):
        g.update(1.0 + 0.01 * k)
    g.receive(TrajectoryCommand(1.5, JOINTS, [(0.05, [20.0, -20.0])]), 1.452)
    np.testing.assert_allclose(g.update(1.46).commanded_positions, [4.6, -4.6])
    np.testing.assert_allclose(g.update(1.5).commanded_positions, [4.9, -4.9])
    np.testing.assert_allclose(g.update(1.55).commanded_positions, [20.0, -20.0])
    # The switch is measured at the message's own first point, not at the bridge.
    steps = g.measures.boundary_steps()
    assert steps[-1].at == pytest.approx(1.55)


# ---------------------------------------------------------------- rejections


@pytest.mark.parametrize(
    ("command", "code", "reason"),
    [
        (
            TrajectoryCommand(1.0, JOINTS, [(0.5, [0, 0])]),
            "ends_in_past",
            "controller 'arm': trajectory ends in the past: header.stamp 1.000000 s + last "
            "time_from_start 0.500000 s = 1.500000 s is before now 2.000000 s",
        ),
        (
            TrajectoryCommand(0.0, ["j1", "j9"], [(0.5, [0, 0])]),
            "unknown_joint",
            "controller 'arm': joint 'j9' is not one of the controller's joints ['j1', 'j2']",
        ),
        (
            TrajectoryCommand(0.0, ["j1"], [(0.5, [0])]),
            "missing_joints",
            "controller 'arm': trajectory is missing joints ['j2'] of ['j1', 'j2'] "
            "(allow_partial_joints is false)",
        ),
        (
            TrajectoryCommand(0.0, ["j1", "j1"], [(0.5, [0, 0])]),
            "duplicate_joint",
            "controller 'arm': joint 'j1' appears 2 times in joint_names; expected each joint once",
        ),
        (
            TrajectoryCommand(0.0, [], [(0.5, [])]),
            "empty_joint_names",
            "controller 'arm': trajectory has no joint_names; expected ['j1', 'j2']",
        ),
        (
            TrajectoryCommand(0.0, JOINTS, []),
            "empty_points",
            "controller 'arm': trajectory has no points; expected at least 1",
        ),
        (
            TrajectoryCommand(0.0, JOINTS, [(0.5, [0, 0]), (0.5, [1, 1])]),
            "non_increasing_time",
            "controller 'arm': time_from_start is not strictly increasing: point 1 at "
            "0.500000 s follows point 0 at 0.500000 s",
        ),
        (
            TrajectoryCommand(0.0, JOINTS, [(0.5, [0, 0]), (0.4, [1, 1])]),
            "non_increasing_time",
            "controller 'arm': time_from_start is not strictly increasing: point 1 at "
            "0.400000 s follows point 0 at 0.500000 s",
        ),
        (
            TrajectoryCommand(0.0, JOINTS, [(0.5, [0, 0]), (1.0, [1, 1, 1])]),
            "wrong_size",
            "controller 'arm': point 1 has 3 positions for 2 joint_names; expected 2",
        ),
        (
            TrajectoryCommand(0.0, JOINTS, [(0.5, [0, 0], [0.0])]),
            "wrong_size",
            "controller 'arm': point 0 has 1 velocities for 2 joint_names; expected 2 or none",
        ),
        (
            TrajectoryCommand(0.0, JOINTS, [(0.5, [0, 0], [0.1, 0.0]), (1.0, [1, 1], [0.0, 0.5])]),
            "nonzero_end_velocity",
            "controller 'arm': last point has velocity 0.5 for joint 'j2'; expected 0 "
            "(allow_nonzero_velocity_at_end is false, the Jazzy default)",
        ),
        (
            TrajectoryCommand(0.0, JOINTS, [(0.5, [0, float("nan")])]),
            "non_finite",
            "controller 'arm': point 0 has position nan for joint 'j2'; expected finite values",
        ),
    ],
    ids=lambda v: v if isinstance(v, str) and " " not in v else None,
)
def test_each_rejection_rule_has_its_reason_and_keeps_the_running_trajectory(
    command: TrajectoryCommand, code: str, reason: str, caplog: pytest.LogCaptureFixture
) -> None:
    f = follower()
    assert f.receive(ramp(0.0, [1.0], start=4.0), now=0.0)
    f.update(0.0)
    with caplog.at_level("WARNING", logger="relay_ros.sim.trajectory_follower"):
        result = f.receive(command, now=2.0)
    assert not result
    assert (result.code, result.reason) == (code, reason)
    assert code in REJECT_CODES
    assert reason in caplog.text
    metrics = f.measures.metrics()
    assert (metrics.rejected, metrics.rejection_reasons, metrics.last_rejection) == (
        1,
        {code: 1},
        reason,
    )
    np.testing.assert_allclose(f.sample(1.0), [4.0, -4.0])  # still the old trajectory


def test_stamp_in_past_is_accepted_while_its_end_is_still_ahead() -> None:
    f = follower()
    assert f.receive(ramp(1.0, [0.5, 1.0]), now=2.0)  # ends exactly at now
    assert not f.receive(ramp(1.0, [0.5, 1.0]), now=2.001)


def test_options_relax_partial_and_end_velocity_rules() -> None:
    f = follower(allow_partial_joints=True, allow_nonzero_velocity_at_end=True)
    assert f.receive(TrajectoryCommand(0.0, ["j1"], [(0.5, [0.0], [1.0])]), now=0.0)
    # Missing joints are fine, unknown ones still are not.
    assert f.receive(TrajectoryCommand(0.0, ["x"], [(0.5, [0.0])]), now=0.0).code == "unknown_joint"


def test_constructor_rejects_inconsistent_configuration() -> None:
    with pytest.raises(FollowerConfigError) as info:
        TrajectoryFollower(JOINTS, [0.0], name="arm")
    assert str(info.value) == (
        "controller 'arm' has 1 initial positions for 2 joints ['j1', 'j2']; expected 2"
    )
    with pytest.raises(FollowerConfigError, match="lists joints \\['a'\\] more than once"):
        TrajectoryFollower(["a", "a"], [0.0, 0.0])
    with pytest.raises(FollowerConfigError, match="has no joints"):
        TrajectoryFollower([], [])


# ---------------------------------------------------------------- measures


def test_stall_time_counts_holding_after_the_end() -> None:
    f = follower()
    f.receive(ramp(0.0, [0.5, 1.0]), now=0.0)
    for k in range(16):  # 0.0 .. 1.5 in 0.1 s cycles; trajectory ends at t=1.0
        f.update(k * 0.1)
    metrics = f.measures.metrics()
    assert metrics.stall_time_s == pytest.approx(0.5)
    assert metrics.stall_events == 1
    assert metrics.longest_stall_s == pytest.approx(0.5)
    assert metrics.holding
    assert metrics.measured_s == pytest.approx(1.5)


def test_stall_time_is_zero_when_each_chunk_arrives_before_the_previous_ends() -> None:
    f = follower()
    t = 0.0
    for chunk in range(5):
        f.receive(ramp(t, [0.1, 0.2, 0.3, 0.4, 0.5], start=chunk), now=t)
        for _ in range(3):
            f.update(t)
            t += 0.1
    metrics = f.measures.metrics()
    assert metrics.stall_time_s == 0.0
    assert metrics.stall_events == 0
    assert metrics.switches == 4


def test_stall_episodes_end_at_a_new_trajectory() -> None:
    f = follower()
    f.receive(ramp(0.0, [0.5]), now=0.0)
    f.update(0.0)
    f.update(1.0)  # stalled 0.5
    f.receive(ramp(0.0, [0.5]), now=1.0)
    f.update(1.0)
    f.update(1.2)  # following
    f.update(2.0)  # stalled 0.5 again
    metrics = f.measures.metrics()
    assert metrics.stall_time_s == pytest.approx(1.0)
    assert metrics.stall_events == 2
    assert metrics.longest_stall_s == pytest.approx(0.5)


def test_boundary_step_is_about_one_for_a_seamless_continuation() -> None:
    f = follower()
    dt, step = 0.1, 0.01
    # Chunk 1: j1 = 0.00 .. 0.09 at 0.1 .. 1.0 s.
    f.receive(ramp(0.0, [dt * (k + 1) for k in range(10)], start=0.0, step=step), now=0.0)
    f.update(0.0)
    f.update(0.5)  # the command is at 0.04
    # Chunk 2 continues the same line, re-timed to now with its first point one dt ahead.
    f.receive(ramp(0.5, [dt * (k + 1) for k in range(10)], start=0.05, step=step), now=0.5)
    f.update(0.5)
    (boundary,) = f.measures.boundary_steps()
    assert boundary.jump == pytest.approx(step)
    assert boundary.ratio == pytest.approx(1.0)
    assert f.measures.metrics().boundary_step_max == pytest.approx(1.0)
    np.testing.assert_allclose(f.measures.history().switch_times, [0.5])


def test_boundary_step_is_large_for_a_jump() -> None:
    f = follower()
    f.receive(ramp(0.0, [0.1 * (k + 1) for k in range(10)], start=0.0, step=0.01), now=0.0)
    f.update(0.0)
    f.update(0.5)
    f.receive(ramp(0.0, [0.1 * (k + 1) for k in range(10)], start=1.0, step=0.01), now=0.5)
    f.update(0.5)
    metrics = f.measures.metrics()
    assert metrics.boundary_step_last == pytest.approx((1.0 - 0.04) / 0.01)
    assert metrics.boundary_jump_max == pytest.approx(0.96)


def test_action_age_uses_the_observation_time() -> None:
    f = follower()
    f.receive(ramp(0.0, [0.1, 0.2, 0.3]), now=1.0, t_obs=0.9)
    for t in (1.0, 1.1, 1.2):
        f.update(t)
    metrics = f.measures.metrics()
    assert metrics.action_age_samples == 3
    assert metrics.action_age_mean_s == pytest.approx(0.2)
    assert metrics.action_age_p50_s == pytest.approx(0.2)
    assert metrics.action_age_max_s == pytest.approx(0.3)
    # t_obs may also travel inside the command (the node parses header.frame_id).
    f.receive(ramp(0.0, [0.1], t_obs=1.15), now=1.2)
    f.update(1.25)
    assert f.measures.metrics().action_age_max_s == pytest.approx(0.3)
    assert f.measures.metrics().action_age_samples == 4


def test_no_action_age_without_observation_time() -> None:
    f = follower()
    f.receive(ramp(0.0, [0.1]), now=0.0)
    f.update(0.0)
    assert f.measures.metrics().action_age_samples == 0
    assert f.measures.metrics().action_age_mean_s is None


def test_reset_metrics_clears_measures_but_keeps_the_state() -> None:
    f = follower()
    f.receive(ramp(0.0, [0.5, 1.0], start=1.0), now=0.0)
    f.update(0.0)
    f.update(3.0)
    f.receive(TrajectoryCommand(0.0, [], []), now=3.0)
    f.measures.reset()
    metrics = f.measures.metrics()
    assert (metrics.accepted, metrics.rejected, metrics.stall_time_s) == (0, 0, 0.0)
    assert f.measures.history().times.size == 0
    np.testing.assert_allclose(f.sample(4.0), [2.0, -2.0])
    assert (
        f.measures.metrics().stall_time_s == 0.0
    )  # not measuring until the next accepted trajectory


def test_history_is_bounded() -> None:
    f = follower(history_length=5)
    for k in range(12):
        f.update(k * 0.01)
    history = f.measures.history()
    assert history.times.shape == (5,)
    assert history.commanded.shape == (5, 2)
    assert history.positions.shape == (5, 2)
    assert history.joint_names == ("j1", "j2")
    assert history.times[0] == pytest.approx(0.07)


def test_metrics_are_json_friendly() -> None:
    import json

    f = follower()
    f.receive(ramp(0.0, [0.1]), now=0.0, t_obs=-0.1)
    f.update(0.0)
    data = json.loads(json.dumps(f.measures.metrics().to_dict()))
    assert data["name"] == "arm"
    assert data["accepted"] == 1


def test_concurrent_receive_and_update_are_safe() -> None:
    f = follower()
    errors: list[BaseException] = []

    def publisher() -> None:
        try:
            for k in range(200):
                f.receive(ramp(0.0, [0.01, 0.02], start=k * 0.01, step=0.01), now=k * 0.001)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    thread = threading.Thread(target=publisher)
    thread.start()
    for k in range(400):
        f.update(k * 0.0005)
    thread.join()
    assert not errors
    assert f.measures.metrics().accepted == 200


# ---------------------------------------------------------------- message conversion


def _stamp(seconds: float) -> SimpleNamespace:
    sec = int(seconds)
    return SimpleNamespace(sec=sec, nanosec=round((seconds - sec) * 1e9))


def test_from_msg_converts_a_joint_trajectory_message() -> None:
    msg = SimpleNamespace(
        header=SimpleNamespace(stamp=_stamp(12.5), frame_id=format_t_obs(12.375)),
        joint_names=["j1", "j2"],
        points=[
            SimpleNamespace(
                time_from_start=_stamp(0.1), positions=[0.1, 0.2], velocities=[1.0, 2.0]
            ),
            SimpleNamespace(time_from_start=_stamp(0.2), positions=[0.3, 0.4], velocities=[]),
        ],
    )
    command = TrajectoryCommand.from_msg(msg)
    assert command.stamp == pytest.approx(12.5)
    assert command.t_obs == 12.375
    assert list(command.joint_names) == ["j1", "j2"]
    assert command.points[0] == TrajectoryPoint(pytest.approx(0.1), [0.1, 0.2], [1.0, 2.0])
    assert command.points[1].velocities is None


def test_t_obs_tag_round_trips_and_ignores_other_frame_ids() -> None:
    assert parse_t_obs(format_t_obs(1764410400.123456)) == 1764410400.123456
    assert parse_t_obs("") is None
    assert parse_t_obs("base_link") is None
    assert parse_t_obs("t_obs=soon") is None
    assert parse_t_obs("t_obs=nan") is None


def test_switch_gaps_at_the_same_instant_read_zero_for_a_seamless_line() -> None:
    # The new chunk continues the old line: its own curve, extended back from its first
    # point, meets the old command at the switch instant in position and velocity.
    f = follower()
    f.receive(ramp(0.0, [0.1 * (k + 1) for k in range(10)], step=0.01), now=0.0)
    f.update(0.0)
    f.update(0.5)
    f.receive(ramp(0.5, [0.1 * (k + 1) for k in range(10)], start=0.05, step=0.01), now=0.5)
    f.update(0.5)
    (boundary,) = f.measures.boundary_steps()
    assert boundary.position_gap == pytest.approx(0.0, abs=1e-12)
    assert boundary.velocity_gap == pytest.approx(0.0, abs=1e-9)
    assert boundary.typical_step == pytest.approx(0.01)
    assert not boundary.at_rest


def test_switch_gaps_read_a_step_and_a_standing_switch_counts_as_at_rest() -> None:
    f = follower()
    f.receive(ramp(0.0, [0.1 * (k + 1) for k in range(10)], step=0.01), now=0.0)
    f.update(0.0)
    f.update(0.5)  # old command 0.04 moving at 0.1/s
    # Same slope, 0.2 higher: one C0 step of 0.2, no C1 step.
    f.receive(ramp(0.5, [0.1 * (k + 1) for k in range(10)], start=0.25, step=0.01), now=0.5)
    f.update(0.5)
    f.update(2.0)  # both chunks over: the command stands at the last point
    f.receive(ramp(0.0, [2.1, 2.2], start=0.34, step=0.0), now=2.0)
    f.update(2.0)
    moving, standing = f.measures.boundary_steps()
    assert moving.position_gap == pytest.approx(0.2)
    assert moving.velocity_gap == pytest.approx(0.0, abs=1e-9)
    assert standing.at_rest and standing.position_gap == pytest.approx(0.0, abs=1e-12)
