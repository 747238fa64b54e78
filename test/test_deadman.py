"""The dead-man switch: policy_node commands only while deadman_topic brings a fresh true.

The decisions of :class:`~relay_ros.node.deadman.DeadmanSwitch` on a clock passed in,
then the node on real rclpy: a joystick-like publisher sends true at 20 Hz, stops,
and the node holds within the timeout (measured from the last true to the hold
message's stamp, both on the node's wall clock), says why on /diagnostics, and
commands again when true comes back; a false holds at once.
"""

from __future__ import annotations

import threading
import time

import pytest
from helpers import scaled, wait_until
from node_rig import Rig
from std_msgs.msg import Bool

from relay_ros.node.deadman import DeadmanSwitch
from relay_ros.server import ServerOptions, run_server_in_thread

TIMEOUT_S = 0.3


def test_the_switch_counts_a_true_for_the_timeout_only():
    switch = DeadmanSwitch("/joy/deadman", 0.5)
    assert (
        switch.stop_reason(0.0) == "dead-man switch: no true on /joy/deadman yet (hold the button)"
    )
    assert switch.expires_at() is None
    switch.received(True, 10.0)
    assert switch.stop_reason(10.0) is None and switch.stop_reason(10.5) is None
    assert switch.expires_at() == 10.5
    stale = "dead-man switch: no true on /joy/deadman for 0.50 s (deadman_timeout_s)"
    assert switch.stop_reason(10.5001) == stale
    assert switch.stop_reason(9.0) == stale  # the clock went back: the true does not count
    switch.received(True, 11.0)
    assert switch.stop_reason(11.2) is None
    switch.received(False, 11.3)
    assert switch.stop_reason(11.3) == "dead-man switch released: false on /joy/deadman"
    assert switch.expires_at() is None
    with pytest.raises(ValueError, match="expected seconds > 0"):
        DeadmanSwitch("/x", 0.0)


class _Button:
    """A joystick button on the rig's feeder: true at 20 Hz while held."""

    def __init__(self, rig: Rig, topic: str) -> None:
        self.held = False
        self.last_true: float | None = None  # wall time of the last true sent
        self._lock = threading.Lock()
        self._pub = rig.feeder.create_publisher(Bool, topic, 10)
        rig.feeder.create_timer(0.05, self._tick)

    def _tick(self) -> None:
        with self._lock:
            if self.held:
                self._pub.publish(Bool(data=True))
                self.last_true = time.time()

    def release(self) -> float:
        """Stop sending; the wall time of the last true sent."""
        with self._lock:
            self.held = False
            assert self.last_true is not None
            return self.last_true

    def send_false(self) -> None:
        with self._lock:
            self.held = False
            self._pub.publish(Bool(data=False))


def _holds_after(rig: Rig, t: float) -> list:
    got = rig.snapshot()
    return [m for m in got.arm if len(m.points) == 1 and got.start_of(m) >= t]


@pytest.mark.ros
def test_the_node_commands_only_while_the_button_is_held(ros_context, tmp_path):
    topic = f"/deadman_{id(tmp_path) % 100000}"
    with (
        run_server_in_thread(ServerOptions(models=("pi05",))) as server,
        Rig(
            ros_context,
            server.url_template,
            tmp_path=tmp_path,
            overrides={"deadman_topic": topic, "deadman_timeout_s": TIMEOUT_S},
        ) as rig,
    ):
        button = _Button(rig, topic)
        status = wait_until(
            lambda: (s := rig.last_status()) and s["connected"] == "True" and s, timeout=10
        )
        assert status["message"] == f"dead-man switch: no true on {topic} yet (hold the button)"
        assert status["deadman"] == topic
        assert rig.snapshot().arm == [] and rig.node.counts["requests"] == 0

        button.held = True
        wait_until(lambda: len(rig.snapshot().arm) >= 2, timeout=15)

        last_true = button.release()
        hold = wait_until(lambda: _holds_after(rig, last_true), timeout=10)[0]
        # The hold (stamped zero: it starts on arrival) went out within the timeout and
        # a tick of the last true.
        started = rig.snapshot().start_of(hold)
        assert started - last_true <= TIMEOUT_S + scaled(0.15), started - last_true
        stale = f"dead-man switch: no true on {topic} for {TIMEOUT_S:.2f} s (deadman_timeout_s)"
        status = wait_until(lambda: (s := rig.last_status()) and s["message"] == stale and s)
        assert status["level"] == 1 and status["hold_reason"] == stale

        # Held again: chunks again.
        count = len(rig.snapshot().arm)
        button.held = True
        wait_until(lambda: len(rig.snapshot().arm) >= count + 2, timeout=15)

        # A false stops it at once.
        released_at = time.time()
        button.send_false()
        wait_until(lambda: _holds_after(rig, released_at), timeout=10)
        released = f"dead-man switch released: false on {topic}"
        wait_until(lambda: (s := rig.last_status()) and s["message"] == released)
