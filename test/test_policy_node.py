"""policy_node end to end: real rclpy, real reference server on loopback.

Each test starts the node against a server, feeds it real Image,
CompressedImage and JointState messages, and checks what reaches the
trajectory topics, services and /diagnostics. The decisions behind them
(timelines, refusals, holds, live configuration) are tested on a synthetic
clock in test_streaming.py; these tests check the wiring.
"""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from fault_server import FaultServer
from fifo_probe import fifo_refusal
from helpers import wait_until
from node_rig import Rig, stamp_of, t_obs_of, tfs_of
from rcl_interfaces.msg import Log
from std_srvs.srv import SetBool, Trigger

from relay_ros.node.policy_node import freeze_startup_heap
from relay_ros.pipeline.camera_map import CameraMapError
from relay_ros.pipeline.streaming import ENABLE_STOP
from relay_ros.server import ServerOptions, run_server_in_thread

pytestmark = pytest.mark.ros

DT = 1.0 / 50.0  # reference pi05 control_hz
H = 50


class ScriptedPolicy:
    """A policy for the server's --policy hook: smooth ramps from the state, or a fault."""

    def __init__(self, mode: str = "follow") -> None:
        self.mode = mode
        self.sessions: list[str | None] = []
        self.prompts: list[str] = []
        self.resets = 0
        self._lock = threading.Lock()

    def infer(self, obs: dict) -> dict:
        with self._lock:
            self.sessions.append(obs.get("session_id"))
            self.prompts.append(obs.get("prompt"))
        state = np.asarray(obs["state"], dtype=np.float32).reshape(-1)
        ramp = np.arange(H, dtype=np.float32)[:, None] * 0.002
        actions = state[None, :] + ramp
        if self.mode == "nan":
            actions[10, 2] = np.nan
        elif self.mode == "inf":
            actions[3, 0] = np.inf
        elif self.mode == "limits":
            actions[:, 1] = 1.7 + np.arange(H) * 0.01  # joint2 limits are [-1.8, 1.8]
        elif self.mode == "far":
            actions += 0.6  # within limits, but a 0.6 rad jump from the state
        elif self.mode == "raise":
            raise RuntimeError("model crashed on purpose")
        return {"actions": actions.astype(np.float32)}

    def reset(self) -> None:
        with self._lock:
            self.resets += 1


@pytest.fixture
def server():
    with run_server_in_thread(ServerOptions(models=("pi05", "groot"))) as handle:
        yield handle


def _scripted_server(mode: str, **options):
    policy = ScriptedPolicy(mode)
    return policy, run_server_in_thread(
        ServerOptions(models=("pi05",), policy=lambda: policy, **options)
    )


def test_trajectories_have_the_configured_joints_timing_and_velocities(
    ros_context, server, tmp_path
):
    def chunks(messages: list) -> list:  # (a loaded machine may hold in between)
        return [m for m in messages if len(m.points) > 1]

    # The timeline without the gentle start's stretch (test_ramp_in.py measures it).
    no_ramp = {"ramp_in_s": 0.0}
    with Rig(ros_context, server.url_template, tmp_path=tmp_path, overrides=no_ramp) as rig:
        wait_until(lambda: len(chunks(rig.snapshot().arm)) >= 3 and rig.snapshot().gripper)
        got = rig.snapshot()
        # OK only while the robot has points ahead (a loaded machine may stall it briefly).
        status = wait_until(
            lambda: (s := rig.last_status()) and s["message"] == "streaming" and s, timeout=15
        )
    assert status["level"] == 0 and status["connected"] == "True"
    assert float(status["latency_p50_ms"]) > 0
    for name in ("frame_processing", "request_to_wire", "image_to_wire"):
        assert float(status[f"{name}_p50_ms"]) > 0
    for msg in chunks(got.arm)[:3]:
        assert list(msg.joint_names) == ["joint1", "joint2", "joint3", "joint4", "joint5", "joint6"]
        tfs = tfs_of(msg)
        assert np.all(np.diff(tfs) > 0)
        np.testing.assert_allclose(np.diff(tfs), DT, atol=1e-6)
        assert tfs[0] >= DT - 1e-6  # first point at least one period ahead
        assert list(msg.points[-1].velocities) == [0.0] * 6
        assert any(v != 0.0 for v in msg.points[0].velocities)
        for point in msg.points:
            assert len(point.positions) == 6 and len(point.velocities) == 6
        assert stamp_of(msg) > t_obs_of(msg)
    assert list(got.gripper[0].joint_names) == ["gripper_joint"]
    # Every chunk also goes to ~/preview with all commanded joints.
    assert list(got.preview[0].joint_names)[-1] == "gripper_joint"
    assert len(got.preview[0].joint_names) == 7


