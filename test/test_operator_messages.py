"""Messages that name the real cause, on real rclpy with a real reference server.

What a newcomer gets wrong first, and what the node says about it: a controller
topic nobody subscribes to (a stopped controller, a typo), a camera topic with a
typo, joint states that stop, a depth camera in an encoding the node cannot use.
Each reason names the resolved topic, in the log and on /diagnostics.
"""

from __future__ import annotations

import pytest
from helpers import scaled, wait_until
from node_rig import PI_JOINTS, Rig, stamp_of, t_obs_of, tfs_of
from rcl_interfaces.msg import Log
from trajectory_msgs.msg import JointTrajectory

from relay_ros.node.policy_wiring import LISTENER_GRACE_S
from relay_ros.server import ServerOptions, run_server_in_thread

pytestmark = pytest.mark.ros


@pytest.fixture
def server():
    with run_server_in_thread(ServerOptions(models=("pi05",))) as handle:
        yield handle


class _Rosout:
    """The node's /rosout lines with their stamps (node clock, seconds)."""

    def __init__(self, rig: Rig) -> None:
        self.lines: list[tuple[float, str]] = []
        name = rig.node_name
        rig.feeder.create_subscription(Log, "/rosout", self._on_log(name), 100)

    def _on_log(self, name: str):
        def record(msg: Log) -> None:
            if msg.name == name:
                self.lines.append((msg.stamp.sec + msg.stamp.nanosec * 1e-9, msg.msg))

        return record

    def find(self, text: str) -> tuple[float, str] | None:
        return next((line for line in self.lines if text in line[1]), None)


def _typo_rig(ros_context, url, tmp_path, **overrides) -> tuple[Rig, _Rosout, str]:
    n = tmp_path.name[-12:].replace("-", "_")
    typo = f"/typo_{n}/arm_controler/joint_trajectory"
    rig = Rig(
        ros_context,
        url,
        tmp_path=tmp_path,
        overrides={"outputs.arm.topic": typo, "autostart": False, **overrides},
    )
    return rig, _Rosout(rig), typo


def test_a_controller_nobody_listens_to_is_named_within_a_second(ros_context, server, tmp_path):
    rig, rosout, typo = _typo_rig(ros_context, server.url_template, tmp_path)
    with rig:
        assert rig.change_state("configure")
        configured = wait_until(lambda: rosout.find("configured: inactive"), timeout=10)[0]
        warned = wait_until(lambda: rosout.find("nobody subscribes"), timeout=10)
        assert warned[1].startswith(f"controller 'arm': nobody subscribes to {typo} after ")
        # Not before the grace (discovery of a running controller takes a moment)...
        waited = float(warned[1].split(" after ")[1].split(" s;")[0])
        assert waited >= LISTENER_GRACE_S, warned[1]
        # ...and within a second (and a tick) of the end of configure.
        assert warned[0] - configured <= LISTENER_GRACE_S + scaled(0.5), warned[0] - configured
        status = wait_until(lambda: (s := rig.last_status()) and s["controllers_unheard"] and s)
        assert status["controllers_unheard"] == typo  # the gripper's controller listens
        assert status["message"].startswith(f"no controller subscribes to {typo}: is it running")
        assert status["level"] >= 1
        # The controller comes up: said once, and gone from /diagnostics.
        rig.feeder.create_subscription(JointTrajectory, typo, lambda msg: None, 10)
        wait_until(lambda: rosout.find(f"controller 'arm': {typo} has a subscriber now"))
        wait_until(lambda: (s := rig.last_status()) and s["controllers_unheard"] == "")


def test_a_dry_run_does_not_look_for_controllers(ros_context, server, tmp_path):
    rig, rosout, _ = _typo_rig(ros_context, server.url_template, tmp_path, dry_run=True)
    with rig:
        assert rig.change_state("configure")
        count = len(rig.statuses())
        wait_until(lambda: len(rig.statuses()) >= count + 2, timeout=10)  # two seconds on
        assert rig.last_status()["controllers_unheard"] == ""
        assert rosout.find("nobody subscribes") is None


