"""Python logging records reach the node's ROS logger: /rosout, severity, --log-level."""

from __future__ import annotations

import itertools
import logging
import threading

import pytest
from node_rig import wait_for
from rcl_interfaces.msg import Log
from rclpy.executors import SingleThreadedExecutor
from rclpy.logging import LoggingSeverity
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy

from relay_ros.node.ros_logging import node_logger

pytestmark = pytest.mark.ros

_COUNTER = itertools.count()
_ROSOUT_QOS = QoSProfile(
    depth=100, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL
)


@pytest.fixture
def rosout(ros_context):
    """A node whose logger is bridged, and the /rosout messages it produced."""
    n = next(_COUNTER)
    node = Node(f"bridged_{n}", context=ros_context)
    listener = Node(f"rosout_listener_{n}", context=ros_context)
    received: list[Log] = []
    lock = threading.Lock()

    def record(msg: Log) -> None:
        if msg.name == node.get_name():
            with lock:
                received.append(msg)

    listener.create_subscription(Log, "/rosout", record, _ROSOUT_QOS)
    executor = SingleThreadedExecutor(context=ros_context)
    executor.add_node(listener)
    thread = threading.Thread(target=executor.spin, daemon=True)
    thread.start()

    def messages() -> list[tuple[int, str]]:
        with lock:
            return [(int(m.level), m.msg) for m in received]

    try:
        yield node, messages
    finally:
        executor.shutdown(timeout_sec=5.0)
        thread.join(timeout=5.0)
        listener.destroy_node()
        node.destroy_node()


def test_records_reach_rosout_with_their_severity(rosout) -> None:
    node, messages = rosout
    log = node_logger(node.get_logger(), f"relay_ros.test.{node.get_name()}")
    log.info("connected to %s", "ws://host:8000/pi05")
    log.warning("reconnecting in %.1f s", 0.5)
    try:
        raise RuntimeError("socket closed")
    except RuntimeError:
        log.error("request failed", exc_info=True)
    log.info("a second info line")  # same severity as before, after other severities
    got = wait_for(lambda: len(messages()) >= 4 and messages())
    assert got[0] == (Log.INFO, "connected to ws://host:8000/pi05")
    assert got[1] == (Log.WARN, "reconnecting in 0.5 s")
    assert got[2][0] == Log.ERROR and got[2][1].startswith("request failed\nTraceback")
    assert "RuntimeError: socket closed" in got[2][1]
    assert got[3] == (Log.INFO, "a second info line")


def test_the_node_log_level_applies(rosout) -> None:
    node, messages = rosout
    node.get_logger().set_level(LoggingSeverity.WARN)
    log = node_logger(node.get_logger(), f"relay_ros.test.{node.get_name()}")
    assert log.getEffectiveLevel() == logging.WARNING
    log.info("not shown")
    log.debug("not shown either")
    log.warning("shown")
    node.get_logger().set_level(LoggingSeverity.ERROR)  # changed later: still honoured
    log.warning("hidden now")
    log.error("still shown")
    got = wait_for(lambda: len(messages()) >= 2 and messages())
    assert [text for _, text in got] == ["shown", "still shown"]
