"""Holds through real rclpy (issue 26): policy_node streaming the reference server's flow
policy to sim_arm, the simulated joint_trajectory_controllers, which publish the joint
states the node reads. Holds are triggered the way a user does: ``~/enable`` false
inside the first segment of the first chunk and again mid-motion, ``~/reset`` while
the arm moves, ``dry_run`` switched on. sim_arm runs every message as the controller
checks and interpolates it: none is rejected (a hold stamped zero is obeyed however
late it arrives), and its commanded positions, sampled at its own 100 Hz cycles, never
move a joint faster than its limit (difference quotients between two exact samples
never exceed the true peak)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from helpers import run_unstarved, wait_until
from node_rig import Rig
from rclpy.parameter import Parameter
from std_srvs.srv import SetBool, Trigger

from relay_ros.server import ServerOptions, run_server_in_thread
from relay_ros.sim.arm_node import SimArmNode

pytestmark = pytest.mark.ros

ARM = ["joint1", "joint2", "joint3", "joint4", "joint5", "joint6"]


def _sim_arm(rig: Rig, context: Any) -> SimArmNode:
    return SimArmNode(
        node_name=f"sim_arm_{rig.node_name}",
        context=context,
        parameter_overrides=[
            Parameter("controller_names", value=["arm", "gripper"]),
            Parameter("controllers.arm.joints", value=ARM),
            Parameter("controllers.arm.topic", value=rig.arm_topic),
            Parameter("controllers.arm.initial_positions", value=[0.1] * 6),
            Parameter("controllers.gripper.joints", value=["gripper_joint"]),
            Parameter("controllers.gripper.topic", value=rig.gripper_topic),
            Parameter("controllers.gripper.initial_positions", value=[0.1]),
            Parameter("joint_states_topic", value=f"{rig.prefix}/joint_states"),
            Parameter("robot_description_topic", value=""),
            Parameter("metrics_rate_hz", value=0.0),
        ],
    )


def _call(rig: Rig, kind: Any, service: str, request: Any) -> Any:
    client = rig.feeder.create_client(kind, f"/{rig.node_name}/{service}")
    assert client.wait_for_service(timeout_sec=5)
    future = client.call_async(request)
    return wait_until(lambda: future.done() and future.result())


def _holds(rig: Rig) -> int:
    return sum(1 for m in rig.snapshot().arm if not m.header.frame_id)


def _chunks(rig: Rig) -> int:
    return sum(1 for m in rig.snapshot().arm if m.header.frame_id)


@pytest.mark.slow
def test_holds_from_every_user_trigger_are_obeyed_within_the_limits(ros_context, tmp_path):
    def run() -> tuple:
        with run_server_in_thread(ServerOptions(models=("pi05",))) as server:
            rig = Rig(ros_context, server.url_template, follow=False, tmp_path=tmp_path)
            rig.joint_states_on = False  # sim_arm publishes them
            arm = _sim_arm(rig, ros_context)
            rig.executor.add_node(arm)

            def measured() -> None:  # the rig's own velocity checker reads rig.state
                rig.state[:6] = arm.followers["arm"].positions
                rig.state[6:] = arm.followers["gripper"].positions

            rig.feeder.create_timer(0.01, measured)
            with rig:
                # ~/enable false as soon as the first chunk reaches the controllers: inside
                # its first segment (the arm stood still, the chunk joins it).
                wait_until(lambda: _chunks(rig) >= 1, timeout=30)
                _call(rig, SetBool, "enable", SetBool.Request(data=False))
                wait_until(lambda: _holds(rig) >= 1)
                _call(rig, SetBool, "enable", SetBool.Request(data=True))
                # Mid-motion, each trigger in turn, streaming again in between.
                triggers = (
                    (
                        lambda: _call(rig, SetBool, "enable", SetBool.Request(data=False)),
                        lambda: _call(rig, SetBool, "enable", SetBool.Request(data=True)),
                    ),
                    (lambda: _call(rig, Trigger, "reset", Trigger.Request()), lambda: None),
                    (
                        lambda: rig.node.set_parameters([Parameter("dry_run", value=True)]),
                        lambda: rig.node.set_parameters([Parameter("dry_run", value=False)]),
                    ),
                )
                for trigger, recover in triggers:
                    chunks, held = _chunks(rig), _holds(rig)
                    wait_until(lambda c=chunks: _chunks(rig) >= c + 2, timeout=30)
                    trigger()
                    wait_until(lambda h=held: _holds(rig) > h)
                    recover()
                chunks = _chunks(rig)
                wait_until(lambda: _chunks(rig) >= chunks + 2, timeout=30)
                holds = _holds(rig)
                metrics = {
                    name: follower.measures.metrics() for name, follower in arm.followers.items()
                }
                history = arm.followers["arm"].measures.history()
            arm.destroy_node()
        return holds, metrics, history, rig

    # Under load a chunk (1 s of actions) can reach the arm after its end and be rejected
    # for it: judged on a run this process was not starved in. (Holds are stamped zero:
    # no delay voids them.)
    holds, metrics, history, rig = run_unstarved(run)
    assert holds >= 4  # enable twice, reset, dry_run
    for name, m in metrics.items():
        assert m.rejected == 0, (name, m.last_rejection)
        assert m.accepted >= holds  # every hold (and the chunks) ran
    times, commanded = history.times, history.commanded
    assert len(times) > 100  # 100 Hz over the run
    speed = np.abs(np.diff(commanded, axis=0)) / np.diff(times)[:, None]
    limits = np.array([rig.node.config.joint_limits[j].max_velocity for j in ARM])
    worst = float((speed / limits).max())
    assert worst <= 1.0 + 1e-6, worst