def test_error_replies_are_never_published_and_diagnostics_say_why(ros_context, tmp_path):
    policy, server_cm = _scripted_server("raise")
    with server_cm as srv, Rig(ros_context, srv.url_template, tmp_path=tmp_path) as rig:
        wait_until(lambda: rig.node.counts["error_replies"] >= 2)
        status = wait_until(lambda: (s := rig.last_status()) and s["hold_reason"] and s, timeout=5)
        got = rig.snapshot()
    assert got.arm == [] and got.gripper == [] and got.preview == []
    assert status["hold_reason"] == "error reply from the server: Internal inference error"
    assert status["message"].startswith("holding position") and status["level"] == 1  # WARN


def test_bad_camera_map_fails_at_start_naming_the_entry(ros_context, server, tmp_path):
    bad = tmp_path / "bad_cameras.yaml"
    bad.write_text("base_0_rgb: {topic: /a}\nwrist_rgb: {topic: /b}\n")
    with pytest.raises(CameraMapError) as info:
        Rig(ros_context, server.url_template, overrides={"camera_map": str(bad)}, tmp_path=tmp_path)
    assert "wrist_rgb" in str(info.value) and "left_wrist_0_rgb" in str(info.value)


def test_dry_run_publishes_only_on_preview(ros_context, server, tmp_path):
    with Rig(
        ros_context, server.url_template, overrides={"dry_run": True}, tmp_path=tmp_path
    ) as rig:
        wait_until(lambda: len(rig.snapshot().preview) >= 4)
        got = rig.snapshot()
        # In dry run the node does not even advertise the controllers' topics.
        assert rig.feeder.count_publishers(rig.arm_topic) == 0
        assert rig.feeder.count_publishers(rig.gripper_topic) == 0
    assert got.arm == [] and got.gripper == []
    names = {tuple(m.joint_names) for m in got.preview}
    assert ("joint1", "joint2", "joint3", "joint4", "joint5", "joint6") in names
    assert ("gripper_joint",) in names


def test_reset_service_starts_a_new_session(ros_context, tmp_path):
    policy, server_cm = _scripted_server("follow", needs_session_id=True)
    with server_cm as srv, Rig(ros_context, srv.url_template, tmp_path=tmp_path) as rig:
        wait_until(lambda: len(policy.sessions) >= 2)
        first = policy.sessions[-1]
        client = rig.feeder.create_client(Trigger, f"/{rig.node_name}/reset")
        assert client.wait_for_service(timeout_sec=5)
        future = client.call_async(Trigger.Request())
        response = wait_until(lambda: future.done() and future.result())
        assert response.success and rig.node.session_id in response.message
        wait_until(lambda: policy.resets >= 1)
        wait_until(lambda: policy.sessions[-1] != first)
    assert first is not None and policy.sessions[-1] == rig.node.session_id


def test_enable_service_stops_commanding(ros_context, server, tmp_path):
    with Rig(ros_context, server.url_template, tmp_path=tmp_path) as rig:
        wait_until(lambda: len(rig.snapshot().arm) >= 2)
        client = rig.feeder.create_client(SetBool, f"/{rig.node_name}/enable")
        assert client.wait_for_service(timeout_sec=5)
        future = client.call_async(SetBool.Request(data=False))
        response = wait_until(lambda: future.done() and future.result())
        assert response.success and response.message == "disabled: holding position"
        hold = wait_until(lambda: [m for m in rig.snapshot().arm if len(m.points) == 1])[0]
        status = wait_until(lambda: (s := rig.last_status()) and s["enabled"] == "False" and s)
    assert list(hold.points[0].velocities) == [0.0] * 6
    assert status["message"] == ENABLE_STOP


