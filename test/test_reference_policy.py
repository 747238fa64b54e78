"""The reference server's policies: the visual plan, chunk noise, the action prefix
(real-time chunking over the wire, server and node sides), through a real WebSocket."""

from __future__ import annotations

from typing import Any

import cv2
import numpy as np
import pytest
from helpers import scaled
from websockets.sync.client import connect

from relay_ros.pipeline.action_prefix import committed_prefix, to_action_space
from relay_ros.pipeline.gate.controller import CommandedMotion
from relay_ros.pipeline.images import resize_with_pad
from relay_ros.pipeline.scheduler import ChunkScheduler
from relay_ros.pipeline.scheduler_config import SchedulerConfig
from relay_ros.server import ServerOptions, run_server_in_thread
from relay_ros.server.action_prefix import apply_prefix, default_soft_steps
from relay_ros.server.chunk_noise import ChunkNoise
from relay_ros.server.visual_policy import VisualPolicy, crop_letterbox, find_red
from relay_ros.sim.world_camera import WorldCamera
from relay_ros.wire.codec import packb, unpackb
from relay_ros.world import World

TIMEOUT = scaled(10.0)


def frames(world: World, t: float, q: tuple[float, float]) -> dict[str, Any]:
    """What policy_node sends for the world at ``t``: letterboxed 224x224, wrist as JPEG."""
    base = resize_with_pad(WorldCamera("base", 320, 240, world).render(t, *q), 224, 224)
    wrist = resize_with_pad(WorldCamera("wrist", 320, 240, world).render(t, *q), 224, 224)
    jpeg = cv2.imencode(".jpg", cv2.cvtColor(wrist, cv2.COLOR_RGB2BGR))[1].tobytes()
    return {"base_0_rgb": base, "left_wrist_0_rgb": jpeg}


# ------------------------------------------------------------------------ visual policy


def test_letterbox_crop_and_red_centroid():
    frame = np.zeros((224, 224, 3), np.uint8)
    frame[28:196] = (150, 130, 100)
    frame[100:104, 50:54] = (230, 20, 20)
    cropped = crop_letterbox(frame)
    assert cropped.shape == (168, 224, 3)
    assert find_red(cropped) == pytest.approx((52.0, 74.0))
    assert find_red(cropped, min_pixels=17) is None


def test_policy_locates_the_target_from_either_camera():
    world = World(seed=6)
    policy = VisualPolicy(action_horizon=50, control_hz=50.0, world=world)
    t = 40.0
    target = world.target.position(t)
    far = (0.0, 0.0)  # the target is out of the wrist camera's view
    images = frames(world, t, far)
    state = np.zeros(32, np.float32)
    np.testing.assert_allclose(policy.locate(state, images), target, atol=0.012)
    near = world.arm.inverse(target + np.array([0.03, -0.02]))
    state[:2] = near
    wrist_only = {"left_wrist_0_rgb": frames(world, t, near)["left_wrist_0_rgb"]}
    np.testing.assert_allclose(policy.locate(state, wrist_only), target, atol=0.006)
    # The wrong camera under a key gives a wrong estimate, without any error.
    swapped = dict(zip(images, reversed(list(frames(world, t, near).values()))))
    wrong = policy.locate(state, swapped)
    assert wrong is None or np.linalg.norm(wrong - target) > 0.05


def test_chunk_moves_the_arm_towards_the_target_and_holds_without_one():
    world = World(seed=6)
    policy = VisualPolicy(action_horizon=50, control_hz=50.0, world=world)
    state = np.zeros(32, np.float32)
    state[4] = 0.3
    chunk = policy.chunk(state, frames(world, 40.0, (0.0, 0.0)), action_dim=32)
    assert chunk.shape == (50, 32) and chunk.dtype == np.float32
    np.testing.assert_array_equal(chunk[0], state)  # action 0 is the state
    target = world.target.position(40.0)
    before = np.linalg.norm(world.arm.end_effector(*state[:2]) - target)
    after = np.linalg.norm(world.arm.end_effector(*chunk[-1, :2]) - target)
    assert after < before / 2
    assert np.abs(np.diff(chunk[:, :2], axis=0)).max() <= 1.2 * 0.02 + 1e-6  # speed limit
    assert 0 < chunk[-1, 4] < 0.3  # other joints relax home
    blank = {"base_0_rgb": np.full((224, 224, 3), 120, np.uint8)}
    held = policy.chunk(state, blank, action_dim=32)
    np.testing.assert_array_equal(held[:, :2], np.repeat(state[None, :2], 50, axis=0))


