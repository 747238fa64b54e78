"""policy_node drives openpi's own server: the ``openpi-server`` package from PyPI.

openpi's ``websocket_policy_server`` (installed in ``.venv-openpi`` from
requirements/openpi.txt: it pins numpy<2) serves test/openpi_stub_policy.py, which
asserts openpi's example observation of its environment (keys, shapes, dtypes) on
every request. policy_node runs with the shipped DROID and ALOHA layouts
(config/droid.yaml, config/aloha.yaml) on real ROS topics: camera images and joint
states published by a feeder node, the chunks received by subscribers on the
controllers' trajectory topics. The LIBERO layout is refused at start-up.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from helpers import free_port, scaled, wait_until
from node_rig import spinning
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.qos import qos_profile_sensor_data
from sensor_msgs.msg import Image, JointState
from trajectory_msgs.msg import JointTrajectory

from relay_ros.node.param_spec import ParameterError
from relay_ros.node.policy_node import PolicyNode
from relay_ros.paths import config_dir

pytestmark = pytest.mark.ros

REPO = Path(__file__).resolve().parents[1]
STUB = Path(__file__).with_name("openpi_stub_policy.py")
OPENPI_PYTHON = Path(
    os.environ.get("RELAY_ROS_OPENPI_PYTHON", REPO / ".venv-openpi" / "bin" / "python")
)
STUB_ARGS = [str(OPENPI_PYTHON), str(STUB)]


@contextlib.contextmanager
def openpi_server(env: str, record: Path) -> Iterator[str]:
    """openpi's websocket_policy_server with the stub policy; yields the node's URL."""
    if not OPENPI_PYTHON.exists():
        pytest.skip(f"{OPENPI_PYTHON} is missing: `make openpi-venv` builds it (make test does)")
    port = free_port()
    log = record.with_suffix(".log")
    with open(log, "w", encoding="utf-8") as sink:
        process = subprocess.Popen(
            [
                STUB_ARGS[0],
                *STUB_ARGS[1:],
                "--env",
                env,
                "--port",
                str(port),
                "--record",
                str(record),
            ],
            stdout=sink,
            stderr=subprocess.STDOUT,
        )

    def listening() -> bool:
        assert process.poll() is None, f"openpi server exited: {log.read_text()}"
        with socket.socket() as sock:
            return sock.connect_ex(("127.0.0.1", port)) == 0

    try:
        wait_until(listening, timeout=30, message="openpi's server listening")
        yield f"ws://127.0.0.1:{port}/{{model}}"
    finally:
        process.terminate()
        try:
            process.wait(timeout=scaled(10))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


class Robot:
    """Cameras (raw images) and joint states published, trajectories recorded."""

    def __init__(self, context: Any, prefix: str, cameras: list[str], state: dict[str, float]):
        self.node = Node(f"robot_{prefix.strip('/')}", context=context)
        self.state = state
        self.images = {
            name: self.node.create_publisher(
                Image, f"{prefix}/{name}/image_raw", qos_profile_sensor_data
            )
            for name in cameras
        }
        self.joints = self.node.create_publisher(JointState, f"{prefix}/joint_states", 10)
        self.received: dict[str, list[JointTrajectory]] = {}
        frame = np.zeros((240, 320, 3), np.uint8)
        frame[:, :160] = (200, 30, 30)
        self.frame = frame
        self.node.create_timer(1.0 / 30.0, self._publish_images)
        self.node.create_timer(0.01, self._publish_joints)

    def listen(self, topic: str) -> None:
        sink = self.received.setdefault(topic, [])
        self.node.create_subscription(JointTrajectory, topic, sink.append, 10)

    def chunks(self, topic: str) -> list[JointTrajectory]:
        return [m for m in list(self.received[topic]) if len(m.points) > 1]

    def _publish_images(self) -> None:
        stamp = self.node.get_clock().now().to_msg()
        for publisher in self.images.values():
            msg = Image()
            msg.header.stamp = stamp
            msg.height, msg.width = self.frame.shape[:2]
            msg.encoding, msg.step = "rgb8", self.frame.shape[1] * 3
            msg.data = self.frame.tobytes()
            publisher.publish(msg)

    def _publish_joints(self) -> None:
        msg = JointState()
        msg.header.stamp = self.node.get_clock().now().to_msg()
        msg.name = list(self.state)
        msg.position = [float(v) for v in self.state.values()]
        self.joints.publish(msg)


def _outputs(params_file: Path) -> dict[str, str]:
    data = yaml.safe_load(params_file.read_text())["/**"]["ros__parameters"]
    return {name: data[f"outputs.{name}.topic"] for name in data["output_names"]}


@contextlib.contextmanager
def node_and_robot(
    context: Any, layout: str, url: str, state: dict[str, float], cameras: list[str], tmp: Path
) -> Iterator[tuple[PolicyNode, Robot, dict[str, str]]]:
    prefix = f"/openpi_{layout}"
    camera_map = tmp / f"{layout}_cameras.yaml"
    camera_map.write_text(
        yaml.safe_dump({name: {"topic": f"{prefix}/{name}/image_raw"} for name in cameras})
    )
    params_file = config_dir() / f"{layout}.yaml"
    topics = {name: f"{prefix}/{topic}" for name, topic in _outputs(params_file).items()}
    overrides = {
        "policy_url": url,
        "camera_map": str(camera_map),
        "joint_states_topic": f"{prefix}/joint_states",
        **{f"outputs.{name}.topic": topic for name, topic in topics.items()},
    }
    robot = Robot(context, prefix, cameras, state)
    for topic in topics.values():
        robot.listen(topic)
    node = PolicyNode(
        f"policy_node_openpi_{layout}",
        context=context,
        cli_args=["--ros-args", "--params-file", str(params_file)],
        parameter_overrides=[Parameter(k, value=v) for k, v in overrides.items()],
    )
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(node)
    executor.add_node(robot.node)
    try:
        with spinning(executor):
            yield node, robot, topics
    finally:
        node.destroy_node()
        robot.node.destroy_node()


def _seen(record: Path) -> list[dict[str, Any]]:
    if not record.exists():
        return []
    return [json.loads(line) for line in record.read_text().splitlines() if line]


def test_droid_layout_drives_openpis_server_and_velocities_reach_the_arm_as_positions(
    ros_context: Any, tmp_path: Path
) -> None:
    state = {f"joint{i}": 0.0 for i in range(1, 8)}
    state.update(joint4=-1.5, joint6=1.5, gripper_joint=0.3)
    record = tmp_path / "droid_seen.jsonl"
    with (
        openpi_server("droid", record) as url,
        node_and_robot(
            ros_context,
            "droid",
            url,
            state,
            ["exterior_image_1_left", "wrist_image_left"],
            tmp_path,
        ) as (node, robot, topics),
    ):
        wait_until(lambda: all(robot.chunks(t) for t in topics.values()), timeout=30)
        seen = _seen(record)
        assert seen and seen[0]["keys"] == [
            "observation/exterior_image_1_left",
            "observation/gripper_position",
            "observation/joint_position",
            "observation/wrist_image_left",
        ]
        assert seen[0]["prompt"] == node.config.prompt
        # 7 normalised velocities of 0.05: 0.2 * 0.05 = 0.01 rad per 1/15 s step.
        arm = robot.chunks(topics["arm"])[0]
        times = np.array(
            [p.time_from_start.sec + 1e-9 * p.time_from_start.nanosec for p in arm.points]
        )
        positions = np.array([p.positions for p in arm.points])
        rates = np.diff(positions, axis=0) / np.diff(times)[:, None]
        assert np.median(rates) == pytest.approx(0.01 * 15, rel=0.02)
        gripper = robot.chunks(topics["gripper"])[0]
        assert all(p.positions[0] == pytest.approx(0.3) for p in gripper.points)
        assert node.core.counts["error_replies"] == 0


def test_aloha_layout_drives_openpis_server_with_channel_first_frames(
    ros_context: Any, tmp_path: Path
) -> None:
    state = {f"{side}_joint{i}": 0.0 for side in ("left", "right") for i in range(1, 7)}
    state.update(left_gripper=0.5, right_gripper=0.5)
    order = [f"left_joint{i}" for i in range(1, 7)] + ["left_gripper"]
    order += [f"right_joint{i}" for i in range(1, 7)] + ["right_gripper"]
    record = tmp_path / "aloha_seen.jsonl"
    with (
        openpi_server("aloha", record) as url,
        node_and_robot(
            ros_context,
            "aloha",
            url,
            {name: state[name] for name in order},
            ["cam_high", "cam_low", "cam_left_wrist", "cam_right_wrist"],
            tmp_path,
        ) as (node, robot, topics),
    ):
        wait_until(lambda: all(robot.chunks(t) for t in topics.values()), timeout=30)
        seen = _seen(record)
        assert seen and seen[0]["keys"] == [
            "images/cam_high",
            "images/cam_left_wrist",
            "images/cam_low",
            "images/cam_right_wrist",
            "state",
        ]
        # Each controller gets its own columns of the (50, 14) chunk.
        left = robot.chunks(topics["left_arm"])[0]
        assert list(left.joint_names) == order[:6]
        assert node.core.counts["error_replies"] == 0


def test_libero_layout_is_refused_at_start_with_its_reason(ros_context: Any) -> None:
    with pytest.raises(ParameterError) as info:
        PolicyNode(
            "policy_node_openpi_libero",
            context=ros_context,
            cli_args=["--ros-args", "--params-file", str(config_dir() / "libero.yaml")],
            parameter_overrides=[Parameter("policy_url", value="ws://127.0.0.1:9/{model}")],
        )
    assert "layout 'libero' action part 'eef_delta' is end-effector deltas" in str(info.value)
    assert "joint trajectory controllers execute joint positions only" in str(info.value)


def test_the_stub_refuses_what_is_not_openpis_example() -> None:
    # The instrument first: the stub must refuse a float32 state and a channel-first
    # DROID frame, else its passing proves nothing.
    if not OPENPI_PYTHON.exists():
        pytest.skip(f"{OPENPI_PYTHON} is missing: `make openpi-venv` builds it (make test does)")
    script = f"""
