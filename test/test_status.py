"""``relay-ros status``: every policy_node on the domain, from /diagnostics.

The table and the JSON from statuses with known values (levels, a node fallen silent),
then the real program in a subprocess against running policy_nodes (one streaming,
one unconfigured): what it prints once, its exit code, and the live view stopped
with Ctrl-C.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest
from helpers import scaled, wait_until
from node_rig import Rig

from relay_ros.node.status import PolicyStatus, as_json, format_table, policy_status
from relay_ros.server import ServerOptions, run_server_in_thread


def _status(node: str, **changes) -> PolicyStatus:
    values = {
        "node": node,
        "state": "active",
        "level": "OK",
        "message": "streaming",
        "server": "ws://127.0.0.1:8000/pi05",
        "connected": True,
        "chunks": 12,
        "latency_ms": 81.5,
        "observation_age_s": 0.05,
        "hold_reason": "",
        "received": 100.0,
    }
    values.update(changes)
    return PolicyStatus(**values)


def test_a_policy_nodes_status_is_read_and_others_are_not():
    values = {
        "node": "/robot1/policy_node",
        "lifecycle_state": "inactive",
        "server": "ws://h:1/pi05",
        "connected": "True",
        "chunks_published": "3",
        "latency_p50_ms": "",
        "observation_age_s": "0.250",
        "hold_reason": "inactive (lifecycle): activate the node to command",
    }
    status = policy_status("policy_node: policy", 1, "inactive (lifecycle)", values, 5.0)
    assert status == PolicyStatus(
        node="/robot1/policy_node",
        state="inactive",
        level="WARN",
        message="inactive (lifecycle)",
        server="ws://h:1/pi05",
        connected=True,
        chunks=3,
        latency_ms=None,
        observation_age_s=0.25,
        hold_reason="inactive (lifecycle): activate the node to command",
        received=5.0,
    )
    assert policy_status("sim_arm: controllers", 0, "ok", {}, 5.0) is None
    # A status without the node's name falls back to the status name.
    assert policy_status("policy_node: policy", 0, "", {}, 0.0).node == "/policy_node"


def test_the_table_and_the_json_mark_a_silent_node_stale():
    statuses = [
        _status("/robot2/policy_node", level="WARN", hold_reason="disabled through ~/enable"),
        _status("/robot1/policy_node", received=90.0, message="streaming"),
    ]
    table = format_table(statuses, now=100.5, width=200).splitlines()
    assert table[0].split() == [
        "NODE", "STATE", "LEVEL", "SERVER", "CHUNKS", "LATENCY", "OBS", "AGE", "WHY",
    ]  # fmt: skip
    assert table[1].split()[:8] == [
        "/robot1/policy_node", "active", "STALE", "ws://127.0.0.1:8000/pi05", "(up)", "12",
        "81.5", "ms",
    ]  # fmt: skip
    assert table[1].endswith("no /diagnostics for 10 s; last: streaming")
    assert table[2].split()[2] == "WARN" and table[2].endswith("disabled through ~/enable")
    items = as_json(statuses, now=100.5)
    assert [(i["node"], i["level"], i["age_s"]) for i in items] == [
        ("/robot1/policy_node", "STALE", 10.5),
        ("/robot2/policy_node", "WARN", 0.5),
    ]
    assert format_table([], now=0.0).startswith("no policy_node on this ROS domain")


def _status_cli(*args: str, **kwargs) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "relay_ros.cli", "status", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        **kwargs,
    )


@pytest.mark.ros
def test_status_shows_every_policy_node_on_the_domain(ros_context, tmp_path):
    with run_server_in_thread(ServerOptions(models=("pi05",))) as server:
        # A dry run: chunks and latency as on a robot, nothing for the controllers.
        streaming = Rig(
            ros_context, server.url_template, tmp_path=tmp_path, overrides={"dry_run": True}
        )
        waiting = Rig(
            ros_context, server.url_template, tmp_path=tmp_path, overrides={"autostart": False}
        )
        with streaming, waiting:
            wait_until(lambda: streaming.node.counts["chunks_published"] >= 2, timeout=15)
            wait_until(lambda: waiting.last_status(), timeout=10)
            # A new process on a loaded machine takes seconds to discover the nodes.
            proc = _status_cli("--once", "--json", "--wait", str(scaled(10.0)))
            out, err = proc.communicate(timeout=scaled(60))
            assert proc.returncode == 0, err
            nodes = {item["node"]: item for item in json.loads(out)}
            active = nodes[f"/{streaming.node_name}"]
            assert active["state"] == "active" and active["connected"] is True
            assert active["chunks"] >= 2 and active["latency_ms"] > 0
            assert active["observation_age_s"] is not None
            assert active["server"] == server.url("pi05")
            idle = nodes[f"/{waiting.node_name}"]
            assert (idle["state"], idle["level"], idle["server"]) == ("unconfigured", "WARN", "")
            assert idle["message"].startswith("unconfigured: 'ros2 lifecycle set ")

            # The live view redraws until Ctrl-C, then exits 0.
            live = _status_cli()
            lines: list[str] = []
            names = (f"/{streaming.node_name}", f"/{waiting.node_name}")

            def read_until_both_rows() -> bool:
                lines.append(live.stdout.readline())
                table = "".join(lines).rsplit("relay-ros status: ROS_DOMAIN_ID=", 1)[-1]
                return all(name in table for name in names)

            wait_until(read_until_both_rows, timeout=30)
            live.send_signal(signal.SIGINT)
            _, err = live.communicate(timeout=scaled(30))
            assert live.returncode == 0, err
            assert "".join(lines).count("relay-ros status: ROS_DOMAIN_ID=") >= 1