def test_prompt_topic_replaces_the_prompt(ros_context, tmp_path):
    policy, server_cm = _scripted_server("follow")
    with server_cm as srv, Rig(ros_context, srv.url_template, tmp_path=tmp_path) as rig:
        wait_until(lambda: policy.prompts)
        assert policy.prompts[0] == "stack the blocks"
        rig.publish_prompt("open the drawer")
        wait_until(lambda: policy.prompts[-1] == "open the drawer")


@pytest.mark.slow
def test_reconnects_after_the_server_restarts(ros_context, tmp_path):
    with run_server_in_thread(ServerOptions(models=("pi05",))) as first:
        port = first.port
        rig = Rig(ros_context, first.url_template, tmp_path=tmp_path).__enter__()
        try:
            wait_until(lambda: len(rig.snapshot().arm) >= 2)
            first.stop()
            wait_until(lambda: (s := rig.last_status()) and s["connected"] == "False", timeout=5)
            before = len(rig.snapshot().arm)
            with run_server_in_thread(ServerOptions(models=("pi05",), port=port)):
                wait_until(lambda: len(rig.snapshot().arm) >= before + 3, timeout=15)
                assert rig.node.counts["connection_errors"] >= 1
        finally:
            rig.close()


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["swallow", "freeze"])
def test_a_stalled_server_makes_the_node_hold_warn_reconnect_and_resume(
    ros_context, tmp_path, fault
):
    # swallow: the server reads a request and never answers (a hung model);
    # freeze: it stops reading its socket (a stopped process, a half-open connection).
    overrides = {"request_timeout_s": 2.0}
    with FaultServer() as server:
        rig = Rig(
            ros_context,
            server.url_template,
            overrides=overrides,
            state=[0.0] * 7,
            tmp_path=tmp_path,
        )
        logs: list[str] = []
        rig.feeder.create_subscription(
            Log, "/rosout", lambda m: m.name == rig.node_name and logs.append(m.msg), 100
        )
        with rig:
            wait_until(lambda: len(rig.snapshot().arm) >= 2)
            server.add_faults(fault)
            connections = server.connections
            # The robot stands still for want of a chunk: WARN on /diagnostics, not OK.
            stalled = wait_until(
                lambda: [
                    s
                    for s in rig.statuses()
                    if s["level"] == 1 and s["message"].startswith("stalled, waiting for a chunk")
                ],
                timeout=15,
            )[0]
            # The request times out: the node drops the connection, opens a new one and
            # streams again.
            wait_until(lambda: server.connections > connections, timeout=10)
            before = len(rig.snapshot().arm)
            wait_until(lambda: len(rig.snapshot().arm) >= before + 2, timeout=15)
            resumed = wait_until(lambda: (s := rig.last_status()) and s["level"] == 0 and s)
    assert "a request has been in flight for" in stalled["message"]
    assert int(resumed["connection_errors"]) >= 1 and resumed["message"] == "streaming"
    # Said in the node's log (the connection logs through the node's logger, to /rosout).
    assert any(
        "lost: request timed out after 2 s (request_timeout_s); reconnecting" in line
        for line in logs
    ), logs
    assert any("holding position: connection lost during a request" in line for line in logs)
    # The robot was told to hold: a one-point trajectory on the arm controller.
    assert any(len(m.points) == 1 for m in rig.snapshot().arm)