import sys, tempfile, numpy as np
sys.path.insert(0, {str(STUB.parent)!r})
from openpi_stub_policy import StubPolicy
policy = StubPolicy("droid", tempfile.mktemp())
good = {{
    "observation/exterior_image_1_left": np.zeros((224, 224, 3), np.uint8),
    "observation/wrist_image_left": np.zeros((224, 224, 3), np.uint8),
    "observation/joint_position": np.zeros(7),
    "observation/gripper_position": np.zeros(1),
    "prompt": "x",
}}
assert policy.infer(dict(good))["actions"].shape == (15, 8)
for key, bad in [
    ("observation/joint_position", np.zeros(7, np.float32)),
    ("observation/wrist_image_left", np.zeros((3, 224, 224), np.uint8)),
]:
    try:
        policy.infer({{**good, key: bad}})
    except AssertionError as exc:
        print("refused", exc)
    else:
        raise SystemExit(f"accepted a wrong {{key}}")
"""
    done = subprocess.run(
        [str(OPENPI_PYTHON), "-c", script], capture_output=True, text=True, timeout=scaled(60)
    )
    assert done.returncode == 0, done.stderr
    assert "is float32, not float64" in done.stdout
    assert "has shape (3, 224, 224), not (224, 224, 3)" in done.stdout


def test_stub_is_run_by_openpis_packages_not_ours() -> None:
    # The interop is only worth something against openpi's code: the stub imports it.
    source = STUB.read_text()
    assert "from openpi_server import WebsocketPolicyServer" in source
    assert "relay_ros" not in source.split('"""', 2)[2]
    assert sys.executable != str(OPENPI_PYTHON)
