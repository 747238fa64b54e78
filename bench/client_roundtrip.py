"""Round trip of one π0.5 observation: relay_ros ``PolicyClient`` vs ``openpi-client``.

Usage (from the repository root)::

    .venv/bin/python bench/client_roundtrip.py [--iterations 200] [--rounds 5]

The observation is what a π0.5 robot sends every step: three 224x224x3 uint8
camera frames, a 32-float state and a prompt (~450 kB of msgpack). Four client
and server pairs are measured over loopback, interleaved round by round so that
load from other processes on the machine hits them alike:

- relay_ros ``PolicyClient`` -> reference server (``python -m relay_ros.server``,
  zero simulated latency), each in its own process;
- ``openpi-client`` -> ``openpi-server`` serving a zero-work policy (returns a
  constant (50, 32) float32 chunk);
- the two crossed pairs, which separate the client's share from the server's.

openpi-client pins ``numpy<2``, so the openpi side runs from a separate venv
``.bench-venv`` that this script creates on first use (``pip install
openpi-client openpi-server``; openpi-server 0.1.0 is one module,
``WebsocketPolicyServer(policy, host, port, metadata)``). Every openpi piece runs
as a subprocess of that venv; our client runs in this process.

The goal is our round trip at most 0.8x openpi's (p50).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from relay_ros.wire.client import PolicyClient

ROOT = Path(__file__).resolve().parents[1]
BENCH_VENV = ROOT / ".bench-venv"
# openpi-client 0.1.2 imports typing_extensions without declaring it.
OPENPI_PACKAGES = ("openpi-client==0.1.2", "openpi-server==0.1.0", "typing_extensions")

# Shared by this process and the .bench-venv subprocesses: the same bytes on the wire.
OBSERVATION_CODE = """
import numpy as np

def observation():
    rng = np.random.default_rng(0)
    return {
        "images": {
            key: rng.integers(0, 256, (224, 224, 3), dtype=np.uint8)
            for key in ("base_0_rgb", "left_wrist_0_rgb", "right_wrist_0_rgb")
        },
        "state": rng.standard_normal(32).astype(np.float32),
        "prompt": "pick up the red cube and put it in the bowl",
    }
"""

OPENPI_SERVER_CODE = """
import logging, sys
import numpy as np
from openpi_client import base_policy
from openpi_server import WebsocketPolicyServer

class ZeroWorkPolicy(base_policy.BasePolicy):
    ACTIONS = np.zeros((50, 32), np.float32)

    def infer(self, obs):
        return {"actions": self.ACTIONS}

logging.basicConfig(level=logging.WARNING)
WebsocketPolicyServer(
    ZeroWorkPolicy(), host="127.0.0.1", port=int(sys.argv[1]),
    metadata={"model": "pi05", "action_horizon": 50, "action_dim": 32},
).serve_forever()
"""

OPENPI_CLIENT_CODE = (
    OBSERVATION_CODE
    + """
import json, sys, time
from openpi_client.websocket_client_policy import WebsocketClientPolicy

policy = WebsocketClientPolicy(host=sys.argv[1])
obs = observation()
policy.infer(obs)
print(json.dumps({"ready": True}), flush=True)
for line in sys.stdin:
    times, server_ms = [], []
    for _ in range(int(line)):
        start = time.perf_counter()
        reply = policy.infer(obs)
        times.append(time.perf_counter() - start)
        server_ms.append(reply.get("server_timing", {}).get("infer_ms", float("nan")))
    print(json.dumps({"times": times, "server_ms": server_ms}), flush=True)