def test_groot_chunks_go_to_each_action_group(ros_context, server, tmp_path):
    no_ramp = {"ramp_in_s": 0.0}  # each action one period after the last
    with Rig(
        ros_context, server.url_template, model="groot", tmp_path=tmp_path, overrides=no_ramp
    ) as rig:
        wait_until(lambda: len(rig.snapshot().arm) >= 2 and rig.snapshot().gripper)
        got = rig.snapshot()
    assert list(got.arm[0].joint_names) == ["joint1", "joint2", "joint3", "joint4", "joint5"]
    assert list(got.gripper[0].joint_names) == ["gripper_joint"]
    np.testing.assert_allclose(np.diff(tfs_of(got.arm[0])), 1.0 / 30.0, atol=1e-6)


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_destroying_the_node_leaks_no_threads_or_sockets(ros_context, server, tmp_path):
    threads_before = {t.ident for t in threading.enumerate()}
    fds_before = _open_fds()
    with Rig(ros_context, server.url_template, tmp_path=tmp_path) as rig:
        wait_until(lambda: rig.snapshot().arm)
    wait_until(lambda: server.stats.open_connections == 0, timeout=5)
    leaked = [t for t in threading.enumerate() if t.ident not in threads_before and t.is_alive()]
    assert [t.name for t in leaked if not t.name.startswith("ThreadPoolExecutor")] == []
    # DDS keeps a few descriptors per participant; sockets of ours would add more each run.
    assert _open_fds() <= fds_before + 2


def _console_command(*params: str) -> list[str]:
    """policy_node as ``ros2 run`` starts it, with config/pi05.yaml and ``-p`` params."""
    config = Path(__file__).resolve().parents[1] / "config" / "pi05.yaml"
    command = [sys.executable, "-m", "relay_ros.node.policy_node", "--ros-args"]
    command += ["--params-file", str(config)]
    for param in params:
        command += ["-p", param]
    return command


def test_console_script_reports_a_config_error_in_one_line(tmp_path):
    command = _console_command(
        f"camera_map:={tmp_path / 'missing.yaml'}", "policy_url:=ws://127.0.0.1:9/{model}"
    )
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2, done.stderr
    assert "CameraMapError: camera map" in done.stderr and "missing.yaml" in done.stderr
    assert "Traceback" not in done.stderr


def test_the_startup_heap_is_frozen_out_of_the_collectors_scans() -> None:
    # main() calls this before spinning: a full collection then scans only what the
    # loop allocated since, not every object of rclpy, NumPy and OpenCV.
    try:
        freeze_startup_heap()
        assert gc.get_freeze_count() > 10_000
        assert len(gc.get_objects()) < 1_000
        loop_objects = [[i] for i in range(5_000)]  # what the loop allocates later
        assert len(gc.get_objects()) >= 5_000
        del loop_objects
    finally:
        gc.unfreeze()


def test_thread_priority_runs_the_node_process_under_sched_fifo(server, tmp_path):
    # In its own process, as main() runs it: every thread of the process is raised.
    refusal = fifo_refusal(7)
    if refusal is not None:
        pytest.skip(f"this process may not use SCHED_FIFO: {refusal}")
    camera_map = tmp_path / "cameras.yaml"
    camera_map.write_text("base_0_rgb: {topic: /thread_priority_test/image_raw}\n")
    command = _console_command(
        f"camera_map:={camera_map}", f"policy_url:={server.url_template}", "thread_priority:=7"
    )
    log = tmp_path / "node.log"
    with log.open("w") as out:
        node = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    try:

        def policies() -> set[tuple[int, int]]:
            found = set()
            for task in os.listdir(f"/proc/{node.pid}/task"):
                with contextlib.suppress(ProcessLookupError):  # a thread that ended
                    found.add(
                        (
                            os.sched_getscheduler(int(task)),
                            os.sched_getparam(int(task)).sched_priority,
                        )
                    )
            return found

        wait_until(lambda: "SCHED_FIFO priority 7" in log.read_text(), timeout=30)
        assert policies() == {(os.SCHED_FIFO, 7)}
        assert "refused" not in log.read_text()
    finally:
        node.send_signal(signal.SIGINT)
        node.wait(timeout=30)


def test_diagnostics_say_when_the_node_runs_at_normal_priority(ros_context, server, tmp_path):
    with Rig(ros_context, server.url_template, tmp_path=tmp_path) as rig:
        status = wait_until(lambda: rig.last_status())
        assert status["thread priority"] == "normal scheduling (thread_priority 0)"
        assert os.sched_getscheduler(rig._thread.native_id) == os.SCHED_OTHER
