"""Soak: a ``PolicyConnection`` streaming π0.5 observations for a long time, with the
server killed and restarted now and then. Prints a table.

Usage (from the repository root)::

    nice -n 10 .venv/bin/python bench/soak.py [--duration 600] [--restart-every 120] [--rate 10]
    nice -n 10 .venv/bin/python bench/soak.py --amplification
    ROS_DOMAIN_ID=13 nice -n 10 .venv/bin/python bench/soak.py --sim-arm [--duration 180]

What runs: the reference server as a subprocess (``python -m relay_ros.server``,
``--latency-ms 20``), and in this process a ``PolicyConnection`` (the node's
worker, default reconnect settings, ``request_timeout_s=2``) that submits a π0.5
observation (three 224x224x3 uint8 frames, 32 floats) ``--rate`` times a second
(when the previous reply is in). Every ``--restart-every`` seconds (0: never) the
server is killed with SIGKILL (a crash: no closing handshake) and started again on
the same port.

Measured: requests answered and failed, the time from each restart (the new
server process started) to the first new reply, and the resident memory (VmRSS)
of this process and of the server, sampled every 10 s: first sample, last sample,
the growth between them and the largest sample.

``--amplification`` measures instead what the ``0xdd n 0x90*n`` trick (n empty
msgpack arrays) costs: a 16 MiB reply to a ``PolicyClient`` (in a subprocess, under
the default 8 MiB cap and a 32 MiB cap: its peak RSS growth), and a 32 MiB frame
to the reference server (a subprocess: its peak RSS growth, and the slowest reply
another client got meanwhile). For the client the growth is
also given from the 60 s sample on (the first minute includes allocator warm-up,
not a leak); for the server, over the life of the last server process from its
second sample on (the first is taken while it still imports).

``--sim-arm`` soaks the simulated arm instead: ``sim_arm`` as its console script runs
it (a subprocess, default parameters: arm and gripper controllers, 100 Hz), sent a
10-point trajectory on each controller 4 times a second (as policy_node streams
chunks) from a node in this process. The soak starts when sim_arm publishes its first
metrics (it has imported and built its node); its RSS is sampled every 10 s: the
growth over the soak and per minute from the 60 s sample on, and the trajectories it
accepted.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import queue
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from relay_ros.wire.connection import InferOutcome, PolicyConnection

SAMPLE_EVERY_S = 10.0


def rss_mib(pid: int) -> float:
    """Resident memory of ``pid`` in MiB (VmRSS)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_server(port: int, port_file: Path) -> subprocess.Popen[bytes]:
    port_file.unlink(missing_ok=True)
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "relay_ros.server",
            *("--port", str(port), "--port-file", str(port_file), "--model", "pi05"),
            *("--latency-ms", "20", "--log-level", "WARNING"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def observation(rng: np.random.Generator) -> dict[str, Any]:
    return {
        "images": {
            key: rng.integers(0, 256, (224, 224, 3), dtype=np.uint8)
            for key in ("base_0_rgb", "left_wrist_0_rgb", "right_wrist_0_rgb")
        },
        "state": rng.uniform(-0.5, 0.5, 32).astype(np.float32),
        "prompt": "pick up the red cube",
    }


@dataclass
class Soak:
    answered: int = 0
    failed: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    restart_to_reply_s: list[float] = field(default_factory=list)
    client_rss: list[tuple[float, float]] = field(default_factory=list)
    server_rss: list[tuple[float, float]] = field(default_factory=list)  # last server only


def run(duration_s: float, restart_every_s: float, rate_hz: float) -> Soak:
    soak = Soak()
    rng = np.random.default_rng(0)
    observations = [observation(rng) for _ in range(4)]
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        port_file = Path(tmp) / "port"
        server = start_server(port, port_file)
        results: queue.Queue[InferOutcome] = queue.Queue()
        conn = PolicyConnection(
            "pi05",
            url=f"ws://127.0.0.1:{port}/{{model}}",
            on_result=results.put,
            request_timeout_s=2.0,
        )
        started = time.monotonic()
        next_sample = started
        next_restart = started + restart_every_s if restart_every_s else float("inf")
        next_submit = started
        restarted_at: float | None = None
        index = 0
        try:
            while (now := time.monotonic()) - started < duration_s:
                if now >= next_sample:
                    elapsed = now - started
                    soak.client_rss.append((elapsed, rss_mib(os.getpid())))
                    if server.poll() is None:
                        soak.server_rss.append((elapsed, rss_mib(server.pid)))
                    next_sample += SAMPLE_EVERY_S
                if now >= next_restart:
                    server.send_signal(signal.SIGKILL)
                    server.wait(10)
                    server = start_server(port, port_file)
                    soak.server_rss.clear()
                    restarted_at = time.monotonic()
                    next_restart += restart_every_s
                if now >= next_submit and conn.connected and not conn.busy:
                    if conn.submit(observations[index % len(observations)], index):
                        index += 1
                        next_submit = max(next_submit + 1.0 / rate_hz, now)
                try:
                    outcome = results.get(timeout=0.01)
                except queue.Empty:
                    continue
                if outcome.connection_error is None and isinstance(outcome.reply, np.ndarray):
                    soak.answered += 1
                    if restarted_at is not None:
                        soak.restart_to_reply_s.append(time.monotonic() - restarted_at)
                        restarted_at = None
                else:
                    soak.failed += 1
                    kind = str(outcome.connection_error or outcome.reply).split(":")[0][:60]
                    soak.errors[kind] = soak.errors.get(kind, 0) + 1
        finally:
            conn.close()
            server.send_signal(signal.SIGTERM)
            server.wait(10)
    return soak


def _growth(samples: list[tuple[float, float]], after_s: float) -> str:
    steady = [rss for t, rss in samples if t >= after_s] or [rss for _, rss in samples]
    if not steady:
        return "-"
    return (
        f"{samples[0][1]:.0f} -> {samples[-1][1]:.0f} MiB "
        f"(after {after_s:.0f} s: {steady[0]:.0f} -> {steady[-1]:.0f}, "
        f"{steady[-1] - steady[0]:+.1f} MiB; max {max(rss for _, rss in samples):.0f})"
    )


def report(soak: Soak, duration_s: float, restart_every_s: float, rate_hz: float) -> str:
    waits = sorted(soak.restart_to_reply_s)
    restart = (
        f"{len(waits)} restarts: median {waits[len(waits) // 2]:.2f} s, max {waits[-1]:.2f} s"
        if waits
        else "no restart"
    )
    rows = [
        (
            "run",
            f"{duration_s:.0f} s at {rate_hz:g} Hz, "
            + (
                f"server killed every {restart_every_s:.0f} s"
                if restart_every_s
                else "server never killed"
            ),
        ),
        ("requests answered", f"{soak.answered} ({soak.answered / duration_s:.1f}/s)"),
        ("requests failed", f"{soak.failed} {dict(sorted(soak.errors.items()))}"),
        ("server restart -> first new reply", restart),
        ("client process RSS", _growth(soak.client_rss, 60.0)),
        ("server process RSS (last server)", _growth(soak.server_rss[1:], 0.0)),
    ]
    width = max(len(name) for name, _ in rows)
    lines = [f"| {'measure'.ljust(width)} | value |", f"|{'-' * (width + 2)}|-------|"]
    lines += [f"| {name.ljust(width)} | {value} |" for name, value in rows]
    return "\n".join(lines)


_SIM_ARM_SCRIPT = "import sys; from relay_ros.entry_points import sim_arm; sys.exit(sim_arm())"


def sim_arm_soak(duration_s: float) -> str:
    """RSS of a ``sim_arm`` process streamed trajectories for ``duration_s``: a table."""
    import rclpy
    from builtin_interfaces.msg import Duration
    from diagnostic_msgs.msg import DiagnosticArray
    from rclpy.executors import SingleThreadedExecutor
    from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

    from relay_ros.sim.arm_node import DEFAULT_CONTROLLERS

    controllers = {name: list(joints) for name, joints in DEFAULT_CONTROLLERS.items()}
    arm = subprocess.Popen(
        [sys.executable, "-c", _SIM_ARM_SCRIPT, "--ros-args", "-p", "metrics_rate_hz:=1.0"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    rclpy.init()
    node = rclpy.create_node("sim_arm_soak")
    publishers = {
        name: node.create_publisher(JointTrajectory, f"/{name}/joint_trajectory", 10)
        for name in controllers
    }
    accepted: dict[str, int] = {}

    def on_metrics(msg: DiagnosticArray) -> None:
        for status in msg.status:
            values = {kv.key: kv.value for kv in status.values}
            accepted[status.name] = int(values.get("accepted", 0))

    node.create_subscription(DiagnosticArray, "/sim_arm/metrics", on_metrics, 10)
    sent = [0]

    def send() -> None:
        sent[0] += 1
        for name, joints in controllers.items():
            msg = JointTrajectory(joint_names=joints)
            for i in range(10):
                value = 0.2 * np.sin(0.3 * (sent[0] * 0.25 + i * 0.05))
                point = JointTrajectoryPoint(positions=[value] * len(joints))
                point.time_from_start = Duration(sec=0, nanosec=int((i + 1) * 50_000_000))
                msg.points.append(point)
            publishers[name].publish(msg)

    node.create_timer(0.25, send)
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    samples: list[tuple[float, float]] = []
    try:
        up_by = time.monotonic() + 300.0
        while not accepted:  # sim_arm is up: its first metrics came
            if arm.poll() is not None or time.monotonic() > up_by:
                raise RuntimeError("sim_arm did not start (no ~/metrics within 300 s)")
            executor.spin_once(timeout_sec=0.05)
        sent[0] = 0
        started = time.monotonic()
        next_sample = started
        while (now := time.monotonic()) - started < duration_s:
            if arm.poll() is not None:
                raise RuntimeError(f"sim_arm exited with {arm.returncode}")
            if now >= next_sample:
                samples.append((now - started, rss_mib(arm.pid)))
                next_sample += SAMPLE_EVERY_S
            executor.spin_once(timeout_sec=0.05)
        samples.append((time.monotonic() - started, rss_mib(arm.pid)))
    finally:
        arm.send_signal(signal.SIGINT)
        arm.wait(20)
        executor.shutdown()
        node.destroy_node()
        rclpy.shutdown()
    steady = [(t, rss) for t, rss in samples if t >= 60.0] or samples
    (t0, r0), (t1, r1) = steady[0], steady[-1]
    rows = [
        ("run", f"{duration_s:.0f} s, {sent[0]} trajectories sent per controller (4/s)"),
        ("accepted (sim_arm ~/metrics)", ", ".join(f"{k}: {v}" for k, v in accepted.items())),
        ("sim_arm RSS", _growth(samples, 60.0)),
        ("growth from 60 s on", f"{(r1 - r0) / max(t1 - t0, 1e-9) * 60:+.2f} MiB/min"),
    ]
    width = max(len(name) for name, _ in rows)
    lines = [f"| {'sim_arm soak'.ljust(width)} | value |", f"|{'-' * (width + 2)}|-------|"]
    lines += [f"| {name.ljust(width)} | {value} |" for name, value in rows]
    return "\n".join(lines)


def _amplification_frame(mib: int) -> bytes:
    n = mib * 2**20 - 5
    return b"\xdd" + n.to_bytes(4, "big") + b"\x90" * n


def peak_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmHWM for pid {pid}")


_CLIENT_SCRIPT = """
import sys, numpy as np
from pathlib import Path
from relay_ros import PolicyClient
from relay_ros.wire.errors import PolicyServerError
def peak():
    return next(int(l.split()[1]) for l in Path("/proc/self/status").read_text().splitlines()
                if l.startswith("VmHWM:"))
client = PolicyClient("pi05", url=sys.argv[1], max_reply_bytes=int(sys.argv[2]))
before = peak()
try:
    client.infer({"state": np.zeros(32, np.float32)}, timeout=120)
    print("accepted", 0)
except PolicyServerError as exc:
    print("refused", peak() - before)
"""


def amplification() -> str:
    """Peak RSS growth of a client and a server sent an amplification frame."""
    import asyncio
    import threading

    from websockets.asyncio.server import serve
    from websockets.exceptions import ConnectionClosed
    from websockets.sync.client import connect

    from relay_ros.server.metadata import build_metadata
    from relay_ros.wire.codec import packb, unpackb

    rows: list[tuple[str, str]] = []
    reply = _amplification_frame(16)
    ready = threading.Event()
    state: dict[str, Any] = {}

    async def handler(ws: Any) -> None:
        with contextlib.suppress(ConnectionClosed):  # the client refuses and closes
            await ws.send(packb(build_metadata("pi05")))
            async for _ in ws:
                await ws.send(reply)

    async def serve_replies() -> None:
        async with serve(handler, "127.0.0.1", 0, compression=None, max_size=None) as srv:
            state["port"] = srv.sockets[0].getsockname()[1]
            state["stop"] = asyncio.get_running_loop().create_future()
            state["loop"] = asyncio.get_running_loop()
            ready.set()
            await state["stop"]

    thread = threading.Thread(target=asyncio.run, args=(serve_replies(),), daemon=True)
    thread.start()
    ready.wait(10)
    url = f"ws://127.0.0.1:{state['port']}/{{model}}"
    for cap in (8 * 2**20, 32 * 2**20):
        out = subprocess.run(
            [sys.executable, "-c", _CLIENT_SCRIPT, url, str(cap)],
            capture_output=True,
            text=True,
            timeout=300,
            check=True,
        )
        verdict, growth = out.stdout.split()
        rows.append(
            (
                f"client, 16 MiB reply, cap {cap >> 20} MiB",
                f"{verdict}; peak RSS +{int(growth) / 1024:.1f} MiB",
            )
        )
    state["loop"].call_soon_threadsafe(state["stop"].set_result, None)
    thread.join(10)

    rng = np.random.default_rng(0)
    obs = packb(observation(rng))
    with tempfile.TemporaryDirectory() as tmp:
        port_file = Path(tmp) / "port"
        server = start_server(free_port(), port_file)
        try:
            while not port_file.exists():
                time.sleep(0.05)
            server_url = f"ws://127.0.0.1:{int(port_file.read_text())}/pi05"
            with (
                connect(server_url, compression=None, max_size=None) as victim,
                connect(server_url, compression=None, max_size=None) as attacker,
            ):
                victim.recv(30)
                attacker.recv(30)
                victim.send(obs)
                victim.recv(30)
                before = peak_kib(server.pid)
                answer: list[Any] = []
                started = time.monotonic()
                attacker.send(_amplification_frame(32))
                waiter = threading.Thread(
                    target=lambda: answer.append(
                        (unpackb(attacker.recv(300)), time.monotonic() - started)
                    )
                )
                waiter.start()
                slowest, served = 0.0, 0
                while waiter.is_alive() or not served:
                    t0 = time.monotonic()
                    victim.send(obs)
                    victim.recv(30)
                    slowest, served = max(slowest, time.monotonic() - t0), served + 1
                waiter.join()
                growth = (peak_kib(server.pid) - before) / 1024
        finally:
            server.send_signal(signal.SIGTERM)
            server.wait(10)
    ((message, after),) = answer
    rows.append(
        (
            "server, 32 MiB frame",
            f"{message.get('message')!r} after {after:.2f} s; peak RSS +{growth:.0f} MiB; "
            f"other client: {served} replies meanwhile, slowest {1000 * slowest:.0f} ms",
        )
    )
    width = max(len(name) for name, _ in rows)
    lines = [f"| {'amplification'.ljust(width)} | result |", f"|{'-' * (width + 2)}|--------|"]
    lines += [f"| {name.ljust(width)} | {value} |" for name, value in rows]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=600.0, help="seconds (default 600)")
    parser.add_argument(
        "--restart-every",
        type=float,
        default=120.0,
        help="kill and restart the server every this many seconds, 0 = never (default 120)",
    )
    parser.add_argument("--rate", type=float, default=10.0, help="requests per second (10)")
    parser.add_argument(
        "--amplification",
        action="store_true",
        help="measure the 0xdd n 0x90*n frame against client and server instead of soaking",
    )
    parser.add_argument(
        "--sim-arm",
        action="store_true",
        help="soak the simulated arm (sim_arm) with streamed trajectories instead",
    )
    args = parser.parse_args()
    if args.duration <= 0 or args.restart_every < 0 or args.rate <= 0:
        parser.error("--duration and --rate must be > 0, --restart-every >= 0")
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(message)s")
    if args.amplification:
        print(amplification())
        return 0
    if args.sim_arm:
        print(sim_arm_soak(args.duration))
        return 0
    soak = run(args.duration, args.restart_every, args.rate)
    print(report(soak, args.duration, args.restart_every, args.rate))
    return 0


if __name__ == "__main__":
    sys.exit(main())
