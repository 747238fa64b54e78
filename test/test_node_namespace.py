"""A namespace pushed onto policy_node and the simulated robot moves their topics.

/diagnostics stays absolute.

The shipped configuration (config/pi05.yaml and its camera map) uses relative
topic names, so a robot started under ``/robot1`` (``PushRosNamespace`` in a
launch file, or ``-r __ns:=/robot1``) talks to its own drivers and controllers.
"""

from __future__ import annotations

import threading

import cv2
import numpy as np
import pytest
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
from helpers import wait_until
from node_rig import PI_JOINTS, spinning
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.qos import qos_profile_sensor_data
from sensor_msgs.msg import CompressedImage, Image, JointState
from trajectory_msgs.msg import JointTrajectory

from relay_ros.node.policy_node import PolicyNode
from relay_ros.paths import config_dir
from relay_ros.server import ServerOptions, run_server_in_thread
from relay_ros.sim.arm_node import SimArmNode
from relay_ros.sim.cameras_node import SimCamerasNode

pytestmark = pytest.mark.ros


@pytest.fixture(scope="module")
def server():
    with run_server_in_thread(ServerOptions(models=("pi05",))) as handle:
        yield handle


def _node(context, url: str, *, namespace: str | None = None, ns_remap: str | None = None):
    cli_args = ["--ros-args", "--params-file", str(config_dir() / "pi05.yaml")]
    if ns_remap is not None:
        cli_args += ["-r", f"__ns:={ns_remap}"]
    kwargs = {"namespace": namespace} if namespace is not None else {}
    return PolicyNode(
        "policy_node",
        context=context,
        cli_args=cli_args,
        parameter_overrides=[Parameter("policy_url", value=url)],
        **kwargs,
    )


def _names(node: Node) -> tuple[set[str], set[str]]:
    """Resolved names of the node's subscriptions and publishers."""
    return {s.topic_name for s in node.subscriptions}, {p.topic_name for p in node.publishers}


@pytest.mark.parametrize("how", ["namespace", "__ns"])
def test_topics_follow_the_namespace(ros_context, server, how):
    if how == "namespace":
        node = _node(ros_context, server.url_template, namespace="/robot1")
    else:
        node = _node(ros_context, server.url_template, ns_remap="/robot1")
    try:
        subscriptions, publishers = _names(node)
    finally:
        node.destroy_node()
    assert {
        "/robot1/joint_states",
        "/robot1/camera/base/image_raw",
        "/robot1/camera/wrist/image_raw/compressed",
        "/robot1/policy_node/prompt",
    } <= subscriptions
    assert {
        "/robot1/arm_controller/joint_trajectory",
        "/robot1/gripper_controller/joint_trajectory",
        "/robot1/policy_node/preview",
        "/diagnostics",
    } <= publishers
    assert not any(name.startswith("/joint_states") for name in subscriptions)


def test_two_robots_diagnostics_show_apart(ros_context, server):
    """Two policy_nodes of one name in two namespaces: their /diagnostics statuses are
    named (and identify their hardware) by the fully qualified node name, as
    rqt_robot_monitor and the diagnostic_aggregator key them."""
    nodes = [_node(ros_context, server.url_template, namespace=ns) for ns in ("/r1", "/r2")]
    probe = Node("diagnostics_probe", context=ros_context)
    seen: dict[str, DiagnosticStatus] = {}
    lock = threading.Lock()

    def record(msg: DiagnosticArray) -> None:
        with lock:
            for status in msg.status:
                seen[status.name] = status

    probe.create_subscription(DiagnosticArray, "/diagnostics", record, 10)
    executor = SingleThreadedExecutor(context=ros_context)
    for each in (*nodes, probe):
        executor.add_node(each)
    names = {"/r1/policy_node: policy", "/r2/policy_node: policy"}
    try:
        with spinning(executor):
            wait_until(lambda: names <= set(seen), timeout=15, message=lambda: f"saw {set(seen)}")
    finally:
        for each in (*nodes, probe):
            each.destroy_node()
    for ns in ("/r1", "/r2"):
        status = seen[f"{ns}/policy_node: policy"]
        assert status.hardware_id == f"{ns}/policy_node"
        assert {kv.key: kv.value for kv in status.values}["model"] == "pi05"


def test_without_a_namespace_the_topics_are_the_usual_ones(ros_context, server):
    node = _node(ros_context, server.url_template)
    try:
        subscriptions, publishers = _names(node)
    finally:
        node.destroy_node()
    assert {"/joint_states", "/camera/base/image_raw"} <= subscriptions
    assert {"/arm_controller/joint_trajectory", "/policy_node/preview"} <= publishers


