"""policy_node's ~/observation debug topics: plain conversion, and real rclpy subscribers."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pytest

from relay_ros.formats import format_for
from relay_ros.formats.groot import GROOT
from relay_ros.formats.pi import PI
from relay_ros.node.debug_topics import (
    debug_topic_name,
    frame_to_rgb,
    image_fields,
)
from relay_ros.sim.scene import encode_jpeg


def test_topic_names_and_image_fields() -> None:
    assert debug_topic_name("base_0_rgb") == "~/observation/base_0_rgb"
    assert debug_topic_name("video.ego_view") == "~/observation/video_ego_view"
    frame = np.zeros((4, 5, 3), np.uint8)
    frame[..., 0] = 200
    fields = image_fields(frame[None])  # GR00T's (1, H, W, 3)
    assert (fields.height, fields.width, fields.encoding, fields.step) == (4, 5, "rgb8", 15)
    assert fields.data == frame.tobytes()
    decoded = frame_to_rgb(encode_jpeg(frame))
    assert decoded.shape == (4, 5, 3) and abs(int(decoded[..., 0].mean()) - 200) < 10
    # Each wire format reads its own observations back.
    video = {"video": {"v": frame[None]}, "state": {}}
    assert GROOT.observed(video)[0]["v"].shape == (4, 5, 3)
    assert PI.observed({"images": {"a": 2}, "state": [0.5]}) == ({"a": 2}, [0.5])
    padded = {"images": {}, "state": np.array([0.5, 1.5, 0.0, 0.0], np.float32)}
    assert PI.observed(padded)[1] == [0.5, 1.5, 0.0, 0.0]
    groups = {"state": {"state.arm": np.array([[1.0, 2.0]]), "state.gripper": np.array([[3.0]])}}
    assert GROOT.observed(groups)[1] == [1.0, 2.0, 3.0]
    aloha = format_for("pi05", "aloha")
    chw = {"images": {"cam_high": np.zeros((3, 4, 5), np.uint8)}, "state": np.arange(14.0)}
    frames, state = aloha.observed(chw)
    assert frames["cam_high"].shape == (4, 5, 3) and state == list(np.arange(14.0))
    with pytest.raises(ValueError, match=r"frame of shape \(4, 5\); expected \(H, W, 3\)"):
        image_fields(np.zeros((4, 5)))


@pytest.mark.ros
def test_published_to_real_subscribers_only_while_subscribed(ros_context: Any) -> None:
    rclpy = pytest.importorskip("rclpy")
    from rclpy.executors import SingleThreadedExecutor
    from sensor_msgs.msg import Image, JointState

    from relay_ros.node.debug_topics import ObservationTopics

    node = rclpy.create_node("debug_topics_node", context=ros_context)
    listener = rclpy.create_node("debug_topics_listener", context=ros_context)
    executor = SingleThreadedExecutor(context=ros_context)
    executor.add_node(node)
    executor.add_node(listener)
    try:
        topics = ObservationTopics(
            node, ["base_0_rgb", "left_wrist_0_rgb"], ["j1", "j2"], wire_format=PI
        )
        frame = np.arange(224 * 224 * 3, dtype=np.uint32).astype(np.uint8).reshape(224, 224, 3)
        observation = {
            "images": {"base_0_rgb": frame, "left_wrist_0_rgb": encode_jpeg(frame)},
            "state": np.array([0.25, -0.5] + [0.0] * 30, np.float32),
            "prompt": "p",
        }
        # Nobody listens yet: nothing is converted or sent.
        topics.publish(observation, 1700000000.5)
        images: list[Any] = []
        states: list[Any] = []
        listener.create_subscription(
            Image, "/debug_topics_node/observation/base_0_rgb", images.append, 10
        )
        listener.create_subscription(
            JointState, "/debug_topics_node/observation/state", states.append, 10
        )
        deadline = time.monotonic() + 10.0
        while time.monotonic() < deadline and not (images and states):
            topics.publish(observation, 1700000000.5)
            executor.spin_once(timeout_sec=0.1)
        assert images and states, "no debug messages within 10 s"
        image = images[0]
        assert (image.height, image.width, image.encoding, image.step) == (224, 224, "rgb8", 672)
        assert bytes(image.data) == frame.tobytes()
        assert (image.header.stamp.sec, image.header.stamp.nanosec) == (1700000000, 500000000)
        assert image.header.frame_id == "t_obs=1700000000.5"
        state = states[0]
        assert list(state.name) == ["j1", "j2"] and list(state.position) == [0.25, -0.5]
        # The wrist topic has no subscriber: it stays silent.
        assert node.count_subscribers("/debug_topics_node/observation/left_wrist_0_rgb") == 0
        topics.destroy(node)
    finally:
        executor.shutdown()
        listener.destroy_node()
        node.destroy_node()


@pytest.mark.ros
def test_policy_node_shows_what_the_model_receives(ros_context: Any, tmp_path: Any) -> None:
    """policy_node end to end: a subscriber sees each observation's frame and state."""
    rclpy = pytest.importorskip("rclpy")
    from helpers import wait_until
    from node_rig import PI_JOINTS, Rig
    from sensor_msgs.msg import Image, JointState

    from relay_ros.server import ServerOptions, run_server_in_thread

    with (
        run_server_in_thread(ServerOptions(models=("pi05",))) as server,
        Rig(ros_context, server.url_template, tmp_path=tmp_path) as rig,
    ):
        images: list[Any] = []
        states: list[Any] = []
        listener = rclpy.create_node(f"{rig.node_name}_debug_listener", context=ros_context)
        base = f"/{rig.node_name}/observation"
        listener.create_subscription(Image, f"{base}/base_0_rgb", images.append, 10)
        listener.create_subscription(JointState, f"{base}/state", states.append, 10)
        rig.executor.add_node(listener)
        try:
            wait_until(lambda: images and states, timeout=20.0)
        finally:
            rig.executor.remove_node(listener)
            listener.destroy_node()
    image = images[-1]
    assert (image.height, image.width, image.encoding) == (224, 224, "rgb8")
    pixels = np.frombuffer(bytes(image.data), np.uint8).reshape(224, 224, 3)
    # The rig's 64x48 frame, left half RGB (200, 30, 30): resized to 224 wide and
    # padded with black rows above and below, colours in RGB order.
    assert not pixels[:20].any() and not pixels[-20:].any()
    np.testing.assert_allclose(pixels[112, 40], (200, 30, 30), atol=3)
    assert image.header.frame_id.startswith("t_obs=")
    state = states[-1]
    assert list(state.name) == PI_JOINTS
    np.testing.assert_allclose(state.position, 0.1, atol=1e-6)
