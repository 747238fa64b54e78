"""``relay-ros``: the project's command line, one subcommand per task.

This module only parses arguments, calls the library function that does the
work and prints its result; new subcommands add a ``_add_<name>`` parser and a
``_run_<name>`` function to :data:`_COMMANDS`.

Exit codes: 0 success; 1 the command ran but its result fails the check
(``replay``: nothing was commanded, or a chunk was refused without
``--allow-refusals``; ``status --once``: no policy_node answered, or one is at ERROR
or STALE); 2 usage or input error (one line on stderr, no
traceback); 130 interrupted.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from relay_ros.bag.reader import BagError
from relay_ros.bag.replay import ReplayError, ReplayProgress, parse_param_override, replay
from relay_ros.models import MODEL_IDS
from relay_ros.paths import ConfigNotFoundError
from relay_ros.stop_signals import interrupt_once

__all__ = ["main"]

PROG = "relay-ros"


class _Failure(Exception):
    """An expected error: its message is printed as one line and the exit code is 2."""


def _add_replay(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
) -> argparse.ArgumentParser:
    parser = sub.add_parser(
        "replay",
        help="replay a bag through policy_node (dry run) and report what it would command",
        description=(
            "Play a rosbag2 bag (mcap or sqlite3) through policy_node in dry-run mode on "
            "bag time, record what it would have commanded into an output bag and print "
            "a report. See docs/replay.md."
        ),
    )
    parser.add_argument("bag", type=Path, help="bag directory, or one .mcap/.db3 file")
    parser.add_argument(
        "--params-file",
        type=Path,
        help="policy_node parameters (default: the package's config/<model>.yaml)",
    )
    parser.add_argument(
        "--camera-map", type=Path, help="camera map YAML (default: the params file's)"
    )
    parser.add_argument(
        "--output",
        type=Path,
        help="output bag to create (default: ./<bag>_replay_<date-time>)",
    )
    parser.add_argument(
        "--rate", type=float, default=1.0, help="playback rate factor (default 1.0)"
    )
    parser.add_argument("--plot", type=Path, help="write a PNG: commanded vs recorded per joint")
    parser.add_argument("--model", choices=MODEL_IDS, help="model (default: the params file's)")
    parser.add_argument(
        "--seed", type=int, help="sampling seed, same seed -> same chunks (default: params file)"
    )
    parser.add_argument(
        "--storage",
        choices=("mcap", "sqlite3"),
        default="mcap",
        help="storage of the output bag (default mcap)",
    )
    parser.add_argument(
        "--url",
        nargs="?",
        const="",
        metavar="URL",
        help=(
            "policy server: without this flag a reference server is started for the run; "
            "'--url' alone uses WALLE_URL (environment or .env); '--url ws://host:port/{model}' "
            "uses that server"
        ),
    )
    parser.add_argument(
        "--policy",
        choices=("recorded", "synthetic"),
        help=(
            "policy of the reference server (not with --url): 'recorded' (default) answers "
            "with the recorded joint states at t_obs + i*dt, so the report's headline is the "
            "timing error the bridge adds; 'synthetic' is a smooth made-up motion"
        ),
    )
    parser.add_argument(
        "-p",
        "--param",
        action="append",
        default=[],
        metavar="NAME:=VALUE",
        help="override a node parameter of the params file (ROS style, YAML value); repeatable",
    )
    parser.add_argument(
        "--save-observations",
        type=Path,
        metavar="DIR",
        help=(
            "write every observation the server receives into DIR (new or empty): one PNG per "
            "camera as the model sees it (after resize/pad) and the state as JSON"
        ),
    )
    parser.add_argument(
        "--allow-refusals",
        action="store_true",
        help="exit 0 even if chunks were refused (still 1 if nothing was commanded)",
    )
    return parser


def _print_progress(progress: object) -> None:
    assert isinstance(progress, ReplayProgress)
    state = f"holding: {progress.hold_reason}" if progress.hold_reason else "streaming"
    sys.stderr.write(
        f"[{progress.fraction * 100:5.1f}%] bag {progress.bag_time_s:7.2f} / "
        f"{progress.duration_s:.2f} s | requests {progress.requests:4d} | "
        f"chunks {progress.chunks:4d} | {state}\n"
    )
    sys.stderr.flush()


def _run_replay(args: argparse.Namespace) -> int:
    try:
        overrides = dict(parse_param_override(text) for text in args.param)
        report = replay(
            args.bag,
            params_file=args.params_file,
            camera_map=args.camera_map,
            output=args.output,
            rate=args.rate,
            seed=args.seed,
            model=args.model,
            url=args.url,
            policy=args.policy,
            storage=args.storage,
            plot=args.plot,
            save_observations=args.save_observations,
            overrides=overrides,
            progress=_print_progress,
        )
    except (BagError, ReplayError, ConfigNotFoundError) as exc:
        raise _Failure(str(exc)) from None
    except ValueError as exc:  # ParameterError, CameraMapError: a configuration mistake
        raise _Failure(str(exc)) from None
    sys.stdout.write(report.format() + "\n")
    if args.plot is not None:
        sys.stdout.write(f"plot: {args.plot}\n")
    if args.save_observations is not None:
        sys.stdout.write(f"observations: {args.save_observations}\n")
    failures = report.failures(allow_refusals=args.allow_refusals)
    for failure in failures:
        sys.stderr.write(f"{PROG} replay: failed: {failure}\n")
    return 1 if failures else 0


def _add_status(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
) -> argparse.ArgumentParser:
    parser = sub.add_parser(
        "status",
        help="every policy_node on the ROS domain: lifecycle state, server, chunks, latency",
        description=(
            "Show every policy_node on this ROS domain (ROS_DOMAIN_ID) from /diagnostics: "
            "lifecycle state, level, policy server, chunks, latency p50, age of the last "
            "observation and why it holds. Live (redrawn every second, Ctrl-C to quit) or "
            "--once. Needs no ros2 command line. See docs/node.md."
        ),
    )
    parser.add_argument(
        "--once",
        action="store_true",
        help=(
            "listen --wait seconds, print once and exit: 0 when policy_nodes answered and "
            "none is at ERROR or STALE, else 1"
        ),
    )
    parser.add_argument("--json", action="store_true", help="with --once: JSON instead of a table")
    parser.add_argument(
        "--wait",
        type=float,
        default=2.5,
        help="with --once: seconds to listen (default 2.5: every node publishes at 1 Hz)",
    )
    return parser


def _add_export(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
) -> argparse.ArgumentParser:
    parser = sub.add_parser(
        "export",
        help="turn a bag (teleoperated demonstrations) into a LeRobot v3.0 dataset episode",
        description=(
            "Export a rosbag2 bag (mcap or sqlite3) as one episode of a LeRobot v3.0 dataset, "
            "through the code policy_node records with: the cameras of the camera map as the "
            "model is sent them, the state and the measured positions of the commanded joints "
            "as action, every frame labelled as intervention. OUT is created, or appended to "
            "when it holds episodes of the same layout. See docs/recording.md."
        ),
    )
    parser.add_argument("bag", type=Path, help="bag directory, or one .mcap/.db3 file")
    parser.add_argument("output", type=Path, metavar="OUT", help="dataset directory")
    parser.add_argument(
        "--params-file",
        type=Path,
        help="policy_node parameters (default: the package's config/<model>.yaml); "
        "record_fps, record_video_codec and record_robot_type apply",
    )
    parser.add_argument(
        "--camera-map", type=Path, help="camera map YAML (default: the params file's)"
    )
    parser.add_argument("--model", choices=MODEL_IDS, help="model (default: the params file's)")
    parser.add_argument(
        "--image-size",
        type=_image_size,
        metavar="HxW",
        help="size of the stored frames, e.g. 224x224 (default: the model's image_size)",
    )
    parser.add_argument(
        "-p",
        "--param",
        action="append",
        default=[],
        metavar="NAME:=VALUE",
        help="override a node parameter of the params file (ROS style, YAML value), e.g. "
        "prompt:='fold the towel' or record_fps:=30; repeatable",
    )
    return parser


def _run_status(args: argparse.Namespace) -> int:
    if not (args.wait > 0 and args.wait < 3600):
        raise _Failure(f"--wait {args.wait} must be seconds > 0 (and under an hour)")
    if args.json and not args.once:
        raise _Failure("--json prints once: add --once")
    # Imported here: rclpy only for this command.
    from relay_ros.node.status import run_status

    try:
        return run_status(once=args.once, json_output=args.json, wait_s=args.wait, out=sys.stdout)
    except KeyboardInterrupt:
        if args.once:
            raise
        return 0  # the way to quit the live view


def _image_size(text: str) -> tuple[int, int]:
    height, sep, width = text.lower().partition("x")
    try:
        size = (int(height), int(width))
    except ValueError:
        size = (0, 0)
    if not sep or min(size) <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not HEIGHTxWIDTH, e.g. 224x224")
    return size


def _print_export_progress(progress: Any) -> None:
    fraction = progress.bag_s / progress.duration_s if progress.duration_s > 0 else 1.0
    sys.stderr.write(
        f"[{fraction * 100:5.1f}%] bag {progress.bag_s:7.2f} / {progress.duration_s:.2f} s "
        f"| frames {progress.frames:5d}\n"
    )
    sys.stderr.flush()


def _run_export(args: argparse.Namespace) -> int:
    # Imported here: PyAV and pyarrow are needed by export only (and take ~0.3 s).
    try:
        from relay_ros.bag.export import ExportError, export
    except ImportError as exc:
        raise _Failure(
            f'export needs PyAV and pyarrow ({exc}); install them: python3 -m pip install "av>=14" '
            '"pyarrow>=15"'
        ) from None
    try:
        overrides = dict(parse_param_override(text) for text in args.param)
        result = export(
            args.bag,
            args.output,
            params_file=args.params_file,
            camera_map=args.camera_map,
            model=args.model,
            overrides=overrides,
            image_size=args.image_size,
            progress=_print_export_progress,
        )
    except (ExportError, ReplayError, ConfigNotFoundError) as exc:
        raise _Failure(str(exc)) from None
    skipped = (
        f", {result.frames_skipped} frame(s) not taken: {result.skip_reasons}"
        if result.frames_skipped
        else ""
    )
    sys.stdout.write(
        f"episode {result.episode}: {result.frames} frames{skipped}\n"
        f"dataset: {result.dataset} ({result.episodes_total} episode(s))\n"
    )
    return 0


_COMMANDS: dict[
    str,
    tuple[
        Callable[[argparse._SubParsersAction[argparse.ArgumentParser]], argparse.ArgumentParser],
        Callable[[argparse.Namespace], int],
    ],
] = {
    "replay": (_add_replay, _run_replay),
    "status": (_add_status, _run_status),
    "export": (_add_export, _run_export),
}


def build_parser() -> argparse.ArgumentParser:
    """The ``relay-ros`` argument parser with every subcommand."""
    parser = argparse.ArgumentParser(prog=PROG, description="relay_ros command line tools")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (add, _run) in _COMMANDS.items():
        add(sub).set_defaults(_command=name)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Console entry point ``relay-ros``; returns the exit code.

    The first SIGINT or SIGTERM interrupts the command (exit 130) and the command
    stops what it started; later ones are ignored so that this cleanup runs to its
    end (:func:`relay_ros.stop_signals.interrupt_once`).
    """
    with interrupt_once():
        command = ""
        try:
            parser = build_parser()
            args = parser.parse_args(argv)
            command = f" {args.command}"
            _add, run = _COMMANDS[args._command]
            return run(args)
        except _Failure as exc:
            message = " ".join(line.strip() for line in str(exc).splitlines())
            sys.stderr.write(f"{PROG}{command}: error: {message}\n")
            return 2
        except KeyboardInterrupt:
            sys.stderr.write(f"{PROG}{command}: interrupted\n")
            return 130


if __name__ == "__main__":
    raise SystemExit(main())