# ------------------------------------------------------------------------- chunk noise


def test_chunk_noise_is_seeded_and_off_at_scale_zero():
    plan = np.zeros((50, 7))
    a = ChunkNoise().apply(plan, np.random.default_rng(3), 0.02)
    b = ChunkNoise().apply(plan, np.random.default_rng(3), 0.02)
    c = ChunkNoise().apply(plan, np.random.default_rng(4), 0.02)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    assert 0.0 < np.abs(a).max() < 0.3
    rng = np.random.default_rng(3)
    np.testing.assert_array_equal(ChunkNoise(scale=0.0).apply(plan, rng, 0.02), plan)
    with pytest.raises(ValueError, match="chunk noise scale -1 is not a finite number >= 0"):
        ChunkNoise(scale=-1)


# ----------------------------------------------------------------------- action prefix


def test_apply_prefix_keeps_the_committed_rows_and_blends_smoothly():
    plan = np.ones((50, 2))
    prefix = np.zeros((6, 2))
    out = apply_prefix(plan, prefix, committed_steps=4, soft_steps=10)
    np.testing.assert_array_equal(out[:4], 0.0)
    weights = out[4:14, 0]
    assert np.all(np.diff(weights) > 0) and 0 < weights[0] < 0.05 and 0.95 < weights[-1] < 1
    np.testing.assert_array_equal(out[14:], 1.0)
    # Without soft rows beyond the prefix, the continuation holds its last row (as a
    # controller does at a trajectory's end; never zeros).
    ramp = np.arange(4, dtype=np.float64)[:, None] * np.array([[0.1, 0.0]]) + 1.0
    out = apply_prefix(np.zeros((20, 2)), ramp, committed_steps=4, soft_steps=1)
    assert out[4, 0] == pytest.approx(0.5 * 1.3)
    assert out[4, 1] == pytest.approx(0.5 * 1.0)
    assert default_soft_steps(50) == 20 and default_soft_steps(16) == 6
    assert default_soft_steps(2) == 1
    with pytest.raises(ValueError, match=r"committed_steps 7 is not in \[0, 6\]"):
        apply_prefix(plan, prefix, committed_steps=7, soft_steps=1)
    with pytest.raises(ValueError, match=r"prefix has shape \(6, 3\); expected \(P, 2\)"):
        apply_prefix(plan, np.zeros((6, 3)), committed_steps=1, soft_steps=1)


def test_committed_prefix_follows_the_published_chunk():
    config = SchedulerConfig(dt=0.02, horizon=50, execute_horizon=25, request_lead_s=0.1)
    scheduler = ChunkScheduler(config)
    chunk = np.stack([np.arange(50) * 0.01, -np.arange(50) * 0.02], axis=1)
    scheduler.request_sent(0.0)
    scheduler.latencies.add(0.08)
    scheduler.chunk_received(chunk, 0.0, 0.08)
    publication = scheduler.poll(0.08)
    assert publication is not None
    # What the controllers follow (the gate's model): from the arm at rest at row 0.
    motion = CommandedMotion()
    motion.follow(0.08, chunk[0], np.zeros(2), publication.positions, publication.time_from_start)
    t_obs = publication.switch_time - scheduler.request_lead()
    prefix = committed_prefix(scheduler, t_obs, np.zeros(2), followed=motion.trajectory)
    committed = prefix.committed_steps
    # Taken over at the switch, first point min_lead (one dt) later.
    assert committed == round((publication.switch_time + 0.02 - t_obs) / 0.02)
    # Up to the end of the published trajectory (further than committed + E here).
    rows = prefix.rows
    assert rows.shape == (round((publication.end_time - t_obs) / 0.02) + 1, 2)
    assert rows.shape[0] >= committed + 25
    for i in (0, committed - 1, rows.shape[0] - 1):
        np.testing.assert_allclose(
            rows[i], motion.state_at(t_obs + i * 0.02)[0], rtol=1e-6, atol=1e-6
        )
    # The robot runs the reply's delay (80 ms, 4 steps) of them while the server infers.
    assert prefix.inference_delay == 4 and prefix.execute_horizon == 25
    spread = to_action_space(rows, [6, 0], 32)
    assert spread.shape == (rows.shape[0], 32)
    np.testing.assert_array_equal(spread[:, 6], rows[:, 0])
    np.testing.assert_array_equal(spread[:, 1:6], 0.0)
    with pytest.raises(ValueError, match="do not map 2 columns into 4 dimensions"):
        to_action_space(rows, [0, 9], 4)


