"""``python -m relay_ros.demo``: argument parsing, printing and exit codes only.

`main` runs `run_demo` with early requests and (unless ``--no-sync``) with synchronous
requests (openpi's ``ActionChunkBroker`` behaviour), shows the live progress line on
stderr, prints the summary table of both side by side and writes the PNG.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from relay_ros.demo.errors import DemoError
from relay_ros.demo.launch_plan import ARM_NODE, CAMERAS_NODE, POLICY_NODE
from relay_ros.demo.plot import plot_demo
from relay_ros.demo.policy_settings import (
    DEMO_LAYOUTS,
    FAULTS,
    POLICY_KINDS,
    SMOOTHINGS,
    DemoPolicy,
)
from relay_ros.demo.report import format_progress, format_summary
from relay_ros.demo.result import DemoProgress, DemoResult
from relay_ros.demo.run import run_demo
from relay_ros.models import MODEL_IDS
from relay_ros.sim.link_profiles import PRESETS
from relay_ros.stop_signals import interrupt_once

__all__ = ["build_parser", "main"]


def _number(
    kind: type, what: str, *, minimum: float = 0.0, strict: bool = False
) -> Callable[[str], Any]:
    """An argparse type: ``kind(text)``, finite and above ``minimum`` (or at least it)."""
    relation = "positive" if strict and minimum == 0 else f">= {minimum:g}"

    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
        if not math.isfinite(value) or value < minimum or (strict and value == minimum):
            if relation == "positive":
                raise argparse.ArgumentTypeError(f"{text!r} is not a positive {what[2:]}")
            raise argparse.ArgumentTypeError(f"{text!r} is not {what} {relation}")
        return value

    return parse


_positive_seconds = _number(float, "a number of seconds", strict=True)
_non_negative_ms = _number(float, "a number of milliseconds")
_non_negative_number = _number(float, "a number")
_non_negative_int = _number(int, "an integer")


def build_parser() -> argparse.ArgumentParser:
    """The ``python -m relay_ros.demo`` argument parser."""
    p = argparse.ArgumentParser(
        prog="python -m relay_ros.demo",
        description="Run the reference policy server, simulated cameras and arm and "
        "policy_node on this machine; compare early and synchronous requests; write a PNG.",
    )
    p.add_argument(
        "--model", choices=MODEL_IDS, default="pi05", help="policy model (default %(default)s)"
    )
    p.add_argument(
        "--duration",
        type=_positive_seconds,
        default=20.0,
        help="seconds to run with early requests, from the first chunk (default %(default)g)",
    )
    p.add_argument(
        "--sync-duration",
        type=_positive_seconds,
        help="seconds to run with synchronous requests (default: the same as --duration)",
    )
    p.add_argument(
        "--no-sync", action="store_true", help="skip the synchronous-requests comparison run"
    )
    p.add_argument(
        "--latency-ms",
        type=_non_negative_ms,
        default=80.0,
        help="simulated inference latency of the server, ms (default %(default)g)",
    )
    p.add_argument(
        "--jitter-ms",
        type=_non_negative_ms,
        default=20.0,
        help="uniform extra latency in [-J, +J] ms (default %(default)g)",
    )
    p.add_argument(
        "--link",
        choices=sorted(PRESETS),
        help="put an emulated network link between policy_node and the server "
        "(relay_ros.sim.link; default: direct loopback)",
    )
    p.add_argument(
        "--image-encoding",
        choices=("raw", "jpeg"),
        help="policy_node's image_encoding (default: the model config's, raw); jpeg is "
        "for pi0/pi05 only",
    )
    p.add_argument(
        "--policy",
        choices=POLICY_KINDS,
        default="visual",
        help="reference policy: visual (finds the red target in the cameras and moves the arm "
        "to it) or flow (a smooth motion that ignores the cameras); default %(default)s",
    )
    p.add_argument(
        "--chunk-noise",
        type=_non_negative_number,
        default=1.0,
        metavar="SCALE",
        help="chunk-to-chunk variation of the policy, like a sampled VLA "
        "(0 = off, 1 = realistic; default %(default)g)",
    )
    p.add_argument(
        "--smoothing",
        choices=SMOOTHINGS,
        default="auto",
        help="policy_node's smoothing: auto (its choice, the splice), splice, none, prefix "
        "(the server continues the committed actions, real-time chunking; turns on "
        "--action-prefix), or the averages crossfade, lerobot_average, act_ensemble; "
        "default %(default)s",
    )
    p.add_argument(
        "--action-prefix",
        action="store_true",
        help="the reference server advertises the action_prefix extension; by default it "
        "does not, like the seeds' server a robot team has",
    )
    p.add_argument(
        "--fault",
        choices=FAULTS,
        help="make a wiring mistake on purpose and see the task fail: swap-cameras (base and "
        "wrist topics exchanged in the camera map) or swap-red-blue (a camera driver sending "
        "BGR labelled rgb8)",
    )
    p.add_argument(
        "--seed",
        type=_non_negative_int,
        default=0,
        help="seed of the target's path and the policy's noise (default %(default)s)",
    )
    p.add_argument(
        "--output-dir",
        type=Path,
        default=Path("demo_output"),
        help="where the PNG goes (default %(default)s)",
    )
    p.add_argument(
        "--visible",
        action="store_true",
        help="let other processes on this machine see the demo's topics (ros2 topic echo, "
        "rviz) on ROS_DOMAIN_ID; by default the demo's ROS graph stays inside this process, "
        "so it can never reach a real robot's controllers",
    )
    p.add_argument(
        "--layout",
        choices=DEMO_LAYOUTS,
        help="an openpi observation layout: the reference server serves it and the node "
        "runs config/LAYOUT.yaml (docs/demo.md); default: the model's own format",
    )
    p.add_argument(
        "--lora",
        metavar="NAME",
        help="a LoRA adapter: the reference server serves it, the node selects it (lora)",
    )
    p.add_argument(
        "--record",
        type=Path,
        metavar="DIR",
        help="record each run as an episode of the LeRobot v3.0 dataset DIR (policy_node's "
        "record_dir; appended to when it exists; docs/recording.md)",
    )
    p.add_argument("--verbose", action="store_true", help="show the nodes' INFO logs")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run the demo; exit status 0, 1 on a demo error, 2 on bad arguments, 130 on Ctrl-C.

    The first SIGINT or SIGTERM stops the run under way (server, executors and nodes
    are stopped before the summary of what ran is printed); later ones are ignored,
    so that this cleanup runs to its end (:func:`relay_ros.stop_signals.interrupt_once`).
    """
    with interrupt_once():
        try:
            return _main(argv)
        except KeyboardInterrupt:  # before the first run started, or while reporting
            sys.stderr.write("\ninterrupted\n")
            return 130