def test_start_up_names_every_resolved_topic(ros_context, server, tmp_path):
    rig = Rig(ros_context, server.url_template, tmp_path=tmp_path, overrides={"autostart": False})
    rosout = _Rosout(rig)
    with rig:
        assert rig.change_state("configure")
        line = wait_until(lambda: rosout.find("configured (commanding)"), timeout=10)[1]
    assert (
        f"cameras 'base_0_rgb' on {rig.raw_topic} (raw), 'left_wrist_0_rgb' on "
        f"{rig.compressed_topic} (compressed); joint states on {rig.prefix}/joint_states; "
        f"controllers 'arm' on {rig.arm_topic}, 'gripper' on {rig.gripper_topic}"
    ) in line


def test_hold_reasons_name_the_camera_key_and_topic(ros_context, server, tmp_path):
    rig = Rig(ros_context, server.url_template, tmp_path=tmp_path)
    rig.cameras_on = False
    with rig:
        status = wait_until(lambda: (s := rig.last_status()) and s["hold_reason"] and s)
        assert status["hold_reason"] == (
            f"no frame yet from camera 'base_0_rgb' on {rig.raw_topic}; no frame yet from "
            f"camera 'left_wrist_0_rgb' on {rig.compressed_topic}"
        )
        rig.cameras_on = True
        wait_until(lambda: rig.snapshot().arm, timeout=15)
        rig.joint_states_on = False
        status = wait_until(
            lambda: (s := rig.last_status()) and "joint states" in s["hold_reason"] and s,
            timeout=10,
        )
        assert f"joint states on {rig.prefix}/joint_states: " in status["hold_reason"]


def test_a_depth_camera_keeps_its_real_cause_on_diagnostics(ros_context, server, tmp_path):
    rig = Rig(ros_context, server.url_template, tmp_path=tmp_path)
    rig.depth_camera = True
    with rig:
        count = len(rig.statuses())
        wait_until(lambda: len(rig.statuses()) >= count + 3, timeout=15)  # three seconds on
        reasons = {s["hold_reason"] for s in rig.statuses()[count:]}
    expected = (
        f"no usable frame from camera 'base_0_rgb' on {rig.raw_topic}: image encoding "
        "'16UC1' is not supported"
    )
    assert all(reason.startswith(expected) for reason in reasons), reasons
    assert rig.snapshot().arm == []


@pytest.mark.parametrize("plan", ["flow", "visual"])
def test_a_dry_run_against_the_reference_server_streams_at_an_ordinary_pose(
    ros_context, tmp_path, plan
):
    """The reference policies start from the observed state: a dry-run arm that stands at
    1.1 rad (outside the flow plan's +/-0.8 rad) gets chunks that start where it stands."""
    pose = dict(zip(PI_JOINTS, [0.0, 0.5, -0.5, 0.3, 1.1, 0.2, 0.0]))
    with (
        run_server_in_thread(ServerOptions(models=("pi05",), synthetic=plan)) as server,
        Rig(
            ros_context,
            server.url_template,
            tmp_path=tmp_path,
            overrides={"dry_run": True},
            state=list(pose.values()),
            follow=False,
        ) as rig,
    ):
        wait_until(lambda: rig.node.counts["chunks_published"] >= 5, timeout=20)
        refusals, last = rig.node.counts["refusals"], rig.node.last_refusal
        chunks = [m for m in rig.snapshot().preview if m.header.frame_id]
    # The first chunk's first point is its action for the first slot after the reply
    # was published (a dry run keeps each chunk's own timeline; later ones are spliced
    # onto the preview before): `slot` actions down the policy's motion from the pose,
    # each at most 0.032 rad (the flow plan's ~0.027, the visual plan's speed cap
    # 1.6 rad/s at 50 Hz).
    first = chunks[0]
    slot = round((stamp_of(first) + tfs_of(first)[0] - t_obs_of(first)) / 0.02)
    point = first.points[0].positions
    away = max(abs(point[i] - pose[j]) for i, j in enumerate(first.joint_names))
    assert away <= 0.032 * slot + 1e-4, (first.joint_names, slot, away)
    # A reply late enough puts the first point past max_joint_step (on the flow plan 13
    # or more actions, 0.26 s, on), which refuses it, as it must: a loaded machine's.
    # So does a feeder starved long enough that its frames go stale (0.66 s seen at
    # load 10). Neither is about the pose; nothing else may be refused.
    if refusals:
        assert last is not None and last.startswith(
            ("first point moves joint", "stale observation: stale inputs")
        ), last
