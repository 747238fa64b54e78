"""`python -m relay_ros.server` as a real subprocess: --port 0, --port-file, flags, shutdown."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import scaled, wait_until
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from relay_ros.server.__main__ import build_parser, options_from_args
from relay_ros.wire.codec import packb, unpackb

TIMEOUT_S = 20.0
TIMEOUT = scaled(TIMEOUT_S)


def _wait_for_port(proc: subprocess.Popen[str], port_file: Path) -> int:
    def written() -> bool:
        if proc.poll() is not None and not port_file.exists():
            raise AssertionError(f"server exited early: {proc.communicate()[1]}")
        return port_file.exists() and port_file.read_text().strip() != ""

    wait_until(written, TIMEOUT_S, "the server writing its port file")
    return int(port_file.read_text())


@pytest.mark.slow
def test_cli_serves_with_port_zero_and_port_file(tmp_path: Path) -> None:
    port_file = tmp_path / "port"
    cmd = [
        sys.executable, "-m", "relay_ros.server",
        "--port", "0", "--port-file", str(port_file),
        "--model", "pi05", "--model", "groot",
        "--lora", "towels", "--lora", "cups",
        "--direct-url", "ws://gpu:1/pi05",
        "--embodiment", "bimanual",
        "--idle-timeout-s", "5", "--max-message-mib", "2",
        "--latency-ms", "1", "--jitter-ms", "0.5", "--load-delay-s", "0.2",
    ]  # fmt: skip
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    try:
        port = _wait_for_port(proc, port_file)
        with connect(f"ws://127.0.0.1:{port}/pi05", open_timeout=TIMEOUT) as ws:
            meta = unpackb(ws.recv(timeout=TIMEOUT))
            assert meta["lora_adapters"] == ["towels", "cups"]
            assert meta["direct_url"] == "ws://gpu:1/pi05"
            obs = {
                "images": {"base_0_rgb": np.zeros((8, 8, 3), np.uint8)},
                "state": np.zeros(32, np.float32),
                "prompt": "wave",
                "sampling_params": {"lora": "cups"},
            }
            ws.send(packb(obs))
            assert unpackb(ws.recv(timeout=TIMEOUT))["actions"].shape == (50, 32)
        with connect(f"ws://127.0.0.1:{port}/groot", open_timeout=TIMEOUT) as ws:
            meta = unpackb(ws.recv(timeout=TIMEOUT))
            assert meta["embodiment"] == "bimanual"
        with pytest.raises(InvalidStatus):
            connect(f"ws://127.0.0.1:{port}/pi0", open_timeout=TIMEOUT)
    finally:
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=TIMEOUT)
    assert proc.returncode == 0, stderr
    assert f"listening on ws://127.0.0.1:{port}" in stderr


def test_cli_rejects_bad_options() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "relay_ros.server", "--embodiment", "gr1", "--port", "0"],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert proc.returncode == 2
    assert "embodiment 'gr1' is not one of" in proc.stderr


def test_parser_defaults_map_to_options() -> None:
    options = options_from_args(build_parser().parse_args([]))
    assert options.port == 8000 and options.host == "127.0.0.1"
    assert options.models == ("pi05", "pi0", "groot")
    assert options.idle_timeout_s == 30.0 and options.max_message_mib == 64.0
    assert options.lora_adapters == () and options.needs_session_id is False
    args = build_parser().parse_args(
        ["--model", "pi0", "--needs-session-id", "--policy", "pkg.mod:make"]
    )
    options = options_from_args(args)
    assert options.models == ("pi0",) and options.needs_session_id
    assert options.policy == "pkg.mod:make"


def test_max_sessions_flag_maps_to_options_and_bad_values_exit_2() -> None:
    assert options_from_args(build_parser().parse_args([])).max_sessions == 256
    args = build_parser().parse_args(["--max-sessions", "16"])
    assert options_from_args(args).max_sessions == 16
    proc = subprocess.run(
        [sys.executable, "-m", "relay_ros.server", "--max-sessions", "0", "--port", "0"],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert proc.returncode == 2
    assert "max_sessions=0; expected an integer >= 1" in proc.stderr
