"""What recording costs policy_node: its CPU and the observation's age, recording on vs off.

Usage (from the repository root)::

    .venv/bin/python bench/recording.py [--repeats 5] [--duration 20] [--scenario raw]

The set-up of ``bench/pipeline.py`` (three simulated 640x480 cameras at 30 Hz, raw or
JPEG; the reference server; the simulated arm; every part in its own process), run
``--repeats`` times with recording off and on (``record_dir`` set, ``record_fps`` 15,
LeRobot's libsvtav1 videos), the two alternating so that both see the same machine
load. Per run, in the measured window after the warm-up:

- node CPU: ``utime + stime`` of the node's process (every thread: executor, DDS,
  connection worker, and with recording on the recorder thread and the encoder's
  threads), in % of one core;
- observation age at send: ``image_to_wire``, from the newest frame of an observation
  taken from the middleware to the observation fully on the socket, p50 and p95
  over the window's requests (the node's own ``pipeline_timing``);
- ``request_to_wire`` p95: the request's own tick until the socket;
- with recording: the frames the episode holds per second of run, the frames it
  missed (``relay_ros/frames_dropped`` of the episode, read back from the dataset),
  and the executor time of the recording tick (its ``/diagnostics`` status, the last
  100 ticks).

The table shows the median over the repeats and the spread (min..max). Results and
their reading: docs/benchmarks.md, "Recording".
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
import pipeline  # noqa: E402 - the harness of bench/pipeline.py

RECORD_FPS = 15


class RecordingListener(pipeline.DiagnosticsListener):
    """The node's newest ``<node>: recording`` status (its record tick's time)."""

    def _on_diagnostics(self, msg: Any) -> None:
        for status in msg.status:
            if status.name == f"{pipeline.NODE_NAME}: recording":
                with self._lock:
                    self._latest = {kv.key: kv.value for kv in status.values}


def _episode_counts(root: Path) -> tuple[int, int, float]:
    """(frames, frames missed, seconds covered) of the dataset's episodes."""
    frames = missed = 0
    seconds = 0.0
    for path in sorted((root / "meta" / "episodes").glob("*/*.parquet")):
        for row in pq.read_table(path).to_pylist():
            frames += int(row["length"])
            missed += int(row["relay_ros/frames_dropped"])
            seconds += (row["length"] + row["relay_ros/frames_dropped"]) / RECORD_FPS
    return frames, missed, seconds


