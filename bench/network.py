"""The whole loop over an emulated network: raw vs JPEG frames, per link preset.

Usage (from the repository root; about 25 s per run, 6 runs by default)::

    .venv/bin/python bench/network.py [--presets lan,wan,lte] [--encodings raw,jpeg]
                                      [--duration 20] [--latency-ms 80]

Each run is one `relay_ros.demo.run_demo` (π0.5, early requests, the default execute
horizon, ``request_lead_s: auto``): the reference server with a fixed simulated
inference of ``--latency-ms`` (no jitter, so that the network's share is what
varies), the simulated cameras (the demo's two: ``base_0_rgb`` raw and
``left_wrist_0_rgb`` compressed, 320x240 at 15 Hz) and arm, and policy_node with
``image_encoding`` raw or jpeg, talking to the server through the link emulator
(`relay_ros.sim.link`) with the preset's bandwidth, delay, jitter and stalls.

Per run it prints:

- **bytes/request**: uplink bytes through the link per request (the observation
  with its WebSocket framing);
- **latency p50 / p99**: observation -> chunk on policy_node's clock, the same
  measure ``/diagnostics`` shows;
- **upload / server / download p50**: the node's latency split per request
  (`relay_ros.wire.request_timing`): upload = the request's transfer plus both
  propagation delays, server = the reply's ``server_timing``, download = the
  reply's transfer;
- **stall**: how long the simulated arm had no future point to follow during the
  ``--duration`` seconds after the first chunk (0 = the robot never waited);
- **goal**: for JPEG over ``wan``, p50 <= inference + RTT + 25 ms and zero stall.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from relay_ros.demo.errors import DemoError  # noqa: E402
from relay_ros.demo.result import DemoResult  # noqa: E402
from relay_ros.sim.link_profiles import PRESETS  # noqa: E402

GOAL_MARGIN_MS = 25.0


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:.0f}"


def run(
    preset: str, encoding: str, duration_s: float, latency_ms: float, context: object
) -> DemoResult:
    from relay_ros.demo import run_demo

    return run_demo(
        "pi05",
        duration_s,
        request_mode="early",
        latency_ms=latency_ms,
        jitter_ms=0.0,
        context=context,
        link=preset,
        node_overrides={"image_encoding": encoding},
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--presets", default="lan,wan,lte")
    parser.add_argument("--encodings", default="raw,jpeg")
    parser.add_argument("--duration", type=float, default=20.0, help="seconds per run")
    parser.add_argument("--latency-ms", type=float, default=80.0, help="simulated inference")
    args = parser.parse_args(argv)
    presets = args.presets.split(",")
    unknown = [p for p in presets if p not in PRESETS]
    if unknown:
        parser.error(f"unknown preset(s) {unknown}; expected some of {sorted(PRESETS)}")
    encodings = args.encodings.split(",")
    # The demo's ROS graph stays inside this process (as `python -m relay_ros.demo`).
    os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "OFF"
    import rclpy
    import rclpy.logging
    from rclpy.signals import SignalHandlerOptions

    for name in ("policy_node", "sim_cameras", "sim_arm"):
        rclpy.logging.set_logger_level(name, rclpy.logging.LoggingSeverity.ERROR)
    context = rclpy.context.Context()
    rclpy.init(context=context, signal_handler_options=SignalHandlerOptions.NO)
    rows = []
    try:
        for preset in presets:
            for encoding in encodings:
                started = time.monotonic()
                try:
                    result: DemoResult | str = run(
                        preset, encoding, args.duration, args.latency_ms, context
                    )
                except DemoError as exc:  # e.g. the node never started: say why in the table
                    result = str(exc)
                rows.append((preset, encoding, result))
                sys.stderr.write(
                    f"{preset} {encoding}: done in {time.monotonic() - started:.0f} s\n"
                )
    finally:
        context.try_shutdown()

    print(
        f"pi05, early requests, simulated inference {args.latency_ms:g} ms (no jitter), "
        f"{args.duration:g} s per run, load average {os.getloadavg()[0]:.2f}"
    )
    print()
    print(
        "| link | frames | bytes/request | latency p50 / p99 (ms) "
        "| upload / server / download p50 (ms) | stall (s) | requests | goal |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---|")
    for preset, encoding, r in rows:
        if isinstance(r, str):
            print(f"| {preset} | {encoding} | - | - | - | - | - | did not run: {r} |")
            continue
        net = r.network
        split = " / ".join(_ms(net.get(k)) for k in ("upload_s", "server_s", "download_s"))
        goal = ""
        if preset == "wan" and encoding == "jpeg":
            limit = (args.latency_ms + PRESETS["wan"].rtt_ms + GOAL_MARGIN_MS) / 1000.0
            p50 = r.latency_p50_s
            met = p50 is not None and p50 <= limit and r.stall_time_s == 0.0
            goal = f"{'met' if met else 'MISSED'} (p50 <= {limit * 1000:.0f} ms, no stall)"
        size = "-" if r.bytes_per_request is None else f"{r.bytes_per_request:,.0f}"
        print(
            f"| {preset} | {encoding} | {size} | {_ms(r.latency_p50_s)} / {_ms(r.latency_p99_s)} "
            f"| {split} | {r.stall_time_s:.3f} | {r.requests} | {goal} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
