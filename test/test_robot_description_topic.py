"""Joint limits from the robot's URDF on robot_description (std_msgs/String,
transient-local, as robot_state_publisher publishes it), with real rclpy nodes: a
publisher started before policy_node and one started after it; until the URDF
comes, nothing is commanded and /diagnostics says which joints lack limits."""

from __future__ import annotations

import pytest
from helpers import wait_until
from node_rig import Rig
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy
from std_msgs.msg import String

from relay_ros.paths import config_file
from relay_ros.server import ServerOptions, run_server_in_thread

pytestmark = pytest.mark.ros

LATCHED = QoSProfile(
    depth=1,
    history=HistoryPolicy.KEEP_LAST,
    reliability=ReliabilityPolicy.RELIABLE,
    durability=DurabilityPolicy.TRANSIENT_LOCAL,
)
SIM_URDF = config_file("sim_arm.urdf").read_text()


@pytest.fixture(scope="module")
def server():
    with run_server_in_thread(ServerOptions(models=("pi05",))) as handle:
        yield handle


def _rig(ros_context, server, tmp_path, topic: str) -> Rig:
    return Rig(
        ros_context,
        server.url_template,
        overrides={"robot_description_topic": topic},
        without_limits=True,
        tmp_path=tmp_path,
    )


def test_a_urdf_published_before_the_node_starts_gives_the_limits(ros_context, server, tmp_path):
    topic = f"/urdf_before_{id(tmp_path)}/robot_description"
    from rclpy.node import Node

    publisher_node = Node("urdf_publisher_before", context=ros_context)
    try:
        publisher = publisher_node.create_publisher(String, topic, LATCHED)
        publisher.publish(String(data=SIM_URDF))  # before the node exists
        with _rig(ros_context, server, tmp_path, topic) as rig:
            wait_until(lambda: len(rig.snapshot().arm) >= 2, timeout=15)
            limits = rig.node.config.joint_limits
            status = wait_until(
                lambda: (s := rig.last_status()) and s["message"] == "streaming" and s, timeout=15
            )
    finally:
        publisher_node.destroy_node()
    assert limits["joint6"].max_position == 3.7 and limits["joint6"].max_velocity == 3.0
    assert limits["gripper_joint"].source == f"position and velocity from topic '{topic}'"
    assert rig.node.config.limits_problem is None and status["level"] == 0


def test_without_a_urdf_nothing_is_commanded_until_one_comes(ros_context, server, tmp_path):
    topic = f"/urdf_after_{id(tmp_path)}/robot_description"
    from rclpy.node import Node

    with _rig(ros_context, server, tmp_path, topic) as rig:
        error = wait_until(lambda: (s := rig.last_status()) and s["level"] == 2 and s, timeout=15)
        assert rig.snapshot().arm == [] and rig.snapshot().gripper == []
        publisher_node = Node("urdf_publisher_after", context=ros_context)
        try:
            publisher = publisher_node.create_publisher(String, topic, LATCHED)
            publisher.publish(String(data=SIM_URDF))
            wait_until(lambda: len(rig.snapshot().arm) >= 2, timeout=15)
            streaming = wait_until(
                lambda: (s := rig.last_status()) and s["message"] == "streaming" and s, timeout=15
            )
            # A URDF whose gripper mimics joint1 (never commanded itself): hold, say so.
            mimic = SIM_URDF.replace(
                '<axis xyz="1 0 0"/>', '<axis xyz="1 0 0"/>\n    <mimic joint="joint1"/>'
            )
            publisher.publish(String(data=mimic))
            mimicked = wait_until(
                lambda: (s := rig.last_status()) and "mimics" in s["message"] and s, timeout=15
            )
        finally:
            publisher_node.destroy_node()
    assert error["message"].startswith(
        "cannot command: joints ['joint1', 'joint2', 'joint3', 'joint4', 'joint5', 'joint6', "
        "'gripper_joint'] have no position limit: no robot description was given"
    )
    assert error["message"].endswith(f"the URDF on topic '{topic}' has not come (yet)")
    assert streaming["level"] == 0
    assert mimicked["level"] == 2
    assert "joint 'gripper_joint' mimics 'joint1'" in mimicked["message"]
    assert "holding position" not in mimicked["message"]
