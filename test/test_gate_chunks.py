"""The publication check on StreamingCore's synthetic clock: velocity (and acceleration)
over the whole published trajectory, refused or clamped, and holds only from what was
accepted (issue 21: a chunk whose last action jumped 2.65 rad was published, and the
hold after a swallowed request commanded the jumped-to value)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from controller_rig import ControllerRig
from streaming_rig import CoreRig, ramp_policy, velocity_limits
from test_hold_matrix import sweeping_policy
from test_streaming_start import moving_policy

from relay_ros.pipeline.gate.chunks import MAX_START_DELAY_SLOTS, check_publication
from relay_ros.pipeline.gate.controller import CommandedMotion, ControllerModel
from relay_ros.pipeline.gate.motion import MotionLimits, check_motion
from relay_ros.pipeline.health import Level
from relay_ros.pipeline.joint_limits import JointLimit
from relay_ros.pipeline.publication import Publication
from relay_ros.server.metadata import build_metadata
from relay_ros.sim.streaming_loop import LoopRun, run_streaming_loop

H = 50
JUMP = 2.65  # rad, on joint1 (limits -2.9..2.9, 2.5 rad/s) from 0.1 + 49 * 0.002


def jumping_policy(jump_from: int = 1):
    """The ramp policy; from call ``jump_from`` on, the last action of joint1 jumps."""
    base = ramp_policy(H)
    calls = [0]

    def infer(obs):
        calls[0] += 1
        actions = base(obs)
        if calls[0] > jump_from:
            actions[-1, 0] += JUMP
        return actions

    return infer


def test_a_jump_in_the_last_action_is_refused_and_the_hold_keeps_the_accepted_value() -> None:
    rig = CoreRig(policy=jumping_policy())
    rig.connect()
    rig.run_until(lambda: rig.core.counts["refusals"] >= 1)
    accepted = rig.chunks()
    assert len(accepted) == 1  # the first chunk; the second jumps
    reason = rig.core.last_refusal
    assert reason is not None and reason.startswith("joint 'joint1' would move at ")
    assert "between points" in reason and "its velocity limit is 2.5000/s" in reason
    assert reason.endswith("refusing the chunk (limits_mode=refuse)")
    health = rig.health()
    assert health.level == Level.WARN and reason in health.values["hold_reason"]
    # The hold commands where the accepted trajectory had the arm, never a jumped value.
    holds = rig.holds()
    assert holds, "a refusal holds"
    hold = holds[-1].points.positions[0]
    last_accepted = accepted[-1].points.positions
    assert abs(hold[0] - last_accepted[:, 0]).min() < 0.01
    assert hold[0] < 0.5 and np.all(np.abs(hold - rig.state[:6]) < 0.05)
    # Nothing published, holds included, ever exceeds the velocity limits (the rig
    # checks every message as a controller would run it).
    rig.run(1.0)
    assert all(m.points.positions[:, 0].max() < 0.5 for m in rig.messages("arm"))
    assert rig.checker.trajectories >= 3 and rig.checker.worst_ratio <= 1.0


def test_the_tail_past_the_execute_horizon_counts_as_much_as_the_first_half() -> None:
    base = ramp_policy(H)

    def infer(obs):
        actions = base(obs)
        actions[40:, 2] -= 0.5  # action 40 of 50: after an execute horizon of 25
        return actions

    rig = CoreRig(policy=infer)
    rig.connect()
    rig.run_until(lambda: rig.core.counts["refusals"] >= 1)
    assert rig.chunks() == []
    assert "joint 'joint3' would move at" in rig.core.last_refusal


def test_clamp_mode_slows_the_jump_says_so_and_stays_within_the_limit() -> None:
    rig = CoreRig(policy=jumping_policy(), overrides={"limits_mode": "clamp"})
    rig.connect()
    rig.run_until(lambda: rig.core.counts["chunks_clamped"] >= 1)
    assert rig.core.counts["refusals"] == 0
    clamped = rig.chunks()[-1].points.positions[:, 0]
    assert clamped[-1] < clamped[-2] + 2.5 * 0.02 + 1e-9  # slowed, not jumped
    note = rig.core.last_clamp
    assert note is not None and note.startswith("clamped the trajectory into the joint limits")
    assert note in rig.log.text("warning")
    values = rig.health().values
    assert values["last_clamp"] == note and int(values["chunks_clamped"]) >= 1
    rig.checker.assert_within()


def test_acceleration_limits_where_given() -> None:
    # The chunk's own speed triples at row 25 (0.1 to 0.3 rad/s in 20 ms): over a
    # 0.5 rad/s^2 limit however its start and stop are timed (retiming.py).
    base = dataclasses.replace(CoreRig().config.joint_limits["joint1"], max_acceleration=0.5)
    limits = {**CoreRig().config.joint_limits, "joint1": base}
    ramp = ramp_policy(H)

    def faster(obs):
        actions = ramp(obs)
        actions[25:, 0] += 0.004 * np.arange(1, H - 24)
        return actions

    rig = CoreRig(overrides={"joint_limits": limits}, policy=faster)
    rig.connect()
    rig.run_until(lambda: rig.core.counts["refusals"] >= 1)
    assert "joint 'joint1' would accelerate at" in rig.core.last_refusal
    assert "its acceleration limit is 0.5000/s^2" in rig.core.last_refusal


def test_the_first_segment_starts_where_the_controller_is_moving() -> None:
    motion = CommandedMotion()
    assert motion.state_at(0.0) is None
    tfs = 0.02 * np.arange(1, 6)
    positions = 0.1 + 1.0 * tfs[:, None] * np.ones((1, 2))  # 1 rad/s
    motion.follow(0.0, np.array([0.1, 0.1]), np.array([1.0, 1.0]), positions, tfs)
    position, velocity = motion.state_at(0.05)
    np.testing.assert_allclose(position, 0.15, atol=1e-9)
    np.testing.assert_allclose(velocity, 1.0, atol=1e-9)
    position, velocity = motion.state_at(1.0)  # after the last point: standing there
    np.testing.assert_allclose(position, positions[-1])
    assert not velocity.any()


def test_a_joint_without_limits_is_never_commanded() -> None:
    limits = dict(CoreRig().config.joint_limits)
    del limits["joint4"]
    rig = CoreRig(overrides={"joint_limits": limits})
    rig.connect()
    rig.run_until(lambda: rig.core.counts["refusals"] >= 1)
    assert rig.chunks() == []
    assert rig.core.last_refusal == "cannot command: no velocity limit known for joints ['joint4']"


# --- a chunk for a still arm starts later rather than too fast -------------------------

DT = 0.02
LIMITS = {
    name: JointLimit(min_position=-3.0, max_position=3.0, max_velocity=3.0) for name in ("j1", "j2")
}


def _slowing_down() -> np.ndarray:
    """50 actions from 2.5 rad/s down to rest, the first one a slot's travel from 0."""
    speed = 2.5 * np.cos(np.pi / 2 * np.arange(50) / 50)
    return (np.cumsum(speed) * DT)[:, None] * np.ones((1, 2))


