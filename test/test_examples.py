"""``examples/demo.py``: the seeds' "run python examples/demo.py" against real servers.

The script runs as a user runs it (a subprocess, ``WALLE_URL`` in its environment)
against reference servers with a known inference time: the route it reports (the
direct one offered by the proxied server, or the proxied one with ``WALLE_DIRECT=0``),
the metadata, a progress line per request and the split of the round trip into
server and network time.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import scaled

from relay_ros.server import ServerOptions, run_server_in_thread

DEMO = Path(__file__).resolve().parents[1] / "examples" / "demo.py"
LATENCY_MS = 40.0


def _run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(DEMO), *args],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=scaled(120),
        check=False,
    )


def _p50(out: str, row: str) -> float:
    match = re.search(rf"^{row}\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)$", out, re.MULTILINE)
    assert match, out
    return float(match.group(1))


@pytest.mark.slow
def test_the_demo_splits_network_and_server_time_and_names_the_route(tmp_path):
    with (
        run_server_in_thread(ServerOptions(models=("pi05",), latency_ms=LATENCY_MS)) as direct,
        run_server_in_thread(
            ServerOptions(models=("pi05",), direct_url=direct.url("pi05"))
        ) as proxy,
    ):
        env = {"WALLE_URL": proxy.url_template, "WALLE_DIRECT": "1"}
        done = _run(env, "pi05", "-n", "6")
        assert done.returncode == 0, done.stderr
        out = done.stdout
        assert f"connecting to {proxy.url('pi05')}" in out
        assert f"route: direct: {direct.url('pi05')}" in out
        assert "  action_horizon: 50" in out and "  model: 'pi05'" in out
        assert f"  direct_url: '{direct.url('pi05')}'" in out
        progress = [line for line in done.stderr.splitlines() if line.startswith("[")]
        assert len(progress) == 6 and progress[-1].startswith("[  6/6] round trip")
        # The server's own time is the simulated inference; the rest is the network.
        assert _p50(out, "server") >= LATENCY_MS
        assert _p50(out, "round trip") >= _p50(out, "server")
        for line in progress:
            total, network, server = (float(x) for x in re.findall(r"([\d.]+) ms", line))
            assert server >= LATENCY_MS and abs(total - (network + server)) <= 0.15, line
        assert "6 requests, 452.0 kB each" in out

        proxied = _run({**env, "WALLE_DIRECT": "0"}, "pi05", "-n", "2")
        assert proxied.returncode == 0, proxied.stderr
        assert (
            f"route: proxied: WALLE_DIRECT=0 (the server offers {direct.url('pi05')})"
            in proxied.stdout
        )


def test_the_demo_without_walle_url_says_what_to_do(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "WALLE_URL"}
    done = subprocess.run(
        [sys.executable, str(DEMO), "pi05"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=scaled(60),
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.startswith("WALLE_URL is not set: export it, or put it in a .env file")
