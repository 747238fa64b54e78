"""policy_node under use_sim_time when /clock jumps (issue 21): back 10 s it used to
request and publish nothing for 10 s while /diagnostics said OK "streaming"; forward
100 s added the jump to the stall time. Real rclpy nodes, a real /clock publisher."""

from __future__ import annotations

import re
import threading
import time

import pytest
from helpers import wait_until
from node_rig import Rig
from rclpy.node import Node
from rclpy.qos import QoSProfile, ReliabilityPolicy
from rosgraph_msgs.msg import Clock

from relay_ros.pipeline.streaming import StreamingCore
from relay_ros.server import ServerOptions, run_server_in_thread

pytestmark = pytest.mark.ros


class SimClock:
    """Publishes /clock at 100 Hz: wall time since start + ``offset`` (seconds)."""

    def __init__(self, context) -> None:
        self.offset = 1000.0
        self._start = time.monotonic()
        self._lock = threading.Lock()
        self.node = Node("sim_clock", context=context)
        qos = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
        self._pub = self.node.create_publisher(Clock, "/clock", qos)
        self.node.create_timer(0.01, self._tick)

    def jump(self, seconds: float) -> None:
        with self._lock:
            self.offset += seconds

    def _tick(self) -> None:
        with self._lock:
            t = time.monotonic() - self._start + self.offset
        msg = Clock()
        msg.clock.sec = int(t)
        msg.clock.nanosec = int((t - int(t)) * 1e9)
        self._pub.publish(msg)


def _chunks(rig: Rig) -> int:
    return sum(1 for m in rig.snapshot().arm if len(m.points) > 1)


@pytest.mark.slow
def test_clock_jumps_restart_the_schedule_hold_and_warn(ros_context, tmp_path):
    clock = SimClock(ros_context)
    with run_server_in_thread(ServerOptions(models=("pi05",))) as server:
        rig = Rig(
            ros_context,
            server.url_template,
            # A fixed execute horizon (a request every 0.5 s): with the automatic one a
            # request is nearly always in flight at the jump, the crash of issue 26's
            # fault 1, which its own test covers.
            overrides={"use_sim_time": True, "execute_horizon": 25},
            tmp_path=tmp_path,
        )
        rig.executor.add_node(clock.node)
        with rig:
            wait_until(lambda: _chunks(rig) >= 3, timeout=20)
            wait_until(lambda: (s := rig.last_status()) and s["message"] == "streaming", timeout=15)
            # The jump as rclpy measures it: between the two /clock messages around it,
            # ~10 ms apart (more on a loaded machine, which delivers some late).
            for jump, word in ((-10.0, "back"), (100.0, "forward")):
                before = _chunks(rig)
                stalled = float(rig.last_status()["stall_time_s"])
                clock.jump(jump)
                warned = wait_until(
                    lambda w=word: (
                        (s := rig.last_status()) and f"jumped {w} " in s["message"] and s
                    ),
                    timeout=10,
                )
                seen = float(re.search(rf"jumped {word} ([0-9.]+) s", warned["message"]).group(1))
                # Less (back) or more (forward) than the jump by the time between the two.
                low, high = (8.0, 10.0) if jump < 0 else (100.0, 102.0)
                assert low <= seen <= high, warned["message"]
                # Streaming again within seconds (a loaded machine's), not after the jump's
                # 10 s (the /clock here is the wall clock plus an offset).
                wait_until(lambda b=before: _chunks(rig) >= b + 1, timeout=8)
                resumed = wait_until(
                    lambda: (s := rig.last_status()) and s["message"] == "streaming" and s,
                    timeout=15,
                )
                assert warned["level"] == 1
                assert warned["message"].startswith("holding position: the node clock jumped") or (
                    warned["message"].startswith("the node clock jumped")
                )
                # The jump is never stall time: 100 s (or the 10 s of nothing) would be.
                assert float(resumed["stall_time_s"]) - stalled < 5.0, resumed["stall_time_s"]
            core: StreamingCore = rig.node.core
            assert core.counts["clock_jumps"] >= 2
        clock.node.destroy_node()


@pytest.mark.slow
def test_a_clock_jump_with_a_request_in_flight_drops_its_reply(ros_context, tmp_path):
    """Issue 26, fault 1: /clock forward 100 s or back 10 s while a request is in
    flight (a 0.6 s server) crashed policy_node's tick (SchedulerStateError,
    StatsError: latency -9.68 s). The reply from before the jump is dropped and
    counted; the node keeps streaming and no latency is negative."""
    clock = SimClock(ros_context)
    with run_server_in_thread(ServerOptions(models=("pi05",), latency_ms=600.0)) as server:
        rig = Rig(
            ros_context,
            server.url_template,
            overrides={"use_sim_time": True, "execute_horizon": 45},
            tmp_path=tmp_path,
        )
        rig.executor.add_node(clock.node)
        with rig:
            core: StreamingCore = rig.node.core
            wait_until(lambda: _chunks(rig) >= 2, timeout=30)
            for jump in (100.0, -10.0):
                requests = core.counts["requests"]
                dropped = core.counts["replies_before_clock_jump"]
                wait_until(lambda r=requests: core.counts["requests"] > r, timeout=15)
                clock.jump(jump)  # well inside the new request's 0.6 s
                wait_until(
                    lambda d=dropped: core.counts["replies_before_clock_jump"] > d, timeout=15
                )
                chunks = _chunks(rig)
                wait_until(lambda c=chunks: _chunks(rig) >= c + 2, timeout=15)
            assert core.latency.percentile(0) >= 0.0
            assert core.counts["clock_jumps"] >= 2
        clock.node.destroy_node()