def _main(argv: Sequence[str] | None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING)
    if not args.visible:
        # Discovery off: the nodes only see each other (same process, same participant).
        os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "OFF"
    if not args.verbose:
        import rclpy.logging

        for name in (POLICY_NODE, CAMERAS_NODE, ARM_NODE):
            # The summary reports refusals and rejections; start-up holds are expected.
            rclpy.logging.set_logger_level(name, rclpy.logging.LoggingSeverity.ERROR)
    err = sys.stderr
    shown = [0]

    def show(p: DemoProgress) -> None:
        line = format_progress(p)
        err.write("\r" + line.ljust(shown[0]))
        err.flush()
        shown[0] = len(line)

    policy = DemoPolicy(
        kind=args.policy,
        chunk_noise=args.chunk_noise,
        smoothing=args.smoothing,
        server_prefix=True if args.action_prefix else None,
        seed=args.seed,
        layout=args.layout,
        lora=args.lora,
    )
    overrides: dict[str, Any] = {}
    if args.image_encoding:
        overrides["image_encoding"] = args.image_encoding
    if args.record is not None:
        overrides["record_dir"] = str(args.record.expanduser().resolve())
        overrides["record_robot_type"] = "relay_ros_sim_arm"
    plan = [("early", args.duration)]
    if not args.no_sync:
        plan.append(("sync", args.sync_duration or args.duration))
    results: list[DemoResult] = []
    status = 0
    try:
        for mode, seconds in plan:
            results.append(
                run_demo(
                    args.model,
                    seconds,
                    request_mode=mode,
                    latency_ms=args.latency_ms,
                    jitter_ms=args.jitter_ms,
                    progress=show,
                    link=args.link,
                    node_overrides=overrides or None,
                    policy=policy,
                    fault=args.fault,
                )
            )
            err.write("\n")
            shown[0] = 0
    except KeyboardInterrupt:
        err.write("\ninterrupted: server, executor and nodes stopped\n")
        status = 130
    except DemoError as exc:
        err.write(f"\ndemo failed: {exc}\n")
        status = 1
    if results:
        sys.stdout.write(format_summary(results) + "\n")
        if args.record is not None:
            sys.stdout.write(f"\nrecorded: {args.record} (one episode per run)\n")
        name = args.layout or args.model
        png = plot_demo(results, args.output_dir / f"demo_{name}.png")
        sys.stdout.write(f"\nplot: {png}\n")
    sys.stdout.flush()
    return status