def _publication(positions: np.ndarray) -> Publication:
    tfs = DT + DT * np.arange(len(positions))
    return Publication(
        stamp=0.0,
        positions=positions,
        time_from_start=tfs,
        t_obs=0.0,
        first_index=0,
        switch_time=tfs[min(24, len(tfs) - 1)],
        chunk_seq=1,
    )


def _check(publication: Publication, motion: CommandedMotion | None = None):
    return check_publication(
        publication,
        joints=("j1", "j2"),
        joint_limits=LIMITS,
        limits_mode="refuse",
        max_joint_step=0.25,
        motion=motion or CommandedMotion(),
        measured=np.zeros(2),
    )


def test_a_still_arm_joins_a_fast_chunk_a_few_slots_later_within_its_limits() -> None:
    """2.5 rad/s at the first point, slowing down to rest (limit 3): from rest the
    cubic to a first point one slot ahead would peak at 3.33 rad/s. The chunk is
    delayed by the fewest slots that fit, as a whole (switch and shift too), not
    refused."""
    positions = _slowing_down()
    publication = _publication(positions)
    undelayed = check_motion(
        np.zeros(2),
        positions,
        publication.time_from_start,
        MotionLimits.from_joint_limits(LIMITS, ("j1", "j2")),
    )
    assert undelayed.refusal is not None and "to the first point" in undelayed.refusal.reason
    verdict = _check(publication)
    assert verdict.refusal is None and verdict.publication is not None
    delayed = verdict.publication
    delay = delayed.time_from_start[0] - publication.time_from_start[0]
    slots = round(delay / DT)
    assert 1 <= slots <= MAX_START_DELAY_SLOTS
    np.testing.assert_allclose(delayed.time_from_start, publication.time_from_start + delay)
    assert delayed.switch_time == pytest.approx(publication.switch_time + delay)
    assert delayed.shift_s == pytest.approx(publication.shift_s + delay)
    np.testing.assert_array_equal(delayed.positions, positions)
    # The fewest: one slot less still breaks the limit.
    if slots > 1:
        fewer = dataclasses.replace(
            publication, time_from_start=publication.time_from_start + (slots - 1) * DT
        )
        assert _check(fewer).refusal is not None
    assert 0.0 < verdict.peak_speed_ratio <= 1.0