def _cell(values: list[float], digits: int = 1) -> str:
    """Median and spread: ``m (lo..hi)``."""
    if not values:
        return "-"
    fmt = f"{{:.{digits}f}}"
    med = fmt.format(statistics.median(values))
    return f"{med} ({fmt.format(min(values))}..{fmt.format(max(values))})"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n", 1)[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--repeats", type=int, default=5, help="runs with recording off and on")
    parser.add_argument("--duration", type=float, default=20.0, help="measured s per run")
    parser.add_argument("--warmup", type=float, default=3.0, help="s after the first chunk")
    parser.add_argument(
        "--scenario", choices=pipeline.SCENARIOS, default="raw", help="camera messages"
    )
    parser.add_argument("--codec", default="libsvtav1", help="record_video_codec")
    parser.add_argument("--execute-horizon", type=int, default=25)
    parser.add_argument("--rate-hz", type=float, default=pipeline.RATE_HZ)
    parser.add_argument("--joint-states-hz", type=float, default=100.0)
    parser.add_argument("--server-latency-ms", type=float, default=20.0)
    parser.add_argument("--domain-id", type=int, default=None, help="default: random 215..232")
    parser.add_argument("--keep-logs", action="store_true")
    parser.add_argument("--fastdds-defaults", action="store_true")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.repeats < 1 or args.duration <= 0:
        raise SystemExit("--repeats must be >= 1 and --duration > 0")
    domain, tmp, transport = pipeline.prepare_environment(args)
    children: list[Any] = []
    listener = None
    recording_listener = None
    runs: dict[str, list[dict[str, float]]] = {"off": [], "on": []}
    try:
        pipeline.progress(f"ROS_DOMAIN_ID={domain}; {transport}; logs in {tmp}")
        port = pipeline.start_server_and_arm(tmp, children, args)
        listener = pipeline.DiagnosticsListener()
        recording_listener = RecordingListener()
        for repeat in range(args.repeats):
            order = ("off", "on") if repeat % 2 == 0 else ("on", "off")
            for mode in order:
                root = tmp / f"dataset_{repeat}"
                params: dict[str, Any] = {}
                if mode == "on":
                    params = {
                        "record_dir": str(root),
                        "record_fps": RECORD_FPS,
                        "record_video_codec": args.codec,
                    }
                pipeline.progress(f"run {repeat + 1}/{args.repeats}, recording {mode}")
                result = pipeline.run_scenario(
                    args.scenario,
                    tmp=tmp,
                    server_port=port,
                    execute_horizon=args.execute_horizon,
                    warmup_s=args.warmup,
                    duration_s=args.duration,
                    listener=listener,
                    children=children,
                    rate_hz=args.rate_hz,
                    node_params=params,
                )
                row = {
                    "cpu": 100 * result.cpu_share,
                    "age_p50": result.percentile_ms("image_to_wire", 50) or float("nan"),
                    "age_p95": result.percentile_ms("image_to_wire", 95) or float("nan"),
                    "request_p95": result.percentile_ms("request_to_wire", 95) or float("nan"),
                    "requests": float(result.requests),
                }
                if mode == "on":
                    status = recording_listener.latest()
                    row["tick_p50"] = float(status.get("record tick p50 ms") or "nan")
                    row["tick_p99"] = float(status.get("record tick p99 ms") or "nan")
                    frames, missed, seconds = _episode_counts(root)
                    row["fps"] = frames / seconds if seconds else 0.0
                    row["missed"] = float(missed)
                    row["frames"] = float(frames)
                runs[mode].append(row)
    except KeyboardInterrupt:
        pipeline.progress("interrupted; stopping every process")
        return 130
    finally:
        if recording_listener is not None:
            recording_listener.close()
        pipeline.stop_all(children, listener, tmp, keep_logs=args.keep_logs)

    print()
    print(
        f"policy_node recording off vs on: {args.scenario} cameras, "
        f"{len(pipeline.CAMERA_KEYS)} x {pipeline.WIDTH}x{pipeline.HEIGHT} at {args.rate_hz:g} Hz; "
        f"record_fps {RECORD_FPS}, {args.codec}; execute_horizon {args.execute_horizon}; "
        f"{args.repeats} runs each of {args.duration:g} s (after {args.warmup:g} s warm-up), "
        f"alternating; {transport}; machine: {os.cpu_count()} cores, 1-min load average "
        f"{os.getloadavg()[0]:.2f} at the end"
    )
    print()
    print(
        "| recording | node CPU (% of one core) | observation age p50 (ms) | "
        "observation age p95 (ms) | request->wire p95 (ms) | requests | recorded frames/s | "
        "frames missed | record tick p50 / p99 (ms) |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for mode in ("off", "on"):
        rows = runs[mode]
        col = {key: [r[key] for r in rows if key in r and np.isfinite(r[key])] for key in rows[0]}
        recorded = _cell(col["fps"]) if mode == "on" else "-"
        missed = _cell(col["missed"], 0) if mode == "on" else "-"
        tick = f"{_cell(col['tick_p50'], 2)} / {_cell(col['tick_p99'], 2)}" if mode == "on" else "-"
        print(
            f"| {mode} | {_cell(col['cpu'])} | {_cell(col['age_p50'], 2)} | "
            f"{_cell(col['age_p95'], 2)} | {_cell(col['request_p95'], 2)} | "
            f"{_cell(col['requests'], 0)} | {recorded} | {missed} | {tick} |"
        )
    print()
    print("cells: median over the runs (min..max)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
