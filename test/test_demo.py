"""Tests of the demo (relay_ros.demo, launch/demo.launch.py).

The fast tests cover the parts without ROS: arguments, node parameters, the launch
plan, the server subprocess, the summary table and the PNG from hand-built series.
The slow ones: the server subprocess dies with a killed demo, and Ctrl-C on the CLI;
the real loop in-process (rclpy) is in test_demo_loop.py.
"""

from __future__ import annotations

import ast
import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
import yaml
from helpers import wait_until

from relay_ros.demo import (
    DEMO_LAUNCH_ARGUMENTS,
    CommandedChunk,
    DemoArgumentError,
    DemoProgress,
    DemoResult,
    ServerProcess,
    demo_launch_plan,
    demo_node_parameters,
    format_progress,
    format_summary,
    main,
    plot_demo,
    run_demo,
    server_command,
    stall_intervals,
)
from relay_ros.demo.plot import zoomed_switch
from relay_ros.demo.policy_settings import SMOOTHINGS, DemoPolicy
from relay_ros.node.param_spec import flatten_parameters
from relay_ros.server.policy_robot import VISUAL_MAX_SPEED
from relay_ros.sim.controller_measures import BoundaryStep
from relay_ros.sim.motion_measures import SwitchSummary
from relay_ros.sim.robot import SPEED_SHARE
from relay_ros.sim.task import TaskMeasures

REPO = Path(__file__).resolve().parents[1]
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _pi05_limits() -> dict[str, tuple[float, float]]:
    with open(REPO / "config" / "pi05.yaml", encoding="utf-8") as stream:
        params = yaml.safe_load(stream)["/**"]["ros__parameters"]
    return {
        joint: (float(limit["min_position"]), float(limit["max_position"]))
        for joint, limit in params["joint_limits"].items()
    }


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # A zombie still answers kill(0); it is gone once reaped, which Popen.wait does.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
    except OSError:
        return True


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(entry.name))
    return found


def _result(mode: str, *, stall: float, latencies_ms: list[float]) -> DemoResult:
    """A hand-built result: two joints on a sine, chunks of 0.5 s every 0.4 s (or 0.6 s)."""
    times = np.arange(-0.5, 4.0, 0.01)
    followed = np.stack([0.3 * np.sin(times), 0.1 * np.cos(times)], axis=1)
    period = 0.4 if mode == "early" else 0.6
    chunks = []
    for k in range(int(4.0 / period)):
        t = k * period + np.arange(1, 26) * 0.02
        chunks.append(
            CommandedChunk(
                stamp=k * period,
                times=t,
                positions=np.stack([0.3 * np.sin(t), 0.1 * np.cos(t)], axis=1),
            )
        )
    return DemoResult(
        model="pi05",
        request_mode=mode,
        latency_ms=80.0,
        jitter_ms=20.0,
        duration_s=4.0,
        execute_horizon=25,
        dt=0.02,
        requests=10,
        chunks_received=10,
        chunks_published=10,
        refusals=0,
        error_replies=0,
        latencies_s=np.asarray(latencies_ms) / 1000.0,
        stall_time_s=stall,
        stall_events=3 if stall else 0,
        boundary_steps={
            "arm_controller": np.array([1.0, 1.2, 0.9]),
            "gripper_controller": np.zeros(0),
        },
        action_age_p50_s=0.35,
        action_age_max_s=0.61,
        accepted=20,
        rejected=0,
        rejection_reasons={},
        joint_names=("joint1", "joint4"),
        joint_limits={"joint1": (-2.9, 2.9), "joint4": (-3.0, 0.1)},
        times=times,
        commanded=followed.copy(),
        followed=followed,
        switch_times=np.array([0.4, 0.8, 1.2]),
        chunks=chunks,
        task=TaskMeasures(errors_m=np.array([0.01, 0.02, 0.025, 0.02, 0.1]), on_target_m=0.03),
        jerk_rms=1234.4,
        startup_s=0.0834,
        first_point_distance=0.0012,
        switches=SwitchSummary(9, 2, 0.004, 0.001, 0.002, 0.15, 0.3),
        smoothing="splice (fade adds <= 5 rad/s^2)",
        request_lead_s=0.081,
        tracking_lag_s=0.04,
        ages=0.1 + (times % period),
        steps=[
            BoundaryStep(t, 0.01, 0.02, 0.5, t + 0.02, 0.001 * k, 0.1, 0.004, False)
            for k, t in enumerate((0.4, 0.8, 1.2))
        ],
        task_joints=("joint1",),
    )