def test_a_moving_arm_or_a_jump_between_points_is_refused_not_delayed() -> None:
    # The controller passes 0 at 1 rad/s at the stamp: delaying would not make it
    # stand, so the too-fast first segment is refused as it is.
    moving = CommandedMotion()
    moving.follow(-0.1, np.full(2, -0.1), np.ones(2), np.full((1, 2), 0.1), np.array([0.2]))
    position, velocity = moving.state_at(0.0)
    assert np.abs(position).max() < 0.05 and velocity.min() > 0.5
    verdict = _check(_publication(-_slowing_down()), moving)
    assert verdict.refusal is not None and verdict.refusal.kind == "velocity"
    assert "to the first point" in verdict.refusal.reason
    jump = np.zeros((50, 2))
    jump[30:, 0] = 1.0  # 1 rad between two points 20 ms apart: no delay helps
    verdict = _check(_publication(jump))
    assert verdict.refusal is not None and "between points" in verdict.refusal.reason


def _line_motion() -> tuple[CommandedMotion, np.ndarray]:
    """1.5 rad/s from -0.5 at t = 0 (50 points): the command a lagging arm follows."""
    motion = CommandedMotion()
    tfs = DT * np.arange(1, 51)
    line = -0.5 + 1.5 * tfs[:, None] * np.ones((1, 2))
    motion.follow(0.0, np.full(2, -0.5), np.full(2, 1.5), line, tfs)
    return motion, line


def _continuing(motion: CommandedMotion, line: np.ndarray, stamp: float) -> Publication:
    """The command's next 20 points after ``stamp``, re-timed to it."""
    commanded = motion.state_at(stamp)[0]
    rest = line[line[:, 0] > commanded[0] + 1e-9][:20]
    return dataclasses.replace(
        _publication(rest), stamp=stamp, time_from_start=DT + DT * np.arange(len(rest))
    )


def _check_lagging(
    publication: Publication,
    motion: CommandedMotion,
    measured: np.ndarray,
    measured_at: float,
    controller: ControllerModel,
):
    return check_publication(
        publication,
        joints=("j1", "j2"),
        joint_limits=LIMITS,
        limits_mode="refuse",
        max_joint_step=0.25,
        motion=motion,
        measured=measured,
        measured_at=measured_at,
        controller=controller,
        dt=DT,
    )


def test_a_lagging_arm_is_checked_from_where_its_controller_starts() -> None:
    """Issue 26, fault 6. A first-order lag of 60 ms at 1.5 rad/s: the arm measures
    0.09 rad behind its command. With interpolate_from_desired_state (the default the
    docs recommend) the controller starts the next chunk from the command, so the
    chunk that continues it is accepted from there; before, the check switched to
    the measured state beyond 0.05 rad and refused it ("would move at ... from
    where the controller is"). With JTC's default (measured) the chunk starts from
    the lagging arm, and the catch-up segment that gives is refused as it would run."""
    motion, line = _line_motion()
    stamp = 0.5
    commanded = motion.state_at(stamp)[0]
    lag = 0.06
    measured = motion.state_at(stamp - lag)[0]  # the arm, measured at the stamp
    assert 0.08 < float(np.abs(commanded - measured).max()) < 0.1
    publication = _continuing(motion, line, stamp)
    desired = _check_lagging(publication, motion, measured, stamp, ControllerModel())
    assert desired.refusal is None, desired.refusal
    np.testing.assert_allclose(desired.start, commanded)
    from_measured = _check_lagging(
        publication, motion, measured, stamp, ControllerModel(interpolate_from_desired_state=False)
    )
    assert from_measured.refusal is not None and from_measured.refusal.kind == "velocity"
    assert "from where the controller is to the first point" in from_measured.refusal.reason
    np.testing.assert_allclose(from_measured.start, measured)


