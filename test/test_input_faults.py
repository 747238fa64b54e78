"""policy_node fed hostile or broken inputs through real DDS: it stays responsive, holds
and says why.

- A glitching joint-state sample (an encoder or bus fault): joint2 reported 0.3 rad
  above, then below, where it is, every 10 ms sample (60 rad/s implied). The samples
  are rejected and counted, the node holds naming the joint, and nothing is commanded
  from them; once the glitch stops, it streams from the true position.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import scaled, wait_until
from node_rig import Rig

from relay_ros.server import ServerOptions, run_server_in_thread

pytestmark = pytest.mark.ros


@pytest.fixture(scope="module")
def server():
    with run_server_in_thread(ServerOptions(models=("pi05",))) as handle:
        yield handle


def _joint2_first_points(rig: Rig) -> list[float]:
    return [msg.points[0].positions[1] for msg in rig.snapshot().arm if msg.points]


@pytest.mark.slow
def test_a_glitching_joint_state_is_rejected_and_the_node_holds(ros_context, server, tmp_path):
    rig = Rig(ros_context, server.url_template, tmp_path=tmp_path)
    glitch = np.zeros(len(rig.joints))

    def alternate(sample: int) -> np.ndarray:
        glitch[1] = 0.3 if sample % 2 else -0.3
        return glitch

    rig.joint_glitch = alternate
    rig.joint_sample_period = 0.01  # a 100 Hz driver, its samples stamped when measured
    with rig:
        held = wait_until(
            lambda: (
                (s := rig.last_status()) and "joint 'joint2' is not trusted" in s["message"] and s
            ),
            timeout=15,
            message=lambda: f"status {rig.last_status()}",
        )
        # Two more seconds of glitching: still holding, nothing commanded.
        wait_until(
            lambda: int(rig.last_status()["joint_samples_rejected"]) >= 200,
            timeout=scaled(10),
        )
        during = rig.snapshot().arm
        still = rig.last_status()
        rig.joint_glitch = None
        first = wait_until(lambda: _joint2_first_points(rig), timeout=15)[0]
    assert held["level"] == 1
    assert held["message"].startswith("holding position: joint states: joint 'joint2' is not ")
    assert "more than 3 x its velocity limit 2.5/s): rejected" in held["message"]
    assert "joint 'joint2' is not trusted" in still["message"]
    assert int(still["refusals"]) >= int(still["joint_samples_rejected"]) >= 200
    assert "joint 'joint2' sample" in still["last_refusal"]
    assert during == [], [m.points[0].positions[1] for m in during]
    # From the true position (0.1: nothing moved the arm meanwhile) once the glitch is gone.
    assert abs(first - 0.1) < 0.05, first
