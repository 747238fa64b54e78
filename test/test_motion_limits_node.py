"""policy_node against a real WebSocket fault server: a chunk whose last action jumps
within the position limits is refused, nothing over a velocity limit is ever
published, and the holds that follow stay at the accepted value (issue 21)."""

from __future__ import annotations

import numpy as np
import pytest
from fault_server import JUMP_RAD, FaultServer
from helpers import wait_until
from node_rig import Rig

pytestmark = pytest.mark.ros


@pytest.mark.slow
def test_a_jump_in_the_last_action_is_refused_and_the_hold_stays_put(ros_context, tmp_path):
    with FaultServer() as server:
        rig = Rig(
            ros_context,
            server.url_template,
            overrides={"request_timeout_s": 2.0},
            tmp_path=tmp_path,
        )
        with rig:
            wait_until(lambda: len(rig.snapshot().arm) >= 2)
            # The jump, then the next request swallowed (the sequence of issue 21).
            server.add_faults("jump_last", "swallow")
            wait_until(lambda: rig.node.counts["refusals"] >= 1, timeout=15)
            reason = rig.node.last_refusal
            held = wait_until(
                lambda: (s := rig.last_status()) and "would move at" in s["hold_reason"] and s,
                timeout=15,
            )
            wait_until(lambda: rig.node.counts["connection_errors"] >= 1, timeout=15)
            # Streams again after the reconnect.
            before = len(rig.snapshot().arm)
            wait_until(lambda: len(rig.snapshot().arm) >= before + 2, timeout=20)
            arm = rig.snapshot().arm
    assert reason.startswith("joint 'joint1' would move at ")
    assert "its velocity limit is 2.5000/s" in reason
    assert held["level"] == 1 and held["message"].startswith("holding position: joint 'joint1'")
    # 0.1 + 2.65 = 2.75 rad is inside joint1's position limits (+-2.9) but was never sent.
    assert 0.1 + JUMP_RAD < 2.9
    for msg in arm:
        positions = np.array([p.positions for p in msg.points])
        assert positions[:, 0].max() < 0.2, positions[:, 0].max()
    holds = [msg for msg in arm if len(msg.points) == 1]
    assert holds and all(abs(msg.points[0].positions[0] - 0.1) < 1e-6 for msg in holds)
    assert rig.checker.trajectories == len(arm) + len(rig.snapshot().gripper)
    rig.checker.assert_within()
