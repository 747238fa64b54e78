"""policy_node as a managed node, driven through its real lifecycle services.

Every transition goes through ``~/change_state`` and every state is read back through
``~/get_state`` (lifecycle_msgs/srv), as ``ros2 lifecycle set/get`` call them, on a
real reference server with real DDS: configure connects and commands nothing,
activate commands, deactivate sends one hold and then nothing, cleanup removes the
configuration (and a second configure reads the parameters again), shutdown
finalizes. A configure that cannot work returns FAILURE with the reason in the log and
on /diagnostics, and leaves the node unconfigured.
"""

from __future__ import annotations

import pytest
from helpers import wait_until
from node_rig import Rig
from rcl_interfaces.msg import Log
from std_srvs.srv import SetBool, Trigger

from relay_ros.server import ServerOptions, run_server_in_thread

pytestmark = pytest.mark.ros


@pytest.fixture
def server():
    with run_server_in_thread(ServerOptions(models=("pi05",))) as handle:
        yield handle


def _managed(ros_context, url: str, tmp_path, **overrides) -> Rig:
    """A rig whose node starts unconfigured (autostart false)."""
    return Rig(ros_context, url, tmp_path=tmp_path, overrides={"autostart": False, **overrides})


def _diagnostics_after(rig: Rig, count: int) -> list[dict]:
    """Wait for two more /diagnostics messages of the node than ``count`` (two 1 Hz
    periods of the node running, event-based); its statuses so far."""
    return wait_until(lambda: len(s := rig.statuses()) >= count + 2 and s, timeout=10)


def _holds(messages) -> list:
    return [m for m in messages if len(m.points) == 1]


def test_every_transition_through_the_real_services(ros_context, server, tmp_path):
    with _managed(ros_context, server.url_template, tmp_path) as rig:
        assert rig.get_state() == "unconfigured"
        status = wait_until(lambda: rig.last_status(), timeout=10)
        assert status["lifecycle_state"] == "unconfigured" and status["level"] == 1
        assert "configure" in status["message"]
        assert not rig.node.has_parameter("state_joints")  # read at configure

        # configure: parameters read, connected, nothing commanded.
        assert rig.change_state("configure")
        assert rig.get_state() == "inactive"
        status = wait_until(
            lambda: (s := rig.last_status()) and s["connected"] == "True" and s, timeout=10
        )
        assert status["lifecycle_state"] == "inactive"
        assert status["message"] == "inactive (lifecycle): activate the node to command"
        seen = len(rig.statuses())
        _diagnostics_after(rig, seen)
        assert rig.snapshot().arm == [] and rig.node.counts["requests"] == 0

        # activate: chunks reach the controllers.
        assert rig.change_state("activate")
        assert rig.get_state() == "active"
        wait_until(lambda: len(rig.snapshot().arm) >= 2, timeout=15)

        # deactivate: one hold at the commanded position, then nothing.
        assert rig.change_state("deactivate")
        assert rig.get_state() == "inactive"
        hold = wait_until(lambda: _holds(rig.snapshot().arm), timeout=10)[0]
        assert list(hold.points[0].velocities) == [0.0] * 6
        after_hold = len(rig.snapshot().arm)
        requests = rig.node.counts["requests"]
        _diagnostics_after(rig, len(rig.statuses()))
        assert len(rig.snapshot().arm) == after_hold and rig.snapshot().arm[-1] is hold
        assert rig.node.counts["requests"] == requests
        assert rig.last_status()["hold_reason"].startswith("inactive (lifecycle)")

        # cleanup: the connection, subscriptions and publishers of the configuration are gone.
        assert server.stats.open_connections == 1
        assert rig.change_state("cleanup")
        assert rig.get_state() == "unconfigured"
        wait_until(lambda: server.stats.open_connections == 0, timeout=10)
        wait_until(lambda: rig.feeder.count_subscribers(rig.raw_topic) == 0, timeout=10)
        wait_until(lambda: rig.feeder.count_publishers(rig.arm_topic) == 0, timeout=10)
        status = wait_until(
            lambda: (s := rig.last_status()) and s["lifecycle_state"] == "unconfigured" and s
        )
        assert "connected" not in status

        # configure and activate again: the same parameters, streaming again.
        before = len(rig.snapshot().arm)
        assert rig.change_state("configure") and rig.change_state("activate")
        wait_until(lambda: len(rig.snapshot().arm) >= before + 2, timeout=15)

        # shutdown (from active): a hold first, then finalized.
        assert rig.change_state("shutdown")
        assert rig.get_state() == "finalized"
        wait_until(lambda: len(_holds(rig.snapshot().arm)) >= 2, timeout=10)
        # A transition that does not exist from here is refused.
        assert not rig.change_state("activate")


