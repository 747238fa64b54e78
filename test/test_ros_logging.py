"""Python logging records reach the node's ROS logger: /rosout, severity, --log-level.

The ROS-free core's records too (the mono8 warning), through policy_node."""

from __future__ import annotations

import itertools
import logging
import threading

import pytest
from helpers import wait_until
from node_rig import Rig
from rcl_interfaces.msg import Log
from rclpy.executors import SingleThreadedExecutor
from rclpy.logging import LoggingSeverity
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import CompressedImage, Image

from relay_ros.node.ros_logging import node_logger
from relay_ros.server import ServerOptions, run_server_in_thread

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
    got = wait_until(lambda: len(messages()) >= 4 and messages())
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
    got = wait_until(lambda: len(messages()) >= 2 and messages())
    assert [text for _, text in got] == ["shown", "still shown"]


class _MonoCameraRig(Rig):
    """The rig with a base camera that sends mono8 frames (a grey camera driver)."""

    def _publish_cameras(self) -> None:
        stamp = self.feeder.get_clock().now().to_msg()
        h, w, _ = self._frame.shape
        grey = Image(height=h, width=w, encoding="mono8", step=w, data=bytes(h * w))
        grey.header.stamp = stamp
        self._image_pub.publish(grey)
        jpeg = CompressedImage(format="jpeg", data=self.jpeg)
        jpeg.header.stamp = stamp
        self._jpeg_pub.publish(jpeg)


def test_the_mono8_warning_reaches_rosout_from_the_policy_node(ros_context, tmp_path) -> None:
    # pipeline/images.py logs it through `logging`; the node routes relay_ros.pipeline's
    # records to its own logger, so it is on /rosout with the node's name (not only stderr).
    with run_server_in_thread(ServerOptions(models=("pi05",))) as server:
        rig = _MonoCameraRig(ros_context, server.url_template, tmp_path=tmp_path)
        warnings: list[str] = []
        lock = threading.Lock()

        def record(msg: Log) -> None:
            if msg.name == rig.node_name and msg.level == Log.WARN:
                with lock:
                    warnings.append(msg.msg)

        rig.feeder.create_subscription(Log, "/rosout", record, _ROSOUT_QOS)
        with rig:

            def mono_warning() -> list[str]:
                with lock:
                    return [text for text in warnings if "mono8" in text]

            found = wait_until(mono_warning, timeout=30)
        assert found == [
            f"camera {rig.raw_topic} sends mono8 frames; expanding grey to 3 channels "
            "(the policy expects RGB)"
        ]
    # The node took its route with it: later records are not sent to a destroyed node.
    assert not [h for h in logging.getLogger("relay_ros.pipeline").handlers if "Route" in repr(h)]
