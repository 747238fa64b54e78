"""Server memory against a client that sends a new ``session_id`` with every
observation and never resets: bounded by ``--max-sessions``. Prints a table.

Usage (from the repository root)::

    nice -n 10 .venv/bin/python bench/sessions.py [--ids 20000]

What runs: the reference server as a subprocess (``python -m relay_ros.server
--model pi05``), once with the default ``--max-sessions`` (256) and once with
``--max-sessions 1000000`` (in effect no bound, as the server was before the cap).
One WebSocket connection sends ``--ids`` small π0.5 observations (one 8x8 frame, 32
floats), each with a new ``session_id``, then a reset. Measured: the server
process's resident memory (VmRSS) after a 1 000-observation warm-up with the same
ids each time (so buffers and allocator pools are in place) and after the ``--ids``
new ones, and the ``sessions_cleared`` the reset reports (the sessions the server
held).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from websockets.sync.client import connect

from relay_ros.wire.codec import packb, unpackb

WARM_UP = 1000
OBS: dict[str, Any] = {
    "images": {"base_0_rgb": np.zeros((8, 8, 3), np.uint8)},
    "state": np.zeros(32, np.float32),
    "prompt": "wave",
}


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def measure(ids: int, max_sessions: int) -> tuple[float, float, int]:
    """(RSS after warm-up, RSS after ``ids`` new ids, sessions_cleared) in MiB."""
    with tempfile.TemporaryDirectory() as tmp:
        port_file = Path(tmp) / "port"
        server = subprocess.Popen(
            [
                *(sys.executable, "-m", "relay_ros.server", "--model", "pi05", "--port", "0"),
                *("--port-file", str(port_file), "--max-sessions", str(max_sessions)),
                *("--log-level", "ERROR", "--idle-timeout-s", "0"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + 60
            while not port_file.exists():
                if server.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the server did not start")
                time.sleep(0.05)
            port = int(port_file.read_text())
            with connect(f"ws://127.0.0.1:{port}/pi05", compression=None, max_size=None) as ws:
                unpackb(ws.recv(timeout=30))

                def ask(frame: dict[str, Any]) -> Any:
                    ws.send(packb(frame))
                    return unpackb(ws.recv(timeout=30))

                for i in range(WARM_UP):
                    ask({**OBS, "session_id": f"warm-{i % 16}"})
                before = rss_mib(server.pid)
                for i in range(ids):
                    ask({**OBS, "session_id": f"episode-{i:08d}"})
                    if (i + 1) % 5000 == 0:
                        progress(f"  max_sessions {max_sessions}: {i + 1}/{ids} ids")
                after = rss_mib(server.pid)
                cleared = int(ask({"type": "reset"})["sessions_cleared"])
        finally:
            server.terminate()
            server.wait(10)
    return before, after, cleared


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ids", type=int, default=20000, help="new session ids (default 20000)")
    args = parser.parse_args(argv)
    if args.ids < 1:
        raise SystemExit(f"--ids {args.ids} must be >= 1")
    lines = [
        f"| server | RSS after warm-up | after {args.ids} new ids | growth | sessions held |",
        "|---|---|---|---|---|",
    ]
    for label, cap in (("--max-sessions 256 (default)", 256), ("--max-sessions 1000000", 10**6)):
        progress(label)
        before, after, cleared = measure(args.ids, cap)
        lines.append(
            f"| {label} | {before:.1f} MiB | {after:.1f} MiB | {after - before:+.1f} MiB "
            f"| {cleared} |"
        )
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