"""
)

namespace: dict[str, Any] = {}
exec(OBSERVATION_CODE, namespace)  # the very same observation code as the subprocesses
observation = namespace["observation"]


def progress(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def bench_python() -> Path:
    """The .bench-venv interpreter, with openpi-client and openpi-server installed."""
    python = BENCH_VENV / "bin" / "python"
    check = [str(python), "-c", "import openpi_client.websocket_client_policy, openpi_server"]
    if python.exists() and subprocess.run(check, capture_output=True).returncode == 0:
        progress(f"using {BENCH_VENV} (openpi-client, openpi-server)")
        return python
    if not python.exists():
        base = getattr(sys, "_base_executable", sys.executable)
        progress(f"creating {BENCH_VENV} with {base} (once; about a minute)")
        subprocess.run([base, "-m", "venv", str(BENCH_VENV)], check=True)
    progress(f"pip install {' '.join(OPENPI_PACKAGES)} (pulls numpy<2)")
    subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
        + list(OPENPI_PACKAGES),
        check=True,
    )
    subprocess.run(check, check=True)
    return python


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for_port(port: int, process: subprocess.Popen[Any], what: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited with code {process.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"{what} did not listen on port {port} within 60 s")


def start_reference_server(workdir: Path) -> tuple[subprocess.Popen[Any], int]:
    port_file = workdir / "reference.port"
    command = [sys.executable, "-m", "relay_ros.server", "--port", "0"]
    command += ["--port-file", str(port_file), "--model", "pi05", "--idle-timeout-s", "0"]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while not (port_file.exists() and port_file.read_text().strip()):
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("the reference server did not start")
        time.sleep(0.05)
    return process, int(port_file.read_text())


class OpenpiClientWorker:
    """An openpi-client in a .bench-venv subprocess, driven over stdin/stdout."""

    def __init__(self, python: Path, url: str) -> None:
        self.process = subprocess.Popen(
            [str(python), "-c", OPENPI_CLIENT_CODE, url],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"openpi-client could not connect to {url}")

    def run(self, iterations: int) -> tuple[list[float], list[float]]:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(f"{iterations}\n")
        self.process.stdin.flush()
        result = json.loads(self.process.stdout.readline())
        return result["times"], result["server_ms"]

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        self.process.wait(10)


def run_ours(client: PolicyClient, obs: dict[str, Any], n: int) -> tuple[list[float], list[float]]:
    times, server_ms = [], []
    for _ in range(n):
        start = time.perf_counter()
        reply = client.infer_reply(obs)
        times.append(time.perf_counter() - start)
        timing = reply.server_timing or {}
        server_ms.append(float(timing.get("infer_ms", float("nan"))))
    return times, server_ms


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iterations", type=int, default=200, help="requests per pair per round")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds")
    args = parser.parse_args(argv)

    python = bench_python()
    processes: list[subprocess.Popen[Any]] = []
    clients: list[PolicyClient] = []
    workers: list[OpenpiClientWorker] = []
    with tempfile.TemporaryDirectory() as tmp:
        try:
            progress("starting the reference server (python -m relay_ros.server)")
            reference, reference_port = start_reference_server(Path(tmp))
            processes.append(reference)
            progress("starting openpi-server with a zero-work policy in .bench-venv")
            openpi_port = free_port()
            openpi = subprocess.Popen(
                [str(python), "-c", OPENPI_SERVER_CODE, str(openpi_port)],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            processes.append(openpi)
            wait_for_port(openpi_port, openpi, "openpi-server")
            reference_url = f"ws://127.0.0.1:{reference_port}/pi05"
            openpi_url = f"ws://127.0.0.1:{openpi_port}"

            progress("connecting the clients")
            obs = observation()
            ours_ref = PolicyClient("pi05", url=reference_url)
            ours_openpi = PolicyClient("pi05", url=openpi_url)
            clients += [ours_ref, ours_openpi]
            for client in clients:
                client.infer(obs)
            theirs_openpi = OpenpiClientWorker(python, openpi_url)
            theirs_ref = OpenpiClientWorker(python, reference_url)
            workers += [theirs_openpi, theirs_ref]

            pairs: dict[str, Any] = {
                "relay_ros PolicyClient -> reference server": lambda n: run_ours(ours_ref, obs, n),
                "openpi-client -> openpi-server": theirs_openpi.run,
                "relay_ros PolicyClient -> openpi-server": lambda n: run_ours(ours_openpi, obs, n),
                "openpi-client -> reference server": theirs_ref.run,
            }
            samples: dict[str, tuple[list[float], list[float]]] = {k: ([], []) for k in pairs}
            for round_ in range(args.rounds):
                progress(f"round {round_ + 1}/{args.rounds}: {args.iterations} requests per pair")
                for name, run in pairs.items():
                    run(min(20, args.iterations))  # re-warm after the other pairs ran
                    times, server_ms = run(args.iterations)
                    samples[name][0].extend(times)
                    samples[name][1].extend(server_ms)
        finally:
            for client in clients:
                client.close()
            for worker in workers:
                worker.close()
            for process in processes:
                process.terminate()
                process.wait(10)

    payload = len(__import__("relay_ros.wire.codec", fromlist=["packb"]).packb(observation()))
    print(
        f"\nπ0.5 observation: 3 x 224x224x3 uint8 + state (32,) float32 + prompt, "
        f"{payload} bytes; {args.rounds} rounds x {args.iterations} requests per pair; "
        f"Python {sys.version.split()[0]}, {os.cpu_count()} CPUs\n"
    )
    print("| client -> server | p50 (ms) | p99 (ms) | server infer_ms p50 |")
    print("|---|---:|---:|---:|")
    p50: dict[str, float] = {}
    for name, (times, server_ms) in samples.items():
        ms = np.asarray(times) * 1000.0
        p50[name] = float(np.percentile(ms, 50))
        server = np.asarray(server_ms, dtype=float)
        server_p50 = float(np.nanmedian(server)) if np.isfinite(server).any() else float("nan")
        print(f"| {name} | {p50[name]:.3f} | {np.percentile(ms, 99):.3f} | {server_p50:.3f} |")
    ours = p50["relay_ros PolicyClient -> reference server"]
    theirs = p50["openpi-client -> openpi-server"]
    same_server = p50["relay_ros PolicyClient -> openpi-server"]
    print(
        f"\nratio ours/openpi (p50, each with its own server): {ours / theirs:.2f} (goal <= 0.80)"
    )
    print(f"ratio clients only (p50, both on openpi-server): {same_server / theirs:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
