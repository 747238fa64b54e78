"""A start without jumps, on StreamingCore's synthetic clock: the first chunk after a
start, a hold or an episode reset joins the measured state, with and without the
action_prefix extension, at 80 ms, 200 ms and LTE-like latencies.

The policy moves 1.25 rad/s from the observed state, fast enough that skipping the
actions the still arm never ran (the first slot is 5-20 actions in) would put the
first point 0.125-0.5 rad away: beyond ``max_joint_step`` (0.25) from 200 ms on; and
slow enough that the reference server's prefix cross-fade stays within the robot's
2.5 rad/s (at 1.5 rad/s it steps up to 2.55 rad/s).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from streaming_rig import CoreRig

from relay_ros.pipeline.trajectory import parse_t_obs
from relay_ros.server.action_prefix import apply_prefix
from relay_ros.server.metadata import build_metadata

H = 50
STEP = 0.025  # rad per action at 50 Hz: 1.25 rad/s


def moving_policy(*, honour_prefix: bool) -> Any:
    """Chunks from the state to a goal the prompt names ("left": -0.8 rad, else
    +0.8 rad) at 1.25 rad/s, the gripper still. With ``honour_prefix`` they start with
    the committed actions and plan from where those end, as an RTC server does."""
    steps = np.arange(H, dtype=np.float64)[:, None] * STEP

    def plan_from(start: np.ndarray, goal: float) -> np.ndarray:
        plan = np.tile(start, (H, 1))
        plan[:, :6] += np.clip(goal - start[:6], -steps, steps)
        return plan

    def infer(obs: dict[str, Any]) -> np.ndarray:
        state = np.asarray(obs["state"], dtype=np.float64).reshape(-1)
        goal = -0.8 if obs["prompt"] == "left" else 0.8
        if not (honour_prefix and "action_prefix" in obs):
            return plan_from(state, goal).astype(np.float32)
        prefix, d = np.asarray(obs["action_prefix"], np.float64), obs["committed_steps"]
        plan = np.tile(state, (H, 1))
        if d > 0:
            plan[d - 1 :] = plan_from(prefix[d - 1], goal)[: H - d + 1]
        else:
            plan = plan_from(state, goal)
        return apply_prefix(plan, prefix, d, 10).astype(np.float32)

    return infer


def started_rig(latency_s: float, prefix: bool, **overrides: Any) -> CoreRig:
    rig = CoreRig(
        latency_s=latency_s,
        policy=moving_policy(honour_prefix=prefix),
        metadata=build_metadata("pi05", action_prefix=prefix),
        follow=True,
        overrides=overrides,
    )
    rig.connect()
    return rig


def first_chunk_after(rig: CoreRig, since: float) -> tuple[float, Any]:
    """(publication time, message) of the first arm chunk published after ``since``."""
    rig.run_until(lambda: any(t > since and m.frame_id for t, m in rig.published))
    return next((t, m) for t, m in rig.published if t > since and m.output == "arm" and m.frame_id)


def assert_joins(rig: CoreRig, since: float, latency_s: float) -> None:
    """The first chunk after ``since`` comes from the first request after it, one
    round trip plus at most a tick later, and starts at the measured state, where the
    arm stands once the hold's stop has settled (no request is made before)."""
    published_at, msg = first_chunk_after(rig, since)
    requested = next(t for t in rig.sent if t > since)
    observed = rig.observations[rig.sent.index(requested)]["state"]
    held = np.asarray(observed, dtype=np.float64).reshape(-1)[:6]
    np.testing.assert_allclose(rig.state[:6], held, atol=1e-6)  # it stood still since
    assert parse_t_obs(msg.frame_id) == pytest.approx(requested)
    assert published_at - requested <= latency_s + rig.tick_s + 1e-9
    # The state itself, or the first row of a prefix server's cross-fade out of it.
    assert np.abs(msg.points.positions[0] - held).max() <= STEP
    # No step inside it is a jump either.
    assert np.abs(np.diff(msg.points.positions, axis=0)).max() <= 2 * STEP


@pytest.mark.parametrize("prefix", [False, True], ids=["no-prefix", "prefix"])
@pytest.mark.parametrize("latency_s", [0.08, 0.2, 0.4], ids=["80ms", "200ms", "lte-like"])
def test_first_chunk_after_start_hold_and_reset_joins_the_state(
    latency_s: float, prefix: bool
) -> None:
    rig = started_rig(latency_s, prefix)
    assert_joins(rig, -1.0, latency_s)
    rig.run_until(lambda: rig.state[0] > 0.79)  # at the goal
    # A hold (the cameras stall) with the arm standing, a new goal, streaming again.
    rig.cameras_on = False
    rig.run_until(lambda: rig.core.hold_reason is not None)
    rig.core.set_prompt("left")
    rig.cameras_on = True
    resumed = rig.now
    assert_joins(rig, resumed, latency_s)
    # An episode reset while the arm moves, with the first goal again.
    rig.run(0.5)
    reset_at = rig.now
    rig.core.reset_episode(reset_at)
    rig.core.set_prompt("right")
    assert_joins(rig, reset_at, latency_s)
    rig.run(2.0)
    assert rig.core.counts["refusals"] == 1  # the stale cameras' observation, only
    assert "stale" in (rig.core.last_refusal or "")