def test_an_arm_that_does_not_follow_is_refused_with_the_reason() -> None:
    """A stuck arm (0.3 rad behind, more than max_tracking_error 0.25) is refused with
    a sentence that says so, in either controller model; a lag within it is not."""
    motion, line = _line_motion()
    stamp = 0.5
    stuck = motion.state_at(stamp)[0] - 0.3
    publication = _continuing(motion, line, stamp)
    for desired in (True, False):
        verdict = _check_lagging(
            publication,
            motion,
            stuck,
            stamp,
            ControllerModel(interpolate_from_desired_state=desired),
        )
        assert verdict.refusal is not None and verdict.refusal.kind == "tracking"
        assert verdict.refusal.reason.startswith("the arm does not follow its command: joint 'j1'")
        assert "more than max_tracking_error 0.2500" in verdict.refusal.reason
    lenient = _check_lagging(
        publication, motion, stuck, stamp, ControllerModel(max_tracking_error=0.5)
    )
    assert lenient.refusal is None or lenient.refusal.kind != "tracking"


# --- issue 26, fault 3: the default acceleration bound --------------------------------


def oscillating_policy(amplitude: float = 0.015):
    """joint1 alternating +-amplitude around the observed state every action: at
    0.015 rad, 2.25 rad/s on the controller's cubics (limit 2.5), 450 rad/s^2."""

    def infer(obs):
        actions = np.tile(np.asarray(obs["state"], dtype=np.float32).reshape(1, -1), (H, 1))
        actions[:, 0] += amplitude * np.where(np.arange(H) % 2 == 0, 1.0, -1.0)
        return actions

    return infer


def test_an_oscillation_inside_the_velocity_limit_is_refused_by_default() -> None:
    """No acceleration limit is set (no URDF has one, no shipped config sets one): the
    default bound, max_velocity / dt = 125 rad/s^2 on the points' second differences,
    refuses it; before, six such chunks went out in 4 s."""
    rig = CoreRig(policy=oscillating_policy())
    assert not np.isfinite(rig.config.joint_limits["joint1"].max_acceleration)
    rig.connect()
    rig.run(2.0)
    assert rig.chunks() == []
    reason = rig.core.last_refusal or ""
    assert reason.startswith("joint 'joint1' would change speed from "), reason
    assert (
        "more than the default bound 125.0/s^2 (its velocity limit 2.5000/s per action " in reason
    )
    assert "period; no acceleration limit is set)" in reason


def test_the_default_bound_and_an_acceleration_limit_where_set() -> None:
    limits = {
        "a": JointLimit(-3.0, 3.0, 2.5),
        "b": JointLimit(-3.0, 3.0, 2.5, max_acceleration=10.0),
    }
    motion = MotionLimits.from_joint_limits(limits, ("a", "b"), dt=0.02)
    np.testing.assert_allclose(motion.action_acceleration, [125.0, 10.0])
    np.testing.assert_allclose(motion.max_acceleration, [np.inf, 10.0])
    # Half the amplitude changes speed by 1.5 rad/s per 20 ms point: within.
    tfs = DT * np.arange(1, 11)
    zigzag = 0.0075 * np.where(np.arange(10) % 2 == 0, 1.0, -1.0)[:, None] * np.ones((1, 2))
    zigzag[:, 1] = 0.0
    assert check_motion(np.zeros(2), zigzag, tfs, motion).ok
    assert not check_motion(np.zeros(2), 2.0 * zigzag, tfs, motion).ok
    # Without dt (no action period known) there is no default bound.
    assert not np.isfinite(MotionLimits.from_joint_limits(limits, ("a",)).action_acceleration[0])


@pytest.mark.parametrize("smoothing", ["auto", "prefix"])
@pytest.mark.parametrize("model", ["pi05", "pi0", "groot"])
def test_the_reference_policy_passes_the_default_bound(model: str, smoothing: str) -> None:
    """The visual reference policy through the node's core on the synthetic clock, as
    bench/motion.py runs it, on a server like the seeds' (the default smoothing) and on
    one with the action_prefix extension (the server's prefix): no chunk is refused."""
    run = LoopRun(
        model=model, smoothing=smoothing, server_prefix=smoothing == "prefix", duration_s=4.0
    )
    result = run_streaming_loop(run)
    assert result.refusals == 0
    assert result.startup.refusals == 0


# --- issue 26, fault 6: a lagging arm, and one that does not follow -------------------


