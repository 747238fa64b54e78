"""How relay_ros's long-running programs end when signalled as a terminal and launch do.

Usage (from the repository root)::

    nice -n 10 .venv/bin/python bench/stop_signals.py [--runs 20] [--start-up-window 1.5]

Each program runs as its console script does (``relay_ros.entry_points``), in its own
process group, with real rclpy and DDS (``ROS_DOMAIN_ID`` from the environment,
default 14; discovery on localhost; every run in its own namespace): ``policy_node``
(config/pi05.yaml, against a reference server started here), ``sim_arm``,
``sim_cameras`` (one 64x48 camera) and ``relay-policy-server``. Four ways to stop it,
``--runs`` times each:

- ``ctrl-c under launch``: once it logs that it runs, SIGINT to its group (the
  terminal) and SIGINT to the process (``ros2 launch`` forwarding it);
- ``sigterm twice``: once it runs, two SIGTERMs (launch's escalation, systemd);
- ``ctrl-c during start-up``: SIGINT to the group, then to the process, at a moment
  drawn uniformly from 0 to ``--start-up-window`` seconds after its code runs
  (it handles SIGTERM: the first line of its entry point);
- ``ctrl-c from spawn``: the same, but timed from the process's creation, so that
  some signals fall into the interpreter's own start-up, before any relay_ros code.

Measured per program and way: runs that exited 0 without a traceback ("clean"), the
others by exit status, and for the last way how long after spawn the program's code
took the signals (median, max). Prints a table. Seeded (``--seed``).
"""

from __future__ import annotations

import argparse
import collections
import os
import random
import signal
import statistics
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from relay_ros.server import ServerOptions, run_server_in_thread  # noqa: E402

WAYS = ("ctrl-c under launch", "sigterm twice", "ctrl-c during start-up", "ctrl-c from spawn")


def _command(entry: str, args: list[str]) -> list[str]:
    code = f"import sys; from relay_ros.entry_points import {entry}; sys.exit({entry}())"
    return [sys.executable, "-c", code, *args]


def _programs(url: str) -> dict[str, tuple[str, list[str], str]]:
    pi05 = str(ROOT / "config" / "pi05.yaml")
    return {
        "policy_node": (
            "policy_node",
            ["--params-file", pi05, "-p", f"policy_url:={url}"],
            "policy_node for",
        ),
        "sim_arm": ("sim_arm", [], "simulating"),
        "sim_cameras": (
            "sim_cameras",
            ["-p", "camera_names:=[c]", "-p", "cameras.c.width:=64", "-p", "cameras.c.height:=48"],
            "camera c:",
        ),
        "relay-policy-server": ("policy_server", [], "listening on"),
    }


def _taken(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("SigCgt:"):
                    return bool(int(line.split()[1], 16) & (1 << (signal.SIGTERM - 1)))
    except FileNotFoundError:
        return True
    return False


def _run_once(
    name: str, spec: tuple[str, list[str], str], way: str, delay: float
) -> tuple[str, float | None]:
    entry, extra, ready = spec
    if name == "relay-policy-server":
        args = ["--port", "0", "--model", "pi05"]
    else:
        args = ["--ros-args", "-r", f"__ns:=/bench_{uuid.uuid4().hex[:8]}", *extra]
    spawned = time.monotonic()
    process = subprocess.Popen(
        _command(entry, args),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    lines: list[str] = []
    running = threading.Event()

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.append(line)
            if ready in line:
                running.set()
        running.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    taken_after = None
    if way == "ctrl-c from spawn":
        time.sleep(delay)
    else:
        while not _taken(process.pid):
            time.sleep(0.0005)
        taken_after = time.monotonic() - spawned
        if way == "ctrl-c during start-up":
            time.sleep(delay)
        else:
            running.wait(60)
    try:
        if way == "sigterm twice":
            process.send_signal(signal.SIGTERM)
            process.send_signal(signal.SIGTERM)
        else:
            os.killpg(process.pid, signal.SIGINT)
            process.send_signal(signal.SIGINT)
    except ProcessLookupError:
        pass
    try:
        code = process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()
        code = process.wait()
    reader.join(10)
    text = "".join(lines)
    if code == 0 and "Traceback" not in text:
        return "clean", taken_after
    return (f"exit {code}" + (" + traceback" if "Traceback" in text else "")), taken_after


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20, help="runs per program and way")
    parser.add_argument(
        "--start-up-window", type=float, default=1.5, help="seconds the random moments span"
    )
    parser.add_argument("--seed", type=int, default=21)
    args = parser.parse_args()
    os.environ.setdefault("ROS_DOMAIN_ID", os.environ.get("RELAY_ROS_TEST_DOMAIN_ID", "14"))
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    rng = random.Random(args.seed)
    rows = []
    with run_server_in_thread(ServerOptions(models=("pi05",))) as server:
        for name, spec in _programs(server.url_template).items():
            for way in WAYS:
                endings: collections.Counter[str] = collections.Counter()
                taken: list[float] = []
                for _ in range(args.runs):
                    delay = rng.uniform(0.0, args.start_up_window)
                    ending, taken_after = _run_once(name, spec, way, delay)
                    endings[ending] += 1
                    if taken_after is not None:
                        taken.append(taken_after)
                    print(f"{name:20s} {way:24s} {ending}", file=sys.stderr, flush=True)
                clean = endings.pop("clean", 0)
                others = ", ".join(f"{k}: {v}" for k, v in sorted(endings.items())) or "-"
                window = (
                    f"{statistics.median(taken) * 1000:.0f} / {max(taken) * 1000:.0f} ms"
                    if taken
                    else "-"
                )
                rows.append((name, way, f"{clean}/{args.runs}", others, window))
    header = ("program", "how", "clean", "other endings", "signals taken after spawn (med / max)")
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, tuple("-" * w for w in widths), *rows]:
        print("| " + " | ".join(str(c).ljust(w) for c, w in zip(row, widths)) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
