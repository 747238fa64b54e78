"""policy_node reads cameras and joint states itself (relay_ros.node.polled), on real DDS.

What must hold: no executor runs a polled subscription, a take returns the queued
messages with how long they waited, a depth-1 queue keeps only the newest frame,
and in the running node a camera that goes silent still makes it hold (the age of a
frame comes from the middleware's reception time, not from when it was read).
"""

from __future__ import annotations

import itertools
import threading
import time
from typing import Any

import pytest
import rclpy
from helpers import wait_until
from node_rig import Rig, t_obs_of
from rclpy.callback_groups import ReentrantCallbackGroup
from rclpy.executors import SingleThreadedExecutor
from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy
from std_msgs.msg import Int32

from relay_ros.node.polled import (
    ClockRate,
    PolledCallbackGroup,
    PolledSubscription,
    message_age,
)
from relay_ros.server import ServerOptions, run_server_in_thread

pytestmark = pytest.mark.ros

_COUNTER = itertools.count()


def _qos(depth: int) -> QoSProfile:
    return QoSProfile(
        depth=depth, history=HistoryPolicy.KEEP_LAST, reliability=ReliabilityPolicy.RELIABLE
    )


class _Pair:
    """A node with one polled subscription and a publisher node, spun on a thread."""

    def __init__(self, context: Any, depth: int) -> None:
        n = next(_COUNTER)
        self.topic = f"/polled_test_{n}"
        self.node = rclpy.create_node(f"polled_{n}", context=context)
        self.talker = rclpy.create_node(f"polled_talker_{n}", context=context)
        self.pushed: list[int] = []
        self.sub = PolledSubscription(
            self.node,
            Int32,
            self.topic,
            _qos(depth),
            group=PolledCallbackGroup(),
            callback=lambda msg: self.pushed.append(msg.data),
        )
        # An ordinary subscription on the same node: the executor runs it, so what it
        # has received shows how far the executor got and when DDS delivered.
        self.spun: dict[int, float] = {}  # data -> time.time() its callback ran
        self.node.create_subscription(
            Int32, self.topic, lambda msg: self.spun.setdefault(msg.data, time.time()), _qos(10)
        )
        self.pub = self.talker.create_publisher(Int32, self.topic, _qos(10))
        self.executor = SingleThreadedExecutor(context=context)
        self.executor.add_node(self.node)
        self.executor.add_node(self.talker)
        self._thread = threading.Thread(target=self.executor.spin, daemon=True)
        self._thread.start()
        wait_until(lambda: self.pub.get_subscription_count() == 2, timeout=10)

    def publish(self, *values: int) -> None:
        for value in values:
            self.pub.publish(Int32(data=value))

    def close(self) -> None:
        self.executor.shutdown(timeout_sec=5.0)
        self._thread.join(timeout=5.0)
        self.node.destroy_node()
        self.talker.destroy_node()


def test_no_executor_runs_a_polled_subscription_take_reads_its_queue(ros_context) -> None:
    pair = _Pair(ros_context, depth=10)
    try:
        pair.publish(1, 2, 3, 4, 5)
        # The executor has run the ordinary subscription's callbacks for all five.
        wait_until(lambda: len(pair.spun) == 5)
        assert pair.pushed == []
        taken = pair.sub.take_all()
        assert [t.msg.data for t in taken] == [1, 2, 3, 4, 5]
        assert all(0.0 <= t.age_s < 5.0 for t in taken)
        assert pair.sub.take() is None
    finally:
        pair.close()


def test_a_take_says_how_long_the_message_waited(ros_context) -> None:
    pair = _Pair(ros_context, depth=10)
    try:
        pair.publish(7)
        arrived = wait_until(lambda: pair.spun.get(7))  # DDS delivered it by then
        # It waits in the queue for 0.4 s from its arrival, then it is read.
        wait_until(lambda: time.time() - arrived >= 0.4)
        waited = time.time() - arrived
        first = wait_until(pair.sub.take)
        assert first.msg.data == 7
        assert waited - 0.05 <= first.age_s < waited + 5.0  # from its arrival, not the read
        pair.publish(8)
        fresh = wait_until(pair.sub.take)
        assert fresh.msg.data == 8 and fresh.age_s < 0.35
    finally:
        pair.close()


def test_message_age_without_a_reception_time_is_as_old_as_it_can_be() -> None:
    # With a reception time: measured from it.
    assert message_age(10_000_000_000, 9_800_000_000, 5_000_000_000) == pytest.approx(0.2)
    # Without one (0): from the last time the queue was seen empty, never "fresh".
    assert message_age(10_000_000_000, 0, 6_000_000_000) == pytest.approx(4.0)
    # A clock step backwards never gives a negative age.
    assert message_age(10_000_000_000, 10_500_000_000, 0) == 0.0