def test_a_lagging_arm_streams_without_refusals() -> None:
    """A 50 ms first-order tracking lag, a server that continues from the committed
    actions (action_prefix, as the demo's), 1.5 rad/s between goals: the arm measures
    0.075 rad behind its command. Before, the check switched to the measured state
    beyond 0.05 rad and refused chunks ("would move at 5.265/s ... from where the
    controller is", 4 in 5 s); the controller (interpolate_from_desired_state) starts
    them from its command, and so does the check now: none is refused, and what the
    controllers run stays within the limits."""
    rig = ControllerRig(
        policy=moving_policy(honour_prefix=True),
        metadata=build_metadata("pi05", action_prefix=True),
        lag_s=0.05,
        # The reference server's prefix cross-fade steps up to 2.55 rad/s (see
        # test_streaming_start.py): over the shipped 2.5, not what this is about.
        overrides={"joint_limits": velocity_limits("pi05", 5.0)},
    )
    rig.connect()
    lags = []
    for k in range(5):
        rig.core.set_prompt("left" if k % 2 == 0 else "right")
        for _ in range(100):  # 1 s
            rig.step()
            lags.append(np.abs(rig.state[:6] - rig.followers["arm"].commanded_positions).max())
    assert len(rig.chunks()) >= 8
    assert 0.06 < max(lags) < rig.config.max_tracking_error
    assert rig.core.counts["refusals"] == 0, rig.core.last_refusal
    assert rig.executed.problems() == []


def test_an_arm_that_stops_following_is_refused_and_held_where_it_is() -> None:
    rig = ControllerRig(policy=sweeping_policy())
    rig.connect()
    rig.run(1.5)
    rig.stuck = True  # e-stopped: the joint states stand while the command moves on
    stuck_at = rig.state.copy()
    rig.run_until(lambda: rig.core.counts["refusals"] >= 1)
    reason = rig.core.last_refusal or ""
    assert reason.startswith("the arm does not follow its command: joint "), reason
    assert "more than max_tracking_error 0.2500 (stuck, stopped or e-stopped?)" in reason
    hold = rig.holds()[-1].points.positions[0]
    np.testing.assert_allclose(hold, stuck_at[:6], atol=1e-9)  # where the arm is
    rig.run(1.0)
    assert rig.executed.problems() == []


# --- max_joint_step and the splice ---------------------------------------------------


def _far_policy(offset: float, from_call: int = 1):
    """The ramp policy; from call ``from_call`` on, every chunk's joint1 is ``offset``
    rad from the measured state."""
    base = ramp_policy(H)
    calls = [0]

    def infer(obs):
        calls[0] += 1
        actions = base(obs)
        if calls[0] >= from_call:
            actions[:, 0] += offset
        return actions

    return infer


def test_max_joint_step_refuses_an_unsmoothed_chunk_that_starts_far_from_the_arm() -> None:
    """Two chunks at the arm, then chunks 0.6 rad from it, under velocity limits high
    enough that only max_joint_step (0.25) can refuse them: without smoothing the
    first point is the policy's own action, 0.6 rad from the arm, and is refused."""
    rig = CoreRig(
        policy=_far_policy(0.6, from_call=3),
        overrides={
            "joint_limits": velocity_limits("pi05", 100.0),
            "max_joint_step": 0.25,
            "smoothing": "none",
        },
    )
    rig.connect()
    rig.run_until(lambda: rig.core.counts["refusals"] >= 3)
    assert len(rig.chunks()) == 2
    reason = rig.core.last_refusal
    assert reason is not None and "more than max_joint_step 0.25" in reason, reason
    assert "joint 'joint1' by 0.6" in reason, reason


def test_the_splice_joins_a_chunk_that_disagrees_within_the_limits_or_it_is_refused() -> None:
    """The same switch with the default smoothing (splice) under the shipped limits:
    the splice joins the far chunk to what the arm follows, so its first point is near
    the arm (max_joint_step judges the published first point: there is no jump), and
    the move to the policy's new goal runs within the velocity limits, or the chunk is
    refused by the motion check. Never a trajectory over a limit (docs/node.md)."""
    rig = CoreRig(policy=_far_policy(0.6, from_call=3), overrides={"max_joint_step": 0.25})
    rig.connect()
    rig.run_until(lambda: len(rig.chunks()) >= 5)
    chunks = rig.chunks()
    # Each switch: the new first point against the previous chunk at that time.
    jumps = []
    for old, new in zip(chunks, chunks[1:]):
        t_old = old.points.stamp + old.points.time_from_start
        t_first = new.points.stamp + new.points.time_from_start[0]
        at = np.interp(t_first, t_old, old.points.positions[:, 0])
        jumps.append(abs(new.points.positions[0, 0] - at))
    assert max(jumps) < 0.25, jumps
    # The policy's goal is reached: the arm ends up near the far chunks.
    rig.run(1.0)
    last = rig.chunks()[-1].points.positions
    assert last[-1, 0] - 0.1 > 0.5, last[:, 0]
    assert rig.core.last_refusal is None or "max_joint_step" not in rig.core.last_refusal
    assert rig.checker.trajectories >= 5 and rig.checker.worst_ratio <= 1.0
