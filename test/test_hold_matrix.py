"""Holds from every trigger at every phase of a chunk, run by simulated controllers (issue 26).

On the synthetic clock (:class:`controller_rig.ControllerRig`: the core, the project's
joint_trajectory_controller model per output, chunks delivered after 1 ms, holds after
1, 20 or 150 ms) a policy sweeps the arm at 1.8 rad/s, and starts each chunk for a standing arm
0.22 rad away (the first chunk after a start or a hold, which the delayed start
allows). Each trigger (``~/enable`` false, a disconnect, ``dry_run`` on, ``~/reset``, a
clock jump, stale cameras, a refused chunk) fires at each phase of the first chunk
(inside its first segment, mid-chunk, at the switch, in the next chunk) and again
inside the first segment of the first chunk after the hold. The checker runs what the
controllers ran: no commanded speed over a velocity limit, no position outside a range,
no hold accelerating beyond its bound, no message rejected (a hold that arrives after
its point's time included).

Before this issue, holds went to a chunk's not-yet-reached first point (1.14x-1.39x
the velocity limit), from a stale measurement after ``~/reset``, and as a point 0.1 s
after their stamp, which a controller rejects when it arrives later.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest
from controller_rig import CYCLE_S, ControllerRig, ExecutedChecker

from relay_ros.pipeline.joint_limits import JointLimit
from relay_ros.sim.trajectory_command import TrajectoryCommand
from relay_ros.sim.trajectory_follower import TrajectoryFollower

H = 50
DT = 0.02
# rad/s, limits 2.5 (joints 1-4), 3.0 (5, 6), 2.0 (gripper): the cubic that stops at a
# goal peaks at 4/3 of the speed before it.
SPEED = np.array([1.8] * 6 + [1.4])
GOAL = 0.8  # |goal| of every joint, inside every range
OFFSET = 0.22  # a standing arm's first point: the delayed start allows up to 0.25


def sweeping_policy() -> Any:
    """Chunks that move every joint towards +-GOAL at SPEED from the observed state,
    turning at the goals; for an arm that stood still since the last observation the
    first action is OFFSET ahead (as a policy that does not start at the state). With
    ``refuse_next`` set, the next chunk jumps 0.2 rad mid-way (refused for its speed)."""
    memory: dict[str, Any] = {"state": None, "direction": np.ones(7), "refuse_next": False}
    steps = np.arange(H, dtype=np.float64)[:, None] * SPEED * DT

    def infer(obs: dict[str, Any]) -> np.ndarray:
        state = np.asarray(obs["state"], dtype=np.float64).reshape(-1)[:7]
        previous = memory["state"]
        still = previous is None or np.abs(state - previous).max() < 1e-6
        memory["state"] = state
        direction = memory["direction"]
        direction = np.where(
            state > 0.8 * GOAL, -1.0, np.where(state < -0.8 * GOAL, 1.0, direction)
        )
        memory["direction"] = direction
        goal = direction * GOAL
        start = state + (np.clip(goal - state, -OFFSET, OFFSET) if still else 0.0)
        plan = start + np.clip(goal - start, -steps, steps)
        if memory["refuse_next"]:
            memory["refuse_next"] = False
            plan[30:, 0] += 0.2
        padded = np.zeros((H, 32), dtype=np.float32)
        padded[:, :7] = plan
        return padded

    infer.memory = memory  # type: ignore[attr-defined]
    return infer


def matrix_rig(hold_delivery_s: float, **kwargs: Any) -> ControllerRig:
    rig = ControllerRig(policy=sweeping_policy(), hold_delivery_s=hold_delivery_s, **kwargs)
    rig.connect()
    return rig


def first_chunk_after(rig: ControllerRig, since: float) -> tuple[float, float]:
    """(publication time, first point time) of the first arm chunk published after ``since``."""
    rig.run_until(
        lambda: any(t > since and m.output == "arm" and m.frame_id for t, m in rig.published)
    )
    t, msg = next(
        (t, m) for t, m in rig.published if t > since and m.output == "arm" and m.frame_id
    )
    return t, t + float(msg.points.time_from_start[0])


# Where in the first chunk (published at p, first point at f) the trigger fires.
PHASES = {
    "first segment 30%": lambda p, f: p + 0.3 * (f - p),
    "first segment 80%": lambda p, f: p + 0.8 * (f - p),
    "mid chunk": lambda p, f: f + 0.2,
    "at the switch": lambda p, f: f + 24 * DT - 0.005,
    "next chunk": lambda p, f: f + 24 * DT + 0.1,
}
TRIGGERS = ("enable", "disconnect", "dry_run", "reset", "clock_jump", "stale", "refusal")


def fire(rig: ControllerRig, trigger: str) -> None:
    core = rig.core
    if trigger == "enable":
        core.set_enabled(False, rig.now)
    elif trigger == "disconnect":
        rig.disconnect("the test closed the connection")
        rig.reconnect_at = rig.now + 0.3
    elif trigger == "dry_run":
        core.apply_config(dataclasses.replace(core.config, dry_run=True), rig.now)
    elif trigger == "reset":
        core.reset_episode(rig.now)
    elif trigger == "clock_jump":
        rig.jump_clock(100.0)
    elif trigger == "stale":
        rig.cameras_on = False
    else:
        rig.policy.memory["refuse_next"] = True  # type: ignore[union-attr]


def recover(rig: ControllerRig, trigger: str) -> None:
    core = rig.core
    if trigger == "enable":
        core.set_enabled(True, rig.now)
    elif trigger == "dry_run":
        core.apply_config(dataclasses.replace(core.config, dry_run=False), rig.now)
    elif trigger == "stale":
        rig.cameras_on = True


def run_case(trigger: str, phase: str, hold_delivery_s: float) -> ControllerRig:
    """The trigger at ``phase`` of the first chunk, then again inside the first
    segment of the first chunk after that hold; 1 s of running after each."""
    rig = matrix_rig(hold_delivery_s)
    published, first_point = first_chunk_after(rig, -1.0)
    rig.run_until(lambda: rig.now >= PHASES[phase](published, first_point) - 1e-9)
    holds = len(rig.holds())
    fire(rig, trigger)
    rig.run_until(lambda: len(rig.holds()) > holds or rig.core.hold_reason is not None)
    rig.run(1.0)
    recover(rig, trigger)
    published, first_point = first_chunk_after(rig, rig.now)
    rig.run_until(lambda: rig.now >= PHASES["first segment 30%"](published, first_point) - 1e-9)
    fire(rig, trigger)
    rig.run(1.0)
    return rig


@pytest.mark.slow
@pytest.mark.parametrize("hold_delivery_s", [0.001, 0.02, 0.15], ids=["1ms", "20ms", "150ms"])
@pytest.mark.parametrize("phase", list(PHASES))
@pytest.mark.parametrize("trigger", TRIGGERS)
def test_every_hold_is_within_the_limits_and_obeyed(
    trigger: str, phase: str, hold_delivery_s: float
) -> None:
    rig = run_case(trigger, phase, hold_delivery_s)
    checker = rig.executed
    assert checker.problems() == [], "\n".join(checker.problems())
    # The holds were sent, reached the controllers and ran (the refusal of a chunk for
    # a standing arm needs none: nothing of ours moves it).
    assert checker.holds_adopted >= 1, rig.log.text()
    assert rig.core.counts["holds_not_sent"] == 0
    assert checker.samples > 1000


def test_a_hold_in_the_first_segment_starts_where_the_controller_is() -> None:
    """The case of the issue: disabled 30% into the first segment of the first chunk,
    whose first point is 0.22 rad from the standing arm. The hold starts from the
    commanded state then, not from the first point: each controller's command moves
    on smoothly (no faster than the limit) and comes to rest."""
    rig = matrix_rig(0.001)
    published, first_point = first_chunk_after(rig, -1.0)
    assert first_point - published > 2 * DT  # the delayed start of a still arm
    rig.run_until(lambda: rig.now >= published + 0.3 * (first_point - published) - 1e-9)
    at_trigger = rig.state.copy()
    rig.core.set_enabled(False, rig.now)
    hold = rig.holds()[-1]
    target = hold.points.positions[0]
    rig.run(1.0)
    assert rig.executed.problems() == []
    # Short of the first point (0.22 rad from the start): it stopped on the way.
    travelled = np.abs(target - at_trigger[:6])
    assert travelled.max() < 0.15, travelled
    np.testing.assert_allclose(rig.state[:6], target, atol=1e-6)


def test_reset_while_moving_holds_from_the_command_not_a_stale_measurement() -> None:
    """The issue's case: ~/reset while the arm moves, 0.2 s after the last joint state.
    The schedule used to be reset first, so the hold fell back to that measurement,
    0.36 rad behind the command at 1.8 rad/s, and pulled the arm back to it within
    0.1 s. Now the hold goes out first, from the commanded state."""
    rig = matrix_rig(0.001)
    published, first_point = first_chunk_after(rig, -1.0)
    rig.run_until(lambda: rig.now >= first_point + 0.15)
    rig.joint_states_on = False
    rig.run(0.2)
    rig.core.reset_episode(rig.now)
    rig.joint_states_on = True
    rig.run(1.0)
    assert len(rig.holds()) == 1 and rig.executed.holds_adopted == 2  # arm and gripper
    assert rig.executed.problems() == []


# --- the instrument, on inputs with a known answer ---------------------------------


def _follower_and_checker() -> tuple[TrajectoryFollower, ExecutedChecker]:
    limit = JointLimit(-3.0, 3.0, 2.0)
    checker = ExecutedChecker({"j": limit}, {"j": 50.0})
    checker.track("c", ["j"])
    return TrajectoryFollower(["j"], [0.0], name="c", log_rejections=False), checker


def _run(follower: TrajectoryFollower, checker: ExecutedChecker, until: float) -> None:
    t = 0.0
    while t < until:
        t = round(t + CYCLE_S, 9)
        checker.sample("c", t, follower.update(t).commanded_positions)


def test_the_checker_measures_a_known_speed_acceleration_and_rejection() -> None:
    # From rest to 0.3 in 0.1 s, both ends at rest: the cubic peaks at 1.5 x 3 rad/s
    # = 4.5 rad/s (2.25 x the 2 rad/s limit) and accelerates 6 * 0.3 / 0.1^2 = 180 at
    # its ends, which 1 ms second differences see less its jerk (3600/s^3) x 1 ms.
    follower, checker = _follower_and_checker()
    follower.receive(TrajectoryCommand(0.0, ["j"], [(0.1, [0.3], [0.0])]), 0.0)
    checker.adopted("c", hold=True)
    _run(follower, checker, 0.3)
    assert checker.worst_speed_ratio == pytest.approx(2.25, rel=1e-3)
    assert checker.worst_hold_acceleration_ratio == pytest.approx(176.4 / 50.0, rel=1e-3)
    assert len(checker.problems()) == 2
    # A trajectory stamped 1 s with its point at 1.1 s, arriving at 1.2 s: rejected.
    late = follower.receive(TrajectoryCommand(1.0, ["j"], [(0.1, [0.0], [0.0])]), 1.2)
    assert not late
    checker.rejected("c", str(late.reason))
    assert any("ends in the past" in p for p in checker.problems())
    # Within the limits: 0.1 in 0.2 s peaks at 0.75 rad/s, 15 rad/s^2.
    follower, checker = _follower_and_checker()
    follower.receive(TrajectoryCommand(0.0, ["j"], [(0.2, [0.1], [0.0])]), 0.0)
    checker.adopted("c", hold=True)
    _run(follower, checker, 0.5)
    assert checker.problems() == []
    assert checker.worst_speed_ratio == pytest.approx(0.375, rel=1e-3)
    assert checker.worst_hold_acceleration_ratio == pytest.approx(15.0 / 50.0, rel=0.01)


def test_the_simulated_controller_starts_a_zero_stamp_on_arrival_however_late() -> None:
    """What a hold relies on, as joint_trajectory_controller does it: a zero stamp is
    never 'in the past', and its point is reached its time_from_start after the first
    cycle following arrival, from the command the controller had then."""
    follower, checker = _follower_and_checker()
    follower.receive(TrajectoryCommand(0.0, ["j"], [(0.2, [0.1], [0.0])]), 0.0)
    _run(follower, checker, 0.5)
    hold = TrajectoryCommand(0.0, ["j"], [(0.2, [0.3], [0.0])])
    assert follower.receive(hold, 10.0)  # 10 s after anything it could be stamped with
    assert follower.update(10.001).commanded_positions[0] == pytest.approx(0.1)
    assert 0.1 < follower.update(10.101).commanded_positions[0] < 0.3
    assert follower.update(10.201).commanded_positions[0] == pytest.approx(0.3)
    late = TrajectoryCommand(9.0, ["j"], [(0.1, [0.1], [0.0])])
    assert not follower.receive(late, 10.0)  # stamped, and over: rejected