def test_the_clock_rate_puts_a_system_age_on_the_node_clock() -> None:
    """A bag played at 2x: a frame that waited 0.25 s (system) is 0.5 s old on the
    node clock; a paused simulator: no older at all; 1 until measured, and after a
    jump."""
    rate = ClockRate()
    assert rate.received(100.0, 0.25) == 100.0 - 0.25  # nothing known: the system rate
    for k in range(21):  # 1 s of ticks at 20 Hz, node clock at twice the system's
        rate.observe(100.0 + 0.1 * k, system_now=1000.0 + 0.05 * k)
    assert rate.rate() == pytest.approx(2.0)
    assert rate.received(102.0, 0.25) == pytest.approx(101.5)
    for k in range(1, 41):  # paused for 2 s: the window holds only the pause
        rate.observe(102.0, system_now=1001.0 + 0.05 * k)
    assert rate.rate() == 0.0 and rate.received(102.0, 0.25) == 102.0
    rate.reset()
    rate.observe(5.0, system_now=1010.0)
    assert rate.rate() == 1.0
    # A jump the node is not told about (the first /clock: from 0 to the bag's time):
    # measured afresh, not as a rate of 1e9.
    rate.observe(1.7e9, system_now=1010.01)
    rate.observe(1.7e9 + 0.2, system_now=1010.11)
    rate.observe(1.7e9 + 0.4, system_now=1010.21)
    assert rate.rate() == pytest.approx(2.0)
    # Not on a simulated clock: the node clock is the system clock, rate exactly 1.
    rate.observe(1.7e9 + 0.6, system_now=1010.31, simulated=False)
    assert rate.rate() == 1.0


def test_depth_one_keeps_only_the_newest_message(ros_context) -> None:
    pair = _Pair(ros_context, depth=1)
    try:
        pair.publish(1, 2, 3)
        wait_until(lambda: 3 in pair.spun)  # all three have arrived
        newest = pair.sub.take_newest(100.0)
        assert newest is not None and newest.msg.data == 3
        assert 99.0 < newest.received <= 100.0  # now minus its age in the queue
        assert pair.sub.take() is None
    finally:
        pair.close()


def test_a_polled_subscription_refuses_an_executor_group(ros_context) -> None:
    node = rclpy.create_node("polled_wrong_group", context=ros_context)
    try:
        with pytest.raises(TypeError, match="PolledCallbackGroup, not ReentrantCallbackGroup"):
            PolledSubscription(
                node,
                Int32,
                "/polled_wrong_group",
                _qos(1),
                group=ReentrantCallbackGroup(),  # type: ignore[arg-type]
                callback=lambda msg: None,
            )
    finally:
        node.destroy_node()


@pytest.fixture
def server():
    with run_server_in_thread(ServerOptions(models=("pi05",))) as handle:
        yield handle


def test_the_node_reads_few_frames_ticks_when_due_and_holds_when_a_camera_goes_silent(
    ros_context, server, tmp_path
) -> None:
    # A fixed execute horizon: a request every 0.5 s, whatever the latency.
    with Rig(
        ros_context, server.url_template, tmp_path=tmp_path, overrides={"execute_horizon": 25}
    ) as rig:
        node = rig.node
        wait_until(lambda: len(rig.snapshot().arm) >= 2, timeout=15)
        frames0, ticks0, chunks0 = (
            node.counts["frames_received"],
            node.ticks,
            len(rig.snapshot().arm),
        )
        started = time.monotonic()
        # Chunks keep coming (a request every 0.5 s), watched for at least 2 s ...
        wait_until(
            lambda: len(rig.snapshot().arm) >= chunks0 + 2 and time.monotonic() - started >= 2.0,
            timeout=15,
        )
        frames = node.counts["frames_received"] - frames0
        ticks = node.ticks - ticks0
        elapsed = time.monotonic() - started
        # ... from a fraction of the 2 x 30 frames/s published, read just before each
        # request, and a tick far below tick_hz (100/s) between the due times.
        assert 0 < frames < 0.6 * 2 * 30 * elapsed, frames
        assert 0 < ticks < 0.6 * node.config.tick_hz * elapsed, ticks

        # The cameras stop: the frames already queued age, and the node holds.
        rig.cameras_on = False
        stopped = node.get_clock().now().nanoseconds * 1e-9
        reason = wait_until(lambda: (r := node.hold_reason) and "stale" in r and r, timeout=10)
        assert "camera" in reason
        # A frame read after the stop keeps the time DDS received it (before the stop).
        assert max(node.core.frames.stamps().values()) <= stopped + 0.05
        status = wait_until(
            lambda: (s := rig.last_status()) and s["level"] == 1 and "stale" in s["message"] and s,
            timeout=5,
        )
        assert status["level"] == 1
        limit = stopped + node.config.sensor_timeout_s
        chunks_after = [m for m in rig.snapshot().arm if m.header.frame_id.startswith("t_obs=")]
        late = [t_obs_of(m) for m in chunks_after if t_obs_of(m) > limit]
        assert late == [], f"chunks built from frames older than sensor_timeout_s: {late}"
