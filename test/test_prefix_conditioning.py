"""Prefix conditioning that matters: the keys the node sends beside the action prefix
(inference delay, execute horizon), the warm-up reply kept out of the delay estimate,
the reference server's checks and soft window, and a reference policy whose sampled
approach side only the server can keep (the prefix pins it; a client can only blend).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from streaming_rig import CoreRig
from test_reference_policy import _ask, frames

from relay_ros.formats.requests import ObservationError, Request, check_action_prefix
from relay_ros.pipeline.request_clock import RequestClock, WarmupExcluded
from relay_ros.pipeline.stats import StatsError
from relay_ros.server import ServerOptions, run_server_in_thread
from relay_ros.server.action_prefix import soft_steps
from relay_ros.server.chunk_noise import ChunkNoise
from relay_ros.server.metadata import build_metadata
from relay_ros.server.synthetic import ReferencePolicy
from relay_ros.server.visual_policy import VisualPolicy, approach_side
from relay_ros.world import World

H = 50


# ------------------------------------------------------------------ the node's side


def test_the_node_sends_delay_and_execute_horizon_beside_the_prefix() -> None:
    rig = CoreRig(
        metadata=build_metadata("pi05", action_prefix=True),
        latency_s=0.15,
        overrides={"execute_horizon": 20, "smoothing": "prefix"},
    )
    rig.connect()
    rig.run_until(lambda: len(rig.observations) >= 4)
    for obs in rig.observations:
        assert isinstance(obs["inference_delay"], int) and isinstance(obs["execute_horizon"], int)
        assert 0 <= obs["inference_delay"] <= obs["committed_steps"]
        assert obs["execute_horizon"] == 20
        # Rows through the end of the soft region, at least.
        assert obs["action_prefix"].shape[0] >= min(H, obs["committed_steps"] + 20)
    # Nothing measured before the first reply; then 150 ms = 8 steps of 20 ms.
    assert rig.observations[0]["inference_delay"] == 0
    assert [obs["inference_delay"] for obs in rig.observations[2:]] == [8] * (
        len(rig.observations) - 2
    )
    # A server that does not take the prefix never sees any of the keys.
    plain = CoreRig()
    plain.connect()
    plain.run_until(lambda: len(plain.observations) >= 2)
    keys = ("action_prefix", "committed_steps", "inference_delay", "execute_horizon")
    assert not any(key in obs for obs in plain.observations for key in keys)


def test_a_warm_up_reply_does_not_stay_in_the_estimate() -> None:
    stats = WarmupExcluded()
    stats.expect_warmup()
    assert stats.percentile(50) is None
    stats.add(2.5)  # the server's first inference
    assert stats.percentile(95) == 2.5  # the only measurement so far
    stats.add(0.1)
    stats.add(0.12)
    assert stats.percentile(95) == pytest.approx(0.119)
    assert stats.count == 2
    # After a reconnect its first reply is left out too; the earlier ones remain.
    stats.expect_warmup()
    stats.add(3.0)
    assert stats.percentile(100) == pytest.approx(0.12)
    with pytest.raises(StatsError, match="latency -1 s must be a finite number >= 0"):
        stats.expect_warmup()
        stats.add(-1)
    # The clock: every reply for the diagnostics, the estimate for the scheduler.
    # The clock: every reply for the diagnostics, from t_obs; the estimate for the
    # scheduler, from the request (here 0.02 s after a frame-time t_obs).
    clock = RequestClock()
    clock.connected()
    for latency in (2.5, 0.1, 0.1):
        clock.replied(0.0, clock.start(0.0, 0.0, 0.02), latency)
    assert clock.latency.count == 3 and clock.estimate.count == 2
    assert clock.latency.percentile(50) == pytest.approx(0.1)
    assert clock.estimate.percentile(99) == pytest.approx(0.08)


def test_the_node_plans_without_the_warm_up() -> None:
    # The first reply takes 2 s, the next ones 0.1 s: the early-request lead and the
    # prefix's delay follow the 0.1 s, not the spike.
    rig = CoreRig(
        metadata=build_metadata("pi05", action_prefix=True),
        latency_s=0.1,
        latency_schedule=[2.0],
        overrides={"execute_horizon": 25, "smoothing": "prefix"},
    )
    rig.connect()
    rig.run_until(lambda: len(rig.chunks()) >= 5, timeout_s=20.0)
    dt, execute = 0.02, 25
    # Each request after the second goes out one lead (the median latency) before the
    # switch of the chunk then running, within a tick.
    for chunk, t_obs in zip(rig.chunks()[2:4], rig.sent[3:5]):  # the second one is short
        switch = first_time(chunk) + (execute - 1) * dt
        assert switch - t_obs == pytest.approx(0.1, abs=0.011)
    # The second observation knows only the warm-up: it commits the whole rest of the
    # first chunk (the server sends it back; the robot follows it on).
    second = rig.observations[1]
    assert second["inference_delay"] == second["committed_steps"] == H
    assert rig.observations[-1]["inference_delay"] == 5
    assert rig.core.latency.percentile(100) == pytest.approx(2.0)  # still reported


def first_time(msg: Any) -> float:
    return msg.points.stamp + float(msg.points.time_from_start[0])


# ------------------------------------------------------------------ the server's checks


def test_the_prefix_keys_are_checked_with_clear_errors() -> None:
    prefix = np.zeros((10, 4), np.float32)
    good = {"action_prefix": prefix, "committed_steps": 6, "inference_delay": 4}
    keys = check_action_prefix(dict(good, execute_horizon=25), width=4, horizon=50)
    assert (keys.committed_steps, keys.inference_delay, keys.execute_horizon) == (6, 4, 25)
    assert (
        check_action_prefix({"action_prefix": prefix}, width=4, horizon=50).inference_delay is None
    )
    cases = [
        (
            dict(good, inference_delay=7),
            r"inference_delay 7 is not in \[0, 6\] \(committed_steps\)",
        ),
        (dict(good, inference_delay=2.0), "inference_delay is 2.0; expected an integer"),
        (dict(good, execute_horizon=0), r"execute_horizon 0 is not in \[1, 50\]"),
        (dict(good, execute_horizon=True), "execute_horizon is True; expected an integer"),
        (
            {"inference_delay": 3, "execute_horizon": 5},
            r"\['inference_delay', 'execute_horizon'\] without action_prefix",
        ),
    ]
    for obs, message in cases:
        with pytest.raises(ObservationError, match=message):
            check_action_prefix(obs, width=4, horizon=50)


def test_the_soft_window_is_half_the_execute_horizon() -> None:
    assert soft_steps(25, 50) == 12  # the new plan at full weight for 13 of 25 rows
    assert soft_steps(10, 50) == 5 and soft_steps(1, 50) == 1
    assert soft_steps(None, 50) == 20  # a client that does not say: two fifths of H


def test_the_server_takes_the_keys_and_refuses_bad_ones() -> None:
    world = World(seed=2)
    obs = {
        "images": frames(world, 50.0, (0.0, 0.0)),
        "state": np.zeros(32, np.float32),
        "seed": 11,
        "action_prefix": np.full((30, 32), 0.05, np.float32),
        "committed_steps": 7,
        "inference_delay": 5,
        "execute_horizon": 10,
    }
    options = ServerOptions(models=("pi05",), synthetic="visual", action_prefix=True)
    with run_server_in_thread(options) as handle:
        actions = _ask(handle.url("pi05"), obs)[1]["actions"]
        np.testing.assert_array_equal(actions[:7], obs["action_prefix"][:7])
        # Soft window of 5 rows (10 // 2): its own plan from row 12 on, which is
        # not the old one's.
        assert not np.allclose(actions[12:30, :2], 0.05)
        for bad in (dict(obs, inference_delay=8), dict(obs, execute_horizon=51)):
            assert _ask(handle.url("pi05"), bad)[1] == {
                "type": "error",
                "message": "Internal inference error",
            }


# ------------------------------------------------------------------ the sampled mode


def _visual_request(world: World, t: float, **prefix: Any) -> Request:
    state = np.zeros(32, np.float32)
    return Request(state, "", None, None, None, 1.0, frames(world, t, (0.0, 0.0)), **prefix)


def test_approach_side_reads_the_committed_motion() -> None:
    goal = np.array([1.0, 0.0])
    left = np.array([[0.0, 0.0], [0.1, 0.05]])  # heading right of the line and up: CCW
    assert approach_side(left, goal) == 1
    assert approach_side(left * np.array([1.0, -1.0]), goal) == -1
    assert approach_side(np.zeros((3, 2)), goal) is None  # a still arm shows no side
    assert approach_side(left[:1], goal) is None
    assert approach_side(np.array([[0.9, 0.0], [1.0, 0.0]]), goal) is None  # at the goal


def test_the_visual_plan_turns_to_its_side_and_a_committed_side_wins() -> None:
    world = World(seed=6)
    policy = VisualPolicy(action_horizon=H, control_hz=50.0, world=world)
    state = np.zeros(32, np.float32)
    images = frames(world, 40.0, (0.0, 0.0))
    straight = policy.chunk(state, images, action_dim=32)
    left = policy.chunk(state, images, action_dim=32, turn=0.7, side=1)
    right = policy.chunk(state, images, action_dim=32, turn=0.7, side=-1)
    goal = np.array(world.arm.inverse(world.target.position(40.0)))
    assert approach_side(left[:2], goal) == 1 and approach_side(right[:2], goal) == -1
    assert np.abs(left[10, :2] - right[10, :2]).max() > 0.1  # the two modes disagree
    assert np.abs(straight[-1, :2] - goal).max() < np.abs(straight[0, :2] - goal).max()
    # Committed actions on the left keep a chunk drawn to the right on the left.
    pinned = policy.chunk(state, images, action_dim=32, turn=0.7, side=-1, committed=left[:6])
    np.testing.assert_array_equal(pinned, left)


def test_without_a_prefix_the_side_is_drawn_per_chunk_with_one_it_is_kept() -> None:
    world = World(seed=6)
    policy = ReferencePolicy("visual", action_horizon=H, control_hz=50.0, noise=ChunkNoise())
    goal = np.array(world.arm.inverse(world.target.position(40.0)))
    sides = []
    for seed in range(40):
        chunk = policy.chunk(
            _visual_request(world, 40.0), np.random.default_rng(seed), action_dim=32
        )
        sides.append(approach_side(chunk[:3, :2], goal))
    assert 10 <= sides.count(1) <= 30 and sides.count(1) + sides.count(-1) == 40
    # The committed actions of a left-turning chunk: every reply stays on the left.
    left = policy._visual.chunk(  # the plan without noise
        np.zeros(32, np.float32), frames(world, 40.0, (0.0, 0.0)), action_dim=32, turn=0.7, side=1
    )
    prefix = {"action_prefix": left[:30], "committed_steps": 8, "execute_horizon": 25}
    for seed in range(40):
        chunk = policy.chunk(
            _visual_request(world, 40.0, **prefix), np.random.default_rng(seed), action_dim=32
        )
        np.testing.assert_array_equal(chunk[:8], left[:8])
        assert approach_side(chunk[7:20, :2], goal) == 1


def test_a_still_arm_s_plan_starts_where_it_stands() -> None:
    # A held prefix (a still arm): the plan starts moving where the committed rows
    # end instead of catching up with a plan that left at t_obs, so its speed does
    # not grow with the delay (only the soft window's blend out of the held rows
    # adds a little).
    policy = ReferencePolicy("flow", action_horizon=H, control_hz=50.0)
    state = np.full(32, 0.1, np.float32)
    held = np.tile(state, (30, 1))
    fresh = policy.chunk(
        Request(state, "", None, 0, None, 1.0), np.random.default_rng(0), action_dim=32
    )
    own_step = np.abs(np.diff(fresh[:, :2], axis=0)).max()
    fastest = []
    for committed in (11, 20):
        request = Request(state, "", None, 0, None, 1.0, None, held, committed, execute_horizon=25)
        chunk = policy.chunk(request, np.random.default_rng(0), action_dim=32)
        np.testing.assert_array_equal(chunk[:committed], held[:committed])
        fastest.append(np.abs(np.diff(chunk[:, :2], axis=0)).max())
    assert fastest[0] == pytest.approx(fastest[1]) and fastest[0] <= 1.5 * own_step


def test_a_moving_arm_s_plan_keeps_its_own_timeline() -> None:
    # Committed rows that move: the policy planned from the observed state at t_obs;
    # its rows after the soft window are that plan, row for row.
    policy = ReferencePolicy("flow", action_horizon=H, control_hz=50.0)
    state = np.full(32, 0.1, np.float32)
    fresh = policy.chunk(
        Request(state, "", None, 0, None, 1.0), np.random.default_rng(0), action_dim=32
    )
    moving = fresh[:30] + 0.01  # the old plan, a little off
    request = Request(state, "", None, 0, None, 1.0, None, moving, 8, execute_horizon=10)
    chunk = policy.chunk(request, np.random.default_rng(0), action_dim=32)
    np.testing.assert_array_equal(chunk[:8], moving[:8])
    np.testing.assert_allclose(chunk[8 + 5 :], fresh[8 + 5 :], atol=1e-6)
