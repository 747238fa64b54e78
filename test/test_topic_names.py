"""ROS topic name expansion without rclpy, checked against rclpy's own."""

from __future__ import annotations

import pytest

from relay_ros.node.topic_names import expand_topic_name

CASES = [
    ("joint_states", "/", "/joint_states"),
    ("joint_states", "/robot1", "/robot1/joint_states"),
    ("arm_controller/joint_trajectory", "/a/b/", "/a/b/arm_controller/joint_trajectory"),
    ("/diagnostics", "/robot1", "/diagnostics"),
    ("~/preview", "/", "/policy_node/preview"),
    ("~/preview", "/robot1", "/robot1/policy_node/preview"),
    ("~", "/robot1", "/robot1/policy_node"),
    ("{node}/x", "/ns", "/ns/policy_node/x"),
]


@pytest.mark.parametrize("name, namespace, expected", CASES)
def test_expansion(name, namespace, expected):
    assert expand_topic_name(name, "policy_node", namespace) == expected


def test_matches_rclpy(ros_context):
    from rclpy.node import Node

    for namespace in ("/", "/robot1", "/a/b"):
        node = Node("policy_node", namespace=namespace, context=ros_context)
        try:
            for name, _, _ in CASES:
                expected = node.resolve_topic_name(name, only_expand=True)
                assert expand_topic_name(name, "policy_node", namespace) == expected, name
        finally:
            node.destroy_node()


@pytest.mark.parametrize(
    "name, namespace, message",
    [("", "/", "topic name is empty"), ("x", "robot1", "namespace 'robot1' must start with '/'")],
)
def test_errors(name, namespace, message):
    with pytest.raises(ValueError, match=message):
        expand_topic_name(name, "policy_node", namespace)