def test_autostart_configures_and_activates(ros_context, server, tmp_path):
    with Rig(ros_context, server.url_template, tmp_path=tmp_path) as rig:
        assert rig.get_state() == "active"
        wait_until(lambda: rig.snapshot().arm, timeout=15)


@pytest.mark.parametrize(
    "overrides, reason",
    [
        (
            {"camera_map": "/nonexistent/cameras.yaml"},
            "configure failed: CameraMapError: camera map '/nonexistent/cameras.yaml'",
        ),
        (
            {
                "joint_limits.joint1.max_velocity": 0.5,
                "joint_limits.joint1.has_velocity_limits": False,
            },
            "configure failed: ParameterError: joint_limits.joint1.max_velocity is given but "
            "joint_limits.joint1.has_velocity_limits is false",
        ),
        (
            {"outputs.arm.dims": [0, 1, 2, 3, 40, 5]},
            "configure failed: ParameterError: the configuration does not fit model pi05 "
            "(action_dim 32, as its servers announce): output 'arm': dim 40 is outside 0..31",
        ),
    ],
    ids=["camera map", "limits", "dims"],
)
def test_a_failing_configure_returns_failure_with_the_reason(
    ros_context, server, tmp_path, overrides, reason
):
    rig = _managed(ros_context, server.url_template, tmp_path, **overrides)
    logs: list[str] = []
    rig.feeder.create_subscription(
        Log, "/rosout", lambda m: m.name == rig.node_name and logs.append(m.msg), 100
    )
    with rig:
        assert not rig.change_state("configure")
        assert rig.get_state() == "unconfigured"
        assert rig.node.transition_error.startswith(reason), rig.node.transition_error
        status = wait_until(
            lambda: (s := rig.last_status()) and s["transition_error"] and s, timeout=10
        )
        assert status["level"] == 2 and status["message"].startswith(reason), status["message"]
        wait_until(lambda: any(line.startswith(reason) for line in logs), timeout=10)
        # It stays visible until a configure succeeds.
        _diagnostics_after(rig, len(rig.statuses()))
        assert rig.last_status()["message"].startswith(reason)
        assert rig.snapshot().arm == []


def test_enable_and_reset_in_every_state(ros_context, server, tmp_path):
    with _managed(ros_context, server.url_template, tmp_path) as rig:
        reset = rig._call(Trigger, "reset", Trigger.Request())
        assert not reset.success and reset.message.startswith("unconfigured: no episode")
        # ~/enable false is remembered through configure and activate.
        enable = rig._call(SetBool, "enable", SetBool.Request(data=False))
        assert enable.success and enable.message.startswith("disabled; unconfigured")
        assert rig.change_state("configure") and rig.change_state("activate")
        status = wait_until(
            lambda: (
                (s := rig.last_status())
                and s["lifecycle_state"] == "active"
                and s["connected"] == "True"
                and s
            )
        )
        assert status["message"].startswith("disabled through ~/enable")
        _diagnostics_after(rig, len(rig.statuses()))
        assert rig.snapshot().arm == [] and rig.node.counts["requests"] == 0
        # Inactive: enabling says what still stops it; a reset starts a new episode.
        assert rig.change_state("deactivate")
        enable = rig._call(SetBool, "enable", SetBool.Request(data=True))
        assert enable.message == (
            "enabled, but not commanding: inactive (lifecycle): activate the node to command"
        )
        reset = rig._call(Trigger, "reset", Trigger.Request())
        assert reset.success and rig.node.session_id in reset.message
        assert rig.change_state("activate")
        wait_until(lambda: rig.snapshot().arm, timeout=15)


@pytest.mark.parametrize("reached", [[], ["configure"]], ids=["unconfigured", "inactive"])
def test_shutdown_from_every_state_closes_everything(ros_context, server, tmp_path, reached):
    with _managed(ros_context, server.url_template, tmp_path) as rig:
        for transition in reached:
            assert rig.change_state(transition)
        if reached:
            wait_until(lambda: server.stats.open_connections == 1, timeout=10)
        assert rig.change_state("shutdown")
        assert rig.get_state() == "finalized"
        wait_until(lambda: server.stats.open_connections == 0, timeout=10)
        assert rig.snapshot().arm == []  # nothing was ever commanded, no hold either
        status = wait_until(
            lambda: (s := rig.last_status()) and s["lifecycle_state"] == "finalized" and s
        )
        assert status["transition_error"] == ""
        assert status["message"] == "finalized (shut down): restart the node to use it"