def test_a_still_arm_gets_a_prefix_of_its_held_state():
    config = SchedulerConfig(dt=0.02, horizon=50, execute_horizon=25)
    scheduler = ChunkScheduler(config)
    held = np.array([0.3, -0.2])
    # Nothing measured yet: the reply is expected at once, one slot ahead.
    first = committed_prefix(scheduler, 0.0, held, followed=None)
    assert (first.committed_steps, first.inference_delay) == (1, 0)
    assert first.rows.shape == (1 + 25, 2)
    np.testing.assert_allclose(first.rows, np.tile(held, (26, 1)), atol=1e-7)
    # With a measured latency of 0.2 s: 11 committed rows (0.2 s + one slot), of
    # which the robot "runs" 10 while the server infers.
    scheduler.latencies.add(0.2)
    prefix = committed_prefix(scheduler, 5.0, held, followed=None)
    assert (prefix.committed_steps, prefix.inference_delay) == (11, 10)
    assert prefix.rows.shape == (36, 2)
    np.testing.assert_allclose(prefix.rows, np.tile(held, (36, 1)), atol=1e-7)


def test_the_delay_is_at_most_the_committed_rows():
    config = SchedulerConfig(dt=0.02, horizon=50, execute_horizon=10)
    scheduler = ChunkScheduler(config)
    scheduler.request_sent(0.0)
    scheduler.chunk_received(np.zeros((50, 1)), 0.0, 0.0)
    assert scheduler.poll(0.0) is not None
    scheduler.latencies.add(0.5)
    prefix = committed_prefix(scheduler, 0.1, np.zeros(1), followed=None)
    assert prefix.committed_steps == 26 and prefix.inference_delay == 25
    # Slower than the whole chunk (1.2 s > 50 steps): a chunk has only 50 rows to
    # commit, and the robot cannot run more of them than that.
    scheduler.latencies.add(1.2)
    scheduler.latencies.add(1.2)
    prefix = committed_prefix(scheduler, 0.1, np.zeros(1), followed=None)
    assert prefix.inference_delay == prefix.committed_steps == 50
    assert prefix.rows.shape == (50, 1)


def _ask(url: str, obs: dict[str, Any]) -> tuple[dict[str, Any], Any]:
    with connect(url, compression=None, max_size=None, open_timeout=TIMEOUT) as ws:
        meta = unpackb(ws.recv(timeout=TIMEOUT))
        ws.send(packb(obs))
        return meta, unpackb(ws.recv(timeout=TIMEOUT))


def test_server_advertises_and_honours_the_action_prefix():
    world = World(seed=2)
    obs = {
        "images": frames(world, 50.0, (0.0, 0.0)),
        "state": np.zeros(32, np.float32),
        "seed": 11,
        "action_prefix": np.full((12, 32), 0.05, np.float32),
        "committed_steps": 7,
    }
    options = ServerOptions(models=("pi05",), synthetic="visual", action_prefix=True)
    with run_server_in_thread(options) as handle:
        meta, reply = _ask(handle.url("pi05"), obs)
        assert meta["action_prefix"] is True
        actions = reply["actions"]
        assert actions.shape == (50, 32)
        np.testing.assert_array_equal(actions[:7], obs["action_prefix"][:7])
        assert not np.allclose(actions[20:], 0.05)  # its own plan after the soft window
        bad = dict(obs, committed_steps=13)
        assert _ask(handle.url("pi05"), bad)[1] == {
            "type": "error",
            "message": "Internal inference error",
        }
        bad = dict(obs, action_prefix=np.zeros((12, 31), np.float32))
        assert _ask(handle.url("pi05"), bad)[1]["message"] == "Internal inference error"
    # A server that does not advertise the extension ignores the keys.
    with run_server_in_thread(ServerOptions(models=("pi05",))) as handle:
        meta, reply = _ask(handle.url("pi05"), obs)
        assert "action_prefix" not in meta
        np.testing.assert_array_equal(reply["actions"][0], obs["state"])


def test_server_options_for_the_reference_policy():
    with pytest.raises(
        ValueError, match=r"synthetic='dream'; expected one of \['flow', 'visual'\]"
    ):
        ServerOptions(synthetic="dream")
    with pytest.raises(ValueError, match="chunk_noise=-0.5; expected a finite number >= 0"):
        ServerOptions(chunk_noise=-0.5)
