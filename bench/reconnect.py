"""Reconnecting after a server restart: how long after the server is back the robot
gets its first new reply and its first new trajectory, and what waiting costs a
server that stays down. Prints tables.

Usage (from the repository root)::

    ROS_DOMAIN_ID=13 nice -n 10 .venv/bin/python bench/reconnect.py [--restarts 12]
        [--levels reply,trajectory] [--down-max-s 3] [--seed 0] [--stay-down-s 60]

What runs: the reference server as a subprocess (the demo's command line: π0.5, 80 ±
20 ms simulated inference), restarted ``--restarts`` times on the same port: killed
with SIGKILL (a crash: no closing handshake), left down for a seeded random time in
``[0, --down-max-s]`` s, started again. "Server back" is the instant the new server
listens: the modification time of its ``--port-file``, which it writes right after
binding (so the new process's start-up, about 1 s here, is not counted).

- ``reply``: a ``PolicyConnection`` in this process with the node's reconnect
  settings (0.25 s doubling to ``reconnect_max_backoff_s`` = 5 s), submitting an
  observation whenever it is connected and idle; measured: server back -> the first
  reply to an observation sent after the kill.
- ``trajectory``: the whole demo loop (``relay_ros.demo.rig.DemoRig``: simulated
  cameras and arm, ``policy_node`` on rclpy); measured: server back -> the first
  ``~/preview`` trajectory built from an observation taken after the kill, as it
  arrives at a subscriber.

Each level runs twice on the same restart schedule (same seed, same down times):
``probe off`` is the reconnect before the TCP probe (``reconnect_probe_s=None``, no
jitter: the plain backoff); ``probe on`` is the default. The node level patches its
``PolicyConnection`` for ``probe off`` (the node has no parameter for it).

``--stay-down-s``: what waiting costs the server. A ``PolicyConnection`` with the
node's settings against (1) a port where nothing listens (a server that is down; the
probes are SYNs answered by RST) and (2) a port that accepts TCP and answers every
upgrade with HTTP 503 (a proxy whose backend is down), each for that long: full
connection attempts and TCP probes per minute. In (2) the server counts what it
sees, which checks the client's counters against a known answer.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import queue
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from relay_ros.demo.policy_settings import DemoPolicy
from relay_ros.demo.server_process import server_command
from relay_ros.wire import reconnect
from relay_ros.wire.connection import InferOutcome, PolicyConnection

MODEL = "pi05"
# The node's reconnect settings (node/policy_node.py, reconnect_max_backoff_s default).
NODE_BACKOFF = {"reconnect_initial_s": 0.25, "reconnect_max_s": 5.0}
# How long one restart may take to show its first reply or trajectory before the
# bench gives up on it (far above the backoff's 5 s cap).
PER_RESTART_TIMEOUT_S = 60.0


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RestartableServer:
    """The demo's reference server as a subprocess on a fixed port, killed and started
    again on demand. Quacks like ``relay_ros.demo.server_process.ServerProcess`` for
    ``DemoRig`` (``start``, ``stop``, ``running``, ``port``, ``pid``, ``log_tail``)."""

    def __init__(self) -> None:
        self.port: int = free_port()
        self._tmp = tempfile.TemporaryDirectory(prefix="relay_ros_reconnect_")
        self._port_file = Path(self._tmp.name) / "port"
        self._log_path = Path(self._tmp.name) / "server.log"
        self._process: subprocess.Popen[bytes] | None = None
        self.back_at: float | None = None  # wall clock: the last start's bind

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/{MODEL}"

    def log_tail(self, lines: int = 20) -> str:
        try:
            text = self._log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.strip().splitlines()[-lines:])

    def start(self) -> RestartableServer:
        """Start the server; return once it listens (``back_at`` is when it bound)."""
        self._port_file.unlink(missing_ok=True)
        command = server_command(
            MODEL,
            port=self.port,
            port_file=self._port_file,
            executable=(sys.executable, "-m", "relay_ros.server"),
            policy=DemoPolicy(),
        )
        with open(self._log_path, "ab") as log:
            self._process = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
            )
        deadline = time.monotonic() + 60.0
        while not self._port_file.exists():
            if self._process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the server did not start: {self.log_tail()}")
            time.sleep(0.01)
        self.back_at = self._port_file.stat().st_mtime
        return self

    def kill(self) -> float:
        """SIGKILL the server (a crash); returns when, wall clock."""
        assert self._process is not None
        killed_at = time.time()
        self._process.send_signal(signal.SIGKILL)
        self._process.wait(10)
        return killed_at

    def stop(self) -> None:
        if self.running():
            assert self._process is not None
            self._process.terminate()
            try:
                self._process.wait(5)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()


@contextlib.contextmanager
def probe_setting(on: bool) -> Iterator[dict[str, Any]]:
    """``probe on``: the defaults. ``probe off``: no probe and no jitter, the plain
    backoff the connection had before. Yields the ``PolicyConnection`` options."""
    saved = reconnect.DEFAULT_JITTER
    if not on:
        reconnect.DEFAULT_JITTER = 0.0
    try:
        yield {} if on else {"reconnect_probe_s": None}
    finally:
        reconnect.DEFAULT_JITTER = saved


@dataclass
class Series:
    """One run of restarts: seconds from server back to the measured event."""

    label: str
    waits_s: list[float] = field(default_factory=list)
    attempts: int = 0
    probes: int = 0
    failures: int = 0  # restarts that showed no event within PER_RESTART_TIMEOUT_S


def down_times(count: int, down_max_s: float, seed: int) -> list[float]:
    rng = random.Random(seed)
    return [rng.uniform(0.0, down_max_s) for _ in range(count)]


def observation(rng: np.random.Generator) -> dict[str, Any]:
    return {
        "images": {
            key: rng.integers(0, 256, (224, 224, 3), dtype=np.uint8)
            for key in ("base_0_rgb", "left_wrist_0_rgb")
        },
        "state": rng.uniform(-0.5, 0.5, 32).astype(np.float32),
        "prompt": "pick up the red cube",
    }


def run_reply_level(label: str, probe: bool, downs: Sequence[float]) -> Series:
    """PolicyConnection: server back -> first reply to an observation sent after the kill."""
    series = Series(label)
    obs = observation(np.random.default_rng(0))
    replies: queue.Queue[tuple[float, InferOutcome]] = queue.Queue()
    connected = threading.Event()
    server = RestartableServer().start()
    with probe_setting(probe) as options:
        conn = PolicyConnection(
            MODEL,
            url=server.url(),
            on_result=lambda outcome: replies.put((time.time(), outcome)),
            on_connect=lambda _meta: connected.set(),
            request_timeout_s=2.0,
            **NODE_BACKOFF,
            **options,
        )
    try:
        for index, down_s in enumerate(downs):
            if not wait_for_reply(conn, connected, replies, obs, after=0.0):
                raise RuntimeError(f"no reply before restart {index + 1}: {conn.last_error}")
            attempts, probes = conn.connect_attempts, conn.probes
            killed_at = server.kill()
            connected.clear()
            time.sleep(down_s)
            server.start()
            assert server.back_at is not None
            got = wait_for_reply(conn, connected, replies, obs, after=killed_at)
            if got:
                series.waits_s.append(got - server.back_at)
            else:
                series.failures += 1
            series.attempts += conn.connect_attempts - attempts
            series.probes += conn.probes - probes
            progress(
                f"  {label} restart {index + 1}/{len(downs)}: down {down_s:.2f} s, "
                + (f"first reply {got - server.back_at:.2f} s after back" if got else "no reply")
            )
    finally:
        conn.close()
        server.stop()
    return series


def wait_for_reply(
    conn: PolicyConnection,
    connected: threading.Event,
    replies: queue.Queue[tuple[float, InferOutcome]],
    obs: dict[str, Any],
    *,
    after: float,
) -> float | None:
    """Submit whenever connected and idle until a reply to an observation sent after
    ``after`` (wall clock) arrives; its arrival time, or None after the timeout."""
    end = time.monotonic() + PER_RESTART_TIMEOUT_S
    while time.monotonic() < end:
        if not conn.busy and conn.connected:
            conn.submit(obs, time.time())
        else:
            connected.wait(0.002)
        try:
            arrived, outcome = replies.get(timeout=0.002)
        except queue.Empty:
            continue
        sent = outcome.tag
        if isinstance(outcome.reply, np.ndarray) and isinstance(sent, float) and sent > after:
            return arrived
    return None


def run_trajectory_level(label: str, probe: bool, downs: Sequence[float]) -> Series:
    """policy_node in the demo loop: server back -> first ~/preview trajectory built
    from an observation taken after the kill, at a subscriber."""
    import relay_ros.node.policy_node as policy_node_module
    from relay_ros.demo.models import load_model_config
    from relay_ros.demo.recorder import ChunkRecorder
    from relay_ros.demo.rig import DemoRig
    from relay_ros.pipeline.trajectory import parse_t_obs

    series = Series(label)
    arrivals: list[tuple[float, float]] = []  # (arrival, t_obs), wall clock
    lock = threading.Lock()

    class TimedRecorder(ChunkRecorder):
        def on_preview(self, msg: Any) -> None:
            t_obs = parse_t_obs(msg.header.frame_id)
            if t_obs is not None:
                with lock:
                    arrivals.append((time.time(), t_obs))
            super().on_preview(msg)

    config = load_model_config(MODEL)
    original = policy_node_module.PolicyConnection
    rig: DemoRig | None = None
    with probe_setting(probe) as options:
        policy_node_module.PolicyConnection = _with_options(original, options)  # type: ignore[misc]
        try:
            rig = DemoRig(
                MODEL,
                config,
                request_mode="early",
                latency_ms=80.0,
                jitter_ms=20.0,
                policy=DemoPolicy(),
                fault=None,
                context=None,
                startup_timeout_s=60.0,
                multi_threaded=False,
            )
            server = RestartableServer()
            rig.server = server  # type: ignore[assignment]
            rig.recorder = TimedRecorder(config.commanded_joints)
            rig.start()
            rig.wait_for_first_chunk(None, 0.0)
            node = rig._policy_node  # noqa: SLF001 - the bench reads the node's counters
            for index, down_s in enumerate(downs):
                time.sleep(1.0)  # streaming steadily before the kill
                attempts = node.connection.connect_attempts
                probes = node.connection.probes
                killed_at = server.kill()
                time.sleep(down_s)
                server.start()
                assert server.back_at is not None
                got = first_after(arrivals, lock, killed_at)
                if got is not None:
                    series.waits_s.append(got - server.back_at)
                else:
                    series.failures += 1
                series.attempts += node.connection.connect_attempts - attempts
                series.probes += node.connection.probes - probes
                progress(
                    f"  {label} restart {index + 1}/{len(downs)}: down {down_s:.2f} s, "
                    + (
                        f"first trajectory {got - server.back_at:.2f} s after back"
                        if got is not None
                        else "no trajectory"
                    )
                )
        finally:
            policy_node_module.PolicyConnection = original  # type: ignore[misc]
            if rig is not None:
                rig.stop()
    return series


def _with_options(cls: Any, options: dict[str, Any]) -> Callable[..., Any]:
    def make(*args: Any, **kwargs: Any) -> Any:
        return cls(*args, **{**kwargs, **options})

    return make


def first_after(
    arrivals: list[tuple[float, float]], lock: threading.Lock, after: float
) -> float | None:
    """Arrival of the first trajectory whose observation is later than ``after``."""
    end = time.monotonic() + PER_RESTART_TIMEOUT_S
    while time.monotonic() < end:
        with lock:
            for arrived, t_obs in arrivals:
                if t_obs > after:
                    return arrived
        time.sleep(0.005)
    return None


# ---------------------------------------------------------------- a server that stays down


class RefusingUpgrades:
    """Accepts TCP and answers every HTTP request with 503 (a proxy whose backend is
    down); counts connections with a request and connections closed without one."""

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.05)
        self.port = int(self._listener.getsockname()[1])
        self.with_request = 0
        self.without_request = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                sock, _ = self._listener.accept()
            except TimeoutError:
                continue
            with sock:
                sock.settimeout(5.0)
                try:
                    data = sock.recv(4096)
                except OSError:
                    data = b""
                if data:
                    self.with_request += 1
                    sock.sendall(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n")
                else:
                    self.without_request += 1

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._listener.close()


def stay_down(seconds: float) -> str:
    """Attempts and probes per minute against a closed port and a 503 port."""
    rows = []
    for case in ("nothing listens (server down)", "HTTP 503 (proxy up, backend down)"):
        refusing = RefusingUpgrades() if "503" in case else None
        port = refusing.port if refusing is not None else free_port()
        progress(f"  {case}: {seconds:.0f} s")
        conn = PolicyConnection(
            MODEL, url=f"ws://127.0.0.1:{port}/{{model}}", on_result=lambda _o: None, **NODE_BACKOFF
        )
        started = time.monotonic()
        time.sleep(seconds)
        conn.close()
        elapsed = time.monotonic() - started
        attempts, probes = conn.connect_attempts, conn.probes
        seen = ""
        if refusing is not None:
            refusing.close()
            seen = (
                f"server saw {refusing.with_request} upgrade requests and "
                f"{refusing.without_request} connections without one"
            )
        rows.append(
            f"| {case} | {elapsed:.0f} s | {attempts} ({60 * attempts / elapsed:.1f}/min) | "
            f"{probes} ({probes / elapsed:.2f}/s) | {seen or '-'} |"
        )
    header = [
        "| port | waited | connection attempts | TCP probes | server side |",
        "|---|---|---|---|---|",
    ]
    return "\n".join(header + rows)


# ---------------------------------------------------------------------------- report


def summary(series: Series, restarts: int) -> str:
    waits = sorted(series.waits_s)
    if not waits:
        return f"| {series.label} | 0 | - | - | - | - | {series.failures} | - | - |"
    p90 = waits[min(len(waits) - 1, int(round(0.9 * (len(waits) - 1))))]
    within = sum(w <= 1.0 for w in waits)
    return (
        f"| {series.label} | {len(waits)} | {statistics.median(waits):.2f} s | {p90:.2f} s | "
        f"{waits[0]:.2f} s | {waits[-1]:.2f} s | {within}/{len(waits)} | "
        f"{series.attempts / restarts:.1f} | {series.probes / restarts:.1f} |"
    )


def table(title: str, rows: Sequence[Series], restarts: int) -> str:
    lines = [
        f"| {title} | restarts | median | p90 | min | max | <= 1 s | attempts/restart "
        "| probes/restart |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    lines += [summary(s, restarts) for s in rows]
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--restarts", type=int, default=12, help="restarts per run (default 12)")
    p.add_argument(
        "--levels",
        default="reply,trajectory",
        help="comma-separated: reply (PolicyConnection), trajectory (policy_node)",
    )
    p.add_argument(
        "--down-max-s",
        type=float,
        default=3.0,
        help="each restart leaves the server down a random time in [0, this] s (default 3)",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the down times (default 0)")
    p.add_argument(
        "--stay-down-s",
        type=float,
        default=60.0,
        help="seconds against a server that stays down, per case; 0 = skip (default 60)",
    )
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # The connection's WARNINGs ("cannot connect ...") are expected here by the dozen.
    logging.getLogger("relay_ros").setLevel(logging.ERROR)
    levels = [level.strip() for level in args.levels.split(",") if level.strip()]
    unknown = sorted(set(levels) - {"reply", "trajectory"})
    if unknown:
        raise SystemExit(f"--levels {unknown} unknown; expected reply and/or trajectory")
    if args.restarts < 1 or args.down_max_s < 0:
        raise SystemExit("--restarts must be >= 1 and --down-max-s >= 0")
    downs = down_times(args.restarts, args.down_max_s, args.seed)
    progress(f"down times (s): {', '.join(f'{d:.2f}' for d in downs)}")
    out = []
    if "reply" in levels:
        rows = []
        for label, probe in (("probe off", False), ("probe on", True)):
            progress(f"reply level, {label}")
            rows.append(run_reply_level(label, probe, downs))
        out.append(table("server back -> first new reply", rows, args.restarts))
    if "trajectory" in levels:
        rows = []
        for label, probe in (("probe off", False), ("probe on", True)):
            progress(f"trajectory level, {label}")
            rows.append(run_trajectory_level(label, probe, downs))
        out.append(table("server back -> first new trajectory", rows, args.restarts))
    if args.stay_down_s > 0:
        progress("a server that stays down")
        out.append(stay_down(args.stay_down_s))
    print("\n\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