# --------------------------------------------------------------------------- arguments


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--duration", "0"], "argument --duration: '0' is not a positive number of seconds"),
        (["--duration", "soon"], "argument --duration: 'soon' is not a number of seconds"),
        (
            ["--sync-duration", "-1"],
            "argument --sync-duration: '-1' is not a positive number of seconds",
        ),
        (
            ["--latency-ms", "-5"],
            "argument --latency-ms: '-5' is not a number of milliseconds >= 0",
        ),
        (["--jitter-ms", "nan"], "argument --jitter-ms: 'nan' is not a number of milliseconds"),
        (["--seed", "-1"], "argument --seed: '-1' is not an integer >= 0"),
        (["--chunk-noise", "x"], "argument --chunk-noise: 'x' is not a number"),
        (
            ["--fault", "loose-cable"],
            "argument --fault: invalid choice: 'loose-cable' (choose from swap-cameras, "
            "swap-red-blue)",
        ),
        (
            ["--model", "gpt"],
            "argument --model: invalid choice: 'gpt' (choose from pi05, pi0, groot)",
        ),
    ],
)
def test_cli_argument_errors(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    # argparse >= 3.12.8 quotes choices differently; compare without quotes there.
    assert message.replace("'", "") in err.replace("'", "")


def test_run_demo_argument_errors():
    with pytest.raises(DemoArgumentError) as info:
        run_demo("gpt", 1.0)
    assert str(info.value) == "model 'gpt' is not one of ['pi05', 'pi0', 'groot']"
    with pytest.raises(DemoArgumentError) as info:
        run_demo("pi05", 0.0)
    assert str(info.value) == "duration_s 0.0 is not a positive number of seconds"
    with pytest.raises(DemoArgumentError) as info:
        run_demo("pi05", 1.0, request_mode="async")
    assert str(info.value) == "request_mode 'async' is not one of ['early', 'sync']"
    with pytest.raises(DemoArgumentError) as info:
        run_demo("pi05", 1.0, latency_ms=-1.0)
    assert str(info.value) == "latency_ms -1.0 is not a finite number of ms >= 0"
    with pytest.raises(DemoArgumentError) as info:
        run_demo("pi05", 1.0, fault="swap-wires")
    assert str(info.value) == "fault 'swap-wires' is not one of ['swap-cameras', 'swap-red-blue']"
    for kwargs, message in [
        ({"kind": "random"}, "policy 'random' is not one of ['visual', 'flow']"),
        (
            {"smoothing": "spline"},
            "smoothing 'spline' is not one of ['auto', 'none', 'splice', 'prefix', 'crossfade', "
            "'lerobot_average', 'act_ensemble']",
        ),
        (
            {"smoothing": "prefix", "server_prefix": False},
            "smoothing 'prefix' needs a server that advertises action_prefix; leave "
            "server_prefix unset or True",
        ),
        ({"chunk_noise": -1.0}, "chunk_noise -1.0 is not a finite number >= 0"),
        ({"seed": -2}, "seed -2 is not an integer >= 0"),
    ]:
        with pytest.raises(DemoArgumentError) as info:
            DemoPolicy(**kwargs)
        assert str(info.value) == message


def test_demo_policy_offers_the_nodes_smoothings_on_the_seeds_server():
    from relay_ros.pipeline.smoothing import SMOOTHING_CHOICES

    assert SMOOTHINGS == SMOOTHING_CHOICES
    default = DemoPolicy()
    assert default.smoothing == "auto" and not default.advertises_prefix  # as the seeds'
    assert DemoPolicy(smoothing="prefix").advertises_prefix  # it needs the extension
    assert DemoPolicy(smoothing="splice", server_prefix=True).advertises_prefix
    assert "server without action_prefix (as the seeds')" in default.label()


# --------------------------------------------------------------------------- what starts


@pytest.mark.parametrize("model", ["pi05", "groot"])
def test_node_parameters_match_the_model_config(model):
    with open(REPO / "config" / f"{model}.yaml", encoding="utf-8") as stream:
        node = flatten_parameters(yaml.safe_load(stream)["/**"]["ros__parameters"])
    with open(REPO / "config" / f"{model}_cameras.yaml", encoding="utf-8") as stream:
        camera_map = yaml.safe_load(stream)

    params = demo_node_parameters(model, port=8123, request_mode="sync")
    assert sorted(params) == ["policy_node", "sim_arm", "sim_cameras"]

    assert params["policy_node"] == [
        str(REPO / "config" / f"{model}.yaml"),
        {
            "policy_url": f"ws://127.0.0.1:8123/{model}",
            "request_mode": "sync",
            "smoothing": "auto",  # the node's choice for the server it meets
        },
    ]
    blended = demo_node_parameters(model, policy=DemoPolicy(smoothing="crossfade", seed=4))
    assert blended["policy_node"][1]["smoothing"] == "crossfade"
    assert blended["sim_cameras"][0]["seed"] == 4

    cameras = params["sim_cameras"][0]
    topics = {cameras[f"cameras.{name}.topic"]: name for name in cameras["camera_names"]}
    assert sorted(topics) == sorted(entry["topic"] for entry in camera_map.values())
    for entry in camera_map.values():
        name = topics[entry["topic"]]
        expected = "compressed" if entry["topic"].endswith("/compressed") else "raw"
        assert cameras[f"cameras.{name}.format"] == expected
        assert (cameras[f"cameras.{name}.width"], cameras[f"cameras.{name}.height"]) == (320, 240)
    assert {c["cameras." + n + ".format"] for n in cameras["camera_names"] for c in [cameras]} == {
        "raw",
        "compressed",
    }

    arm = params["sim_arm"][0]
    assert arm["controller_names"] == ["arm_controller", "gripper_controller"]
    assert arm["joint_states_topic"] == node["joint_states_topic"]
    for controller, output in zip(arm["controller_names"], node["output_names"]):
        assert arm[f"controllers.{controller}.joints"] == node[f"outputs.{output}.joints"]
        assert arm[f"controllers.{controller}.topic"] == node[f"outputs.{output}.topic"]
        initial = arm[f"controllers.{controller}.initial_positions"]
        for joint, value in zip(node[f"outputs.{output}.joints"], initial):
            lower = node[f"joint_limits.{joint}.min_position"]
            upper = node[f"joint_limits.{joint}.max_position"]
            assert lower <= value <= upper
    assert arm["controllers.arm_controller.topic"] == "arm_controller/joint_trajectory"
    assert arm["controllers.gripper_controller.topic"] == "gripper_controller/joint_trajectory"


def test_node_parameter_errors():
    with pytest.raises(DemoArgumentError) as info:
        demo_node_parameters("pi05", port=0)
    assert str(info.value) == "port 0 is not an integer in [1, 65535]"
    with pytest.raises(DemoArgumentError) as info:
        demo_node_parameters("pi05", request_mode="later")
    assert str(info.value) == "request_mode 'later' is not one of ['early', 'sync']"


def test_server_command():
    assert server_command(
        "groot",
        port=0,
        latency_ms=80,
        jitter_ms=12.5,
        port_file=Path("/tmp/p"),
        executable=("python", "-m", "relay_ros.server"),
    ) == [
        "python",
        "-m",
        "relay_ros.server",
        "--host",
        "127.0.0.1",
        "--port",
        "0",
        "--model",
        "groot",
        "--latency-ms",
        "80",
        "--jitter-ms",
        "12.5",
        "--log-level",
        "WARNING",
        "--synthetic",
        "visual",
        "--chunk-noise",
        "1",
        "--seed",
        "0",
        "--port-file",
        "/tmp/p",
    ]  # fmt: skip  (a server like the seeds': no action_prefix)
    flow = server_command(
        "pi05", policy=DemoPolicy(kind="flow", chunk_noise=0.5, smoothing="crossfade", seed=3)
    )
    assert flow[flow.index("--synthetic") :] == [
        "--synthetic", "flow", "--chunk-noise", "0.5", "--seed", "3",
    ]  # fmt: skip
    prefix = server_command("pi05", policy=DemoPolicy(smoothing="prefix"))
    assert prefix[-1] == "--action-prefix"
    # A layout's server moves like that layout's robot (config/droid.yaml: a Franka,
    # 2.175 rad/s, joint 4 in -3.07..-0.07, the gripper in 0..1), not the simulated arm.
    # The share of a joint's limit is the reference visual plan's 1.6 of the simulated
    # arm's 2.5 rad/s (kept apart so that the launch helpers load without the server).
    assert SPEED_SHARE * 2.5 == pytest.approx(VISUAL_MAX_SPEED)
    droid = server_command("pi05", policy=DemoPolicy(layout="droid"))
    assert droid[droid.index("--layout") :] == [
        "--layout", "droid",
        "--max-speed=1.392,1.392,1.392,1.392,1.6704,1.6704,1.6704,1.28",
        "--rest-pose=0,0,0,-1.5708,0,1.8675,0,0.5",
    ]  # fmt: skip
    with pytest.raises(DemoArgumentError) as info:
        server_command("pi05", jitter_ms=float("inf"))
    assert str(info.value) == "jitter_ms inf is not a finite number of ms >= 0"


def test_launch_plan_from_string_arguments():
    plan = demo_launch_plan({"model": "groot", "port": "9001", "latency_ms": "120"})
    assert plan.server_cmd[0] == "relay-policy-server"
    assert plan.server_cmd[plan.server_cmd.index("--port") + 1] == "9001"
    assert plan.server_cmd[plan.server_cmd.index("--latency-ms") + 1] == "120"
    assert plan.server_cmd[plan.server_cmd.index("--model") + 1] == "groot"
    assert plan.node_parameters == demo_node_parameters("groot", port=9001)
    assert [a.name for a in DEMO_LAUNCH_ARGUMENTS] == [
        "model", "port", "latency_ms", "jitter_ms", "request_mode", "layout", "lora",
    ]  # fmt: skip
    with pytest.raises(DemoArgumentError) as info:
        demo_launch_plan({"port": "eighty"})
    assert str(info.value) == "launch argument 'port' is 'eighty'; expected an integer"
    with pytest.raises(DemoArgumentError) as info:
        demo_launch_plan({"speed": "1"})
    assert str(info.value) == (
        "unknown demo launch arguments ['speed']; expected some of "
        "['jitter_ms', 'latency_ms', 'layout', 'lora', 'model', 'port', 'request_mode']"
    )


def test_launch_plan_layout_and_lora_start_what_the_demo_cli_starts():
    # layout:=droid lora:=so100_towels: the server serves both, the node speaks the
    # layout's config and selects the adapter, as python -m relay_ros.demo --layout droid
    # --lora so100_towels does (the same DemoPolicy).
    plan = demo_launch_plan({"layout": "droid", "lora": "so100_towels", "port": "9002"})
    policy = DemoPolicy(layout="droid", lora="so100_towels")
    assert plan.server_cmd == server_command("pi05", port=9002, policy=policy)
    command = plan.server_cmd
    assert command[command.index("--layout") + 1] == "droid"
    assert command[command.index("--lora") + 1] == "so100_towels"
    assert any(arg.startswith("--max-speed=") for arg in command)  # the layout's robot
    assert plan.node_parameters == demo_node_parameters("pi05", port=9002, policy=policy)
    params_file, overrides = plan.node_parameters["policy_node"]
    assert params_file.endswith("config/droid.yaml") and overrides["lora"] == "so100_towels"
    # Empty: the model's own format and the base model, as before.
    plain = demo_launch_plan({"layout": "", "lora": ""})
    assert "--layout" not in plain.server_cmd and "--lora" not in plain.server_cmd
    assert "lora" not in plain.node_parameters["policy_node"][1]
    for arguments, message in [
        (
            {"layout": "libero"},
            "launch argument 'layout' is 'libero'; expected one of ['droid', 'aloha'] or "
            "empty (the model's own format)",
        ),
        (
            {"lora": " so100_towels"},
            "launch argument 'lora' is ' so100_towels'; expected an adapter name as the "
            "server lists it in lora_adapters, e.g. lora:=so100_towels",
        ),
    ]:
        with pytest.raises(DemoArgumentError) as info:
            demo_launch_plan(arguments)
        assert str(info.value) == message


def test_launch_file_only_wires_relay_ros_demo():
    """launch/launch_ros are not importable here: check the file statically."""
    source = (REPO / "launch" / "demo.launch.py").read_text(encoding="utf-8")
    tree = ast.parse(source)
    imported = {
        (node.module, alias.name)
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }
    assert ("relay_ros.demo", "demo_launch_plan") in imported
    assert ("relay_ros.demo", "DEMO_LAUNCH_ARGUMENTS") in imported
    assert ("launch.actions", "ExecuteProcess") in imported
    assert ("launch_ros.actions", "Node") in imported
    functions = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    assert "generate_launch_description" in functions
    # The executables it starts exist as console scripts.
    setup = (REPO / "setup.py").read_text(encoding="utf-8")
    for executable in demo_launch_plan({}).node_parameters:
        assert f'"{executable} = ' in setup
    assert '"relay-policy-server = ' in setup


# --------------------------------------------------------------------------- server process


def test_server_process_listens_and_is_gone_after_stop():
    import socket

    with ServerProcess("pi05", latency_ms=0, jitter_ms=0) as server:
        pid = server.pid
        assert server.running()
        assert server.url() == f"ws://127.0.0.1:{server.port}/pi05"
        with socket.create_connection(("127.0.0.1", server.port), timeout=5):
            pass
    assert pid is not None and _gone(pid)
    assert not server.running()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux")
def test_server_dies_with_a_killed_demo(tmp_path):
    script = (
        "import sys, time\n"
        "from relay_ros.demo import ServerProcess\n"
        "server = ServerProcess('pi05').start()\n"
        "print(server.pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE)
    try:
        assert parent.stdout is not None
        server_pid = int(parent.stdout.readline())
        assert not _gone(server_pid)
        parent.kill()  # SIGKILL: no cleanup code runs in the parent
        parent.wait(10)
        wait_until(lambda: _gone(server_pid), 10, "the server ending with its demo")
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()


# --------------------------------------------------------------------------- presentation


def test_format_progress():
    line = format_progress(DemoProgress("early", 6.52, 20.0, 13, 0.0812, 0.0))
    assert line == "early   6.5/20.0 s  chunks  13  latency p50 81 ms  stall 0.000 s"
    line = format_progress(DemoProgress("sync", 0.0, 20.0, 0, None, 0.0, starting=True))
    assert line == "sync   starting: waiting for the first chunk ..."


def test_summary_table_puts_runs_side_by_side():
    early = _result("early", stall=0.0, latencies_ms=[70, 80, 90, 100])
    sync = _result("sync", stall=0.5, latencies_ms=[80, 80, 80, 80])
    text = format_summary([early, sync])
    lines = text.splitlines()
    assert lines[0] == (
        "relay_ros demo: pi05, simulated inference 80 ms +/- 20 ms, dt 20.0 ms, arm tracking "
        "lag 40 ms"
    )
    assert lines[1] == "smoothing: splice (fade adds <= 5 rad/s^2)"
    assert lines[2] == (
        "visual policy, chunk noise 1, server without action_prefix (as the seeds'), "
        "smoothing auto, seed 0"
    )
    assert "same world" in lines[3]
    assert lines[5].split() == ["early", "(4", "s)", "sync", "(4", "s)"]
    rows = {}
    for line in lines[7:]:
        label, *cells = re.split(r"\s{2,}", line.strip())
        rows[label] = " ".join(cells).split()
    assert rows["latency p50 / p99 [ms]"] == ["85", "/", "100", "80", "/", "80"]
    assert rows["stall time [s]"] == ["0.000", "(0.0%)", "0.500", "(12.5%)"]
    assert rows["start-up: first request -> chunk [ms]"] == ["83", "83"]
    assert rows["start-up: refusals before it"] == ["0", "0"]
    assert rows["start-up: first point from state [rad]"] == ["0.001", "0.001"]
    assert rows["switches moving / at rest"] == ["9", "/", "2", "9", "/", "2"]
    assert rows["smoothing"] == ["splice", "splice"]
    assert rows["execute horizon / request lead [ms] (end)"] == ["25", "/", "81"] * 2
    assert rows["switch C0 / typical step med / p95 (moving)"] == ["0.25", "/", "0.50"] * 2
    assert rows["switch C1 med [rad/s] (moving)"] == ["0.15", "0.15"]
    assert rows["observation age p50 / max [ms]"] == ["350", "/", "610", "350", "/", "610"]
    assert rows["rejected messages"] == ["0", "0"]
    assert rows["requests"] == ["10", "10"]
    assert rows["target error med / p90 [cm]"] == ["2.0", "/", "7.0", "2.0", "/", "7.0"]
    assert rows["time on target"] == ["80%", "80%"]
    assert rows["jerk RMS [rad/s^3] (real sample times)"] == ["1234", "1234"]
    for label in ("chunks (received/published)", "stall events", "refused by the node (whole run)"):
        assert label in rows
    with pytest.raises(DemoArgumentError) as info:
        format_summary([])
    assert str(info.value) == "results is empty; expected at least one DemoResult"


def test_limit_violations_and_stall_intervals():
    result = _result("sync", stall=0.5, latencies_ms=[80])
    assert result.limit_violations() == []
    expected = [(k * 0.6 + 0.5, (k + 1) * 0.6) for k in range(5)] + [(3.5, 4.0)]
    np.testing.assert_allclose(stall_intervals(result), expected)
    result.chunks[2].positions[3, 1] = 0.25
    assert result.limit_violations() == [
        "joint 'joint4' was commanded in [-0.1000, 0.2500]; limits are [-3, 0.1]"
    ]


def test_plot_writes_a_png(tmp_path):
    results = [
        _result("early", stall=0.0, latencies_ms=[70, 80, 90, 100]),
        _result("sync", stall=0.5, latencies_ms=[75, 80, 85]),
    ]
    path = plot_demo(results, tmp_path / "out" / "demo.png")
    assert path == tmp_path / "out" / "demo.png"
    assert path.read_bytes()[:8] == PNG_SIGNATURE
    single = plot_demo(results[:1], tmp_path / "single.png")
    assert single.read_bytes()[:8] == PNG_SIGNATURE
    # The zoom shows the moving switch with the median position gap.
    assert zoomed_switch(results[0]) == pytest.approx(0.8)


# --------------------------------------------------------------------------- Ctrl-C


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_ctrl_c_stops_server_and_nodes(tmp_path):
    proc = subprocess.Popen(
        [sys.executable, "-m", "relay_ros.demo", "--duration", "60", "--output-dir", str(tmp_path)],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    err = bytearray()

    def drain() -> None:
        assert proc.stderr is not None
        while chunk := proc.stderr.read1(4096):
            err.extend(chunk)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        wait_until(lambda: b"chunks" in err or proc.poll() is not None, 60, "the demo streaming")
        assert b"chunks" in err, err.decode(errors="replace")
        servers = _children(proc.pid)
        assert servers, "the server subprocess is not running"
        proc.send_signal(signal.SIGINT)
        assert proc.wait(30) == 130
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    reader.join(5)
    text = err.decode(errors="replace")
    assert "interrupted: server, executor and nodes stopped" in text
    for pid in servers:
        wait_until(lambda pid=pid: _gone(pid), 5, f"process {pid} ending")
    # Nothing was half-written: no run finished, so no table and no PNG.
    assert proc.stdout is not None and proc.stdout.read() == b""
    assert not list(tmp_path.glob("*.png"))