def test_a_namespaced_robot_is_commanded_in_its_namespace(ros_context, server):
    """Drivers and controllers of /robot1 (relative names in their own namespace)."""
    node = _node(ros_context, server.url_template, namespace="/robot1")
    robot = Node("robot_drivers", namespace="/robot1", context=ros_context)
    received: dict[str, list] = {"ns": [], "root": []}
    lock = threading.Lock()

    def record(key: str):
        def callback(msg: JointTrajectory) -> None:
            with lock:
                received[key].append(msg)

        return callback

    image_pub = robot.create_publisher(Image, "camera/base/image_raw", qos_profile_sensor_data)
    jpeg_pub = robot.create_publisher(
        CompressedImage, "camera/wrist/image_raw/compressed", qos_profile_sensor_data
    )
    joint_pub = robot.create_publisher(JointState, "joint_states", 10)
    robot.create_subscription(JointTrajectory, "arm_controller/joint_trajectory", record("ns"), 10)
    robot.create_subscription(
        JointTrajectory, "/arm_controller/joint_trajectory", record("root"), 10
    )
    frame = np.zeros((48, 64, 3), np.uint8)
    jpeg = cv2.imencode(".jpg", frame)[1].tobytes()

    def publish_inputs() -> None:
        stamp = robot.get_clock().now().to_msg()
        image = Image(height=48, width=64, encoding="rgb8", step=64 * 3, data=frame.tobytes())
        image.header.stamp = stamp
        image_pub.publish(image)
        compressed = CompressedImage(format="jpeg", data=jpeg)
        compressed.header.stamp = stamp
        jpeg_pub.publish(compressed)
        joints = JointState(name=PI_JOINTS, position=[0.1] * len(PI_JOINTS))
        joints.header.stamp = stamp
        joint_pub.publish(joints)

    robot.create_timer(1.0 / 30.0, publish_inputs)
    executor = SingleThreadedExecutor(context=ros_context)
    executor.add_node(node)
    executor.add_node(robot)
    try:
        with spinning(executor):
            wait_until(lambda: len(received["ns"]) >= 2, timeout=15)
    finally:
        node.destroy_node()
        robot.destroy_node()
    assert received["root"] == []
    assert list(received["ns"][0].joint_names) == PI_JOINTS[:6]


# ---------------------------------------------------------------- the simulated robot
@pytest.fixture
def robot_ns():
    """A context started with ``-r __ns:=/robot_<id>``: every node in it is in that namespace."""
    import uuid

    import rclpy
    from rclpy.signals import SignalHandlerOptions

    namespace = f"/robot_{uuid.uuid4().hex[:8]}"
    context = rclpy.context.Context()
    rclpy.init(
        args=["--ros-args", "-r", f"__ns:={namespace}"],
        context=context,
        signal_handler_options=SignalHandlerOptions.NO,
    )
    try:
        yield context, namespace
    finally:
        rclpy.shutdown(context=context)


# The simulated robot matching config/pi05.yaml and its camera map.
_SIM_ARM = {"controllers.arm_controller.joints": PI_JOINTS[:6]}
_SIM_CAMERAS = {
    "cameras.wrist.format": "compressed",
    "cameras.base.width": 160,
    "cameras.base.height": 120,
    "cameras.wrist.width": 160,
    "cameras.wrist.height": 120,
}


def test_the_simulated_robot_follows_the_namespace(robot_ns):
    context, ns = robot_ns
    arm = SimArmNode(context=context, parameter_overrides=_SIM_ARM)
    cameras = SimCamerasNode(context=context, parameter_overrides=_SIM_CAMERAS)
    try:
        arm_subscriptions, arm_publishers = _names(arm)
        camera_subscriptions, camera_publishers = _names(cameras)
        assert dict(arm.topics) == {
            "arm_controller": f"{ns}/arm_controller/joint_trajectory",
            "gripper_controller": f"{ns}/gripper_controller/joint_trajectory",
        }
    finally:
        arm.destroy_node()
        cameras.destroy_node()
    assert set(arm.topics.values()) <= arm_subscriptions
    assert {f"{ns}/joint_states", f"{ns}/sim_arm/metrics"} <= arm_publishers
    assert f"{ns}/joint_states" in camera_subscriptions
    assert {
        f"{ns}/camera/base/image_raw",
        f"{ns}/camera/wrist/image_raw/compressed",
    } <= camera_publishers
    everything = arm_subscriptions | arm_publishers | camera_subscriptions | camera_publishers
    assert not {"/joint_states", "/arm_controller/joint_trajectory"} & everything


def test_policy_node_drives_the_simulated_robot_in_a_namespace(robot_ns, server, ros_context):
    # The shipped config and the sim nodes' defaults, all under one -r __ns:=: the
    # robot's joint states and cameras reach the node, its trajectories reach the arm,
    # and nothing is published on the root namespace's controllers.
    context, ns = robot_ns
    node = PolicyNode(
        "policy_node",
        context=context,
        cli_args=["--ros-args", "--params-file", str(config_dir() / "pi05.yaml")],
        parameter_overrides=[Parameter("policy_url", value=server.url_template)],
    )
    arm = SimArmNode(context=context, parameter_overrides=_SIM_ARM)
    cameras = SimCamerasNode(context=context, parameter_overrides=_SIM_CAMERAS)
    root = Node("root_listener", context=ros_context)
    at_root: list[JointTrajectory] = []
    root.create_subscription(
        JointTrajectory, "/arm_controller/joint_trajectory", at_root.append, 10
    )
    executor = SingleThreadedExecutor(context=context)
    root_executor = SingleThreadedExecutor(context=ros_context)
    for each in (node, arm, cameras):
        executor.add_node(each)
    root_executor.add_node(root)
    try:
        with spinning(executor, root_executor):
            follower = arm.followers["arm_controller"]
            wait_until(lambda: follower.measures.metrics().accepted >= 2, timeout=30)
    finally:
        for each in (node, arm, cameras, root):
            each.destroy_node()
    assert follower.measures.metrics().rejected == 0
    assert at_root == []