def test_without_the_join_the_first_point_would_jump_past_max_joint_step() -> None:
    # The instrument: the same world with the old latency compensation (skip the
    # actions before the first slot) refuses the first chunk at 200 ms.
    # (No ramp-in: the first point's time gives its slot.)
    rig = started_rig(0.2, prefix=False, ramp_in_s=0.0)
    _, msg = first_chunk_after(rig, -1.0)
    slot = round((msg.points.stamp + msg.points.time_from_start[0] - rig.sent[0]) / 0.02)
    assert slot == 11
    assert slot * STEP > rig.config.max_joint_step  # where action 11 is, from the state


def test_a_warm_up_reply_later_than_the_whole_chunk_still_starts_the_robot() -> None:
    # The server's first inference takes 1.5 s (H*dt = 1 s): nothing of the chunk is
    # "in the future" any more, but the arm never ran any of it.
    rig = started_rig(1.5, prefix=False)
    assert_joins(rig, -1.0, 1.5)
    assert rig.core.counts["chunks_dropped_late"] == 0


def droid_rig(
    *, dry_run: bool, latency_s: float, ramp_in_s: float = 0.5
) -> tuple[CoreRig, list[Any]]:
    """A DROID-layout core whose server answers 0.9 rad/s on every arm joint (normalised
    joint velocities 0.3, integrated by the node) and the gripper where it is; the tags
    of the requests it sends."""

    def droid(obs: dict[str, Any]) -> dict[str, Any]:
        actions = np.zeros((15, 8), dtype=np.float32)
        actions[:, :7] = 0.3  # 0.3 * 0.2 rad per action at 15 Hz
        actions[:, 7] = 0.3
        return {"actions": actions}

    rig = CoreRig(
        layout="droid",
        policy=droid,
        latency_s=latency_s,
        follow=not dry_run,
        overrides={"dry_run": dry_run, "ramp_in_s": ramp_in_s},
    )
    rig.state = np.array([0.0, 0.1, 0.0, -1.5, 0.0, 1.5, 0.0, 0.3])
    tags: list[Any] = []
    submit = rig._submit

    def keep(obs: dict[str, Any], tag: Any) -> bool:
        tags.append(tag)
        return submit(obs, tag)

    rig.core._requests._submit = keep
    return rig, tags


def test_velocity_actions_integrate_from_where_the_controller_is_commanded() -> None:
    """DROID's joint velocities are integrated from where the arm is commanded at the
    observation's time: the gate's commanded motion (``Gate.followed``), the one model
    of it. In a dry run nothing published moves the arm, so that is the arm as it
    stands, for every request: integrating from the previous preview's command (the
    scheduler's own model, as before) ran each preview further from the arm (0.9 rad/s
    more per chunk) until the first-step check refused them."""
    rig, tags = droid_rig(dry_run=True, latency_s=0.1)
    rig.connect()
    rig.run_until(lambda: rig.core.counts["chunks_published"] >= 6)
    standing = np.array([0.0, 0.1, 0.0, -1.5, 0.0, 1.5, 0.0, 0.3])
    assert len(tags) >= 6
    for tag in tags:
        np.testing.assert_allclose(tag.origin, standing, atol=1e-9)
    assert rig.core.counts["refusals"] == 0, rig.core.last_refusal
    # Streaming (not dry): right after a start (0.5 s round trips). Without a ramp-in
    # the next request goes out before the first point is reached: on the first
    # segment as the gate has it, from the standing arm towards the first point. With
    # the ramp-in (0.5 s), during the ramp: on the stretched motion the controllers
    # follow, slower than the chunk's own timeline.
    for ramp_in_s in (0.0, 0.5):
        rig, tags = droid_rig(dry_run=False, latency_s=0.5, ramp_in_s=ramp_in_s)
        rig.connect()
        rig.run_until(lambda rig=rig: rig.core.counts["chunks_published"] >= 1)
        stamp, first = next((t, m) for t, m in rig.published if m.output == "arm")
        rig.run_until(lambda tags=tags: len(tags) >= 2)
        reached = stamp + (first.points.time_from_start[0] if ramp_in_s == 0.0 else ramp_in_s)
        assert stamp < tags[1].t_obs < reached
        expected = rig.core.commanded_at(tags[1].t_obs)
        assert expected is not None
        np.testing.assert_allclose(tags[1].origin, expected, atol=1e-9)
        if ramp_in_s:
            # On the ramp: at most 0.9 rad/s over the chunk time the ramp ran, d^2/2R
            # (on the chunk's own timeline: about 0.2 rad by then).
            d = tags[1].t_obs - stamp
            moved = np.abs(expected[:7] - np.array([0.0, 0.1, 0.0, -1.5, 0.0, 1.5, 0.0]))
            assert 0.0 < moved.max() < 0.9 * d * d / (2 * ramp_in_s), moved
