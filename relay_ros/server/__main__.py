"""Command line of the reference policy server.

Installed as ``relay-policy-server``; also ``python -m relay_ros.server``.

Example: serve every model on port 8000 with 80 ms simulated inference time::

    relay-policy-server --port 8000 --latency-ms 80 --jitter-ms 10
    WALLE_URL='ws://127.0.0.1:8000/{model}' python examples/demo.py
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from relay_ros.models import MODEL_IDS
from relay_ros.server.options import DEFAULT_MAX_SESSIONS, ServerOptions, ServerStartError
from relay_ros.server.policy_server import PolicyServer
from relay_ros.stop_signals import stop_signals, take_stop_signals

__all__ = ["build_parser", "main", "options_from_args"]

logger = logging.getLogger("relay_ros.server")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (every flag maps to a :class:`ServerOptions` field)."""
    p = argparse.ArgumentParser(
        prog="relay-policy-server",
        description="Reference policy server for the relay wire protocol (synthetic policy "
        "or any Python policy object), for dry runs and tests.",
    )
    p.add_argument("--host", default="127.0.0.1", help="interface to bind (default %(default)s)")
    p.add_argument(
        "--port", type=int, default=8000, help="TCP port, 0 = any free port (default %(default)s)"
    )
    p.add_argument(
        "--port-file",
        type=Path,
        help="write the bound port to this file once listening (useful with --port 0)",
    )
    p.add_argument(
        "--model",
        action="append",
        choices=MODEL_IDS,
        help="model served on /MODEL; repeatable (default: all of pi05, pi0, groot)",
    )
    p.add_argument(
        "--lora",
        action="append",
        default=[],
        metavar="NAME",
        help="LoRA adapter name to accept in sampling_params.lora; repeatable",
    )
    p.add_argument(
        "--latency-ms", type=float, default=0.0, help="simulated inference time per request (ms)"
    )
    p.add_argument(
        "--jitter-ms",
        type=float,
        default=0.0,
        help="uniform random extra latency in [-J, +J] ms (total never below 0)",
    )
    p.add_argument(
        "--load-delay-s",
        type=float,
        default=0.0,
        help="simulated model loading: metadata is sent only this long after start (s)",
    )
    p.add_argument(
        "--idle-timeout-s",
        type=float,
        default=30.0,
        help="close connections idle this long (s); 0 = never (default %(default)s)",
    )
    p.add_argument(
        "--max-message-mib",
        type=float,
        default=64.0,
        help="larger frames get 'Invalid request payload' (MiB, default %(default)s); "
        "frames over twice this are dropped with close code 1009",
    )
    p.add_argument("--direct-url", help="advertise this direct route as metadata direct_url")
    p.add_argument(
        "--embodiment",
        help="GR00T embodiment: a name in config/groot_embodiments.yaml (default: its "
        "'default'), a YAML path, or PATH.yaml:NAME",
    )
    p.add_argument(
        "--layout",
        metavar="NAME|FILE",
        help="serve an openpi environment's observation layout (droid, aloha, libero, or "
        "a layout YAML file) on every model path, as a stock openpi server would take it",
    )
    p.add_argument(
        "--policy",
        metavar="MODULE:FACTORY",
        help="serve the object FACTORY() returns (needs infer(obs) -> dict) instead of "
        "the synthetic policy",
    )
    p.add_argument(
        "--recorded-bag",
        metavar="BAG",
        help="serve the recorded policy (relay_ros.server.recorded): the chunk for an "
        "observation at t is BAG's joint states at t + i*dt, mapped by --recorded-params",
    )
    p.add_argument(
        "--recorded-params",
        metavar="FILE",
        help="policy_node params file mapping joints to actions for --recorded-bag",
    )
    p.add_argument(
        "--needs-session-id",
        action="store_true",
        help="advertise needs_session_id and refuse observations without session_id",
    )
    p.add_argument(
        "--max-sessions",
        type=int,
        default=DEFAULT_MAX_SESSIONS,
        metavar="N",
        help="sessions kept per connection; a new session_id beyond N evicts the least "
        "recently used one (default %(default)s)",
    )
    p.add_argument(
        "--synthetic",
        choices=["flow", "visual"],
        default="flow",
        help="built-in policy: flow (a smooth motion that ignores the cameras) or visual "
        "(moves the simulated arm to the red target it finds in the cameras); "
        "default %(default)s",
    )
    p.add_argument(
        "--chunk-noise",
        type=float,
        default=0.0,
        metavar="SCALE",
        help="built-in policy: seeded chunk-to-chunk variation like a sampled VLA "
        "(0 = off, 1 = realistic); default %(default)g",
    )
    p.add_argument(
        "--action-prefix",
        action="store_true",
        help="advertise and honour the action_prefix extension (real-time chunking): the "
        "chunk starts with the committed actions the observation carries",
    )
    p.add_argument(
        "--max-speed",
        type=_numbers,
        default=(),
        metavar="RAD_S[,RAD_S...]",
        help="built-in policy: the robot's speed per action dimension (the last value "
        "for the rest); default: the visual plan's 1.6 rad/s",
    )
    p.add_argument(
        "--max-acceleration",
        type=_numbers,
        default=(),
        metavar="RAD_S2[,RAD_S2...]",
        help="built-in policy: the robot's acceleration per action dimension (the last "
        "value for the rest); default: none",
    )
    p.add_argument(
        "--rest-pose",
        type=_numbers,
        default=(),
        metavar="RAD[,RAD...]",
        help="built-in policy: the robot's rest pose per action dimension (the last value "
        "for the rest), where the plans keep what they do not move; default 0",
    )
    p.add_argument(
        "--seed",
        type=int,
        help="seed the random streams of observations without a seed (reproducible runs)",
    )
    p.add_argument(
        "--log-level",
        default="INFO",
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="logging level (default %(default)s)",
    )
    return p


def _numbers(text: str) -> tuple[float, ...]:
    """``"1.6,1.6,1.28"`` as numbers (argparse's type: a bad one is a usage error;
    ``"-1.5,0"`` works too, though argparse needs ``--rest-pose=-1.5,0`` for it)."""
    try:
        values = tuple(float(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a comma-separated list of numbers"
        ) from None
    return values


def options_from_args(args: argparse.Namespace) -> ServerOptions:
    """:class:`ServerOptions` from parsed arguments.

    Raises:
        ValueError: an option is out of range (see :class:`ServerOptions`).
    """
    policy = args.policy
    if args.recorded_bag or args.recorded_params:
        # Here, not at the top: the bag reader (rosbags) and the node's parameter
        # table load only for --recorded-bag.
        from relay_ros.bag.recorded_policy import recorded_factory

        policy = recorded_factory(
            args.recorded_bag,
            args.recorded_params,
            models=args.model,
            embodiment=args.embodiment,
            policy=args.policy,
        )
    return ServerOptions(
        host=args.host,
        port=args.port,
        models=tuple(dict.fromkeys(args.model)) if args.model else MODEL_IDS,
        lora_adapters=tuple(dict.fromkeys(args.lora)),
        latency_ms=args.latency_ms,
        jitter_ms=args.jitter_ms,
        load_delay_s=args.load_delay_s,
        idle_timeout_s=args.idle_timeout_s,
        max_message_mib=args.max_message_mib,
        direct_url=args.direct_url,
        embodiment=args.embodiment,
        layout=args.layout,
        policy=policy,
        needs_session_id=args.needs_session_id,
        synthetic=args.synthetic,
        chunk_noise=args.chunk_noise,
        action_prefix=args.action_prefix,
        max_speed=args.max_speed,
        max_acceleration=args.max_acceleration,
        rest_pose=args.rest_pose,
        seed=args.seed,
        max_sessions=args.max_sessions,
    )


def _write_port_file(path: Path, port: int) -> None:
    # Write then rename, so a reader polling the file never sees it half written.
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as f:
        f.write(f"{port}\n")
    os.replace(tmp, path)


async def _run(server: PolicyServer, port_file: Path | None) -> None:
    def on_bound(port: int) -> None:
        if port_file is not None:
            _write_port_file(port_file, port)

    await server.serve_forever(on_bound=on_bound)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the server until SIGINT/SIGTERM; exit status 0, or 2 for bad options.

    The signals are taken by :mod:`relay_ros.stop_signals`: the first one asks the
    server to close its connections and return, later ones are ignored, so a
    terminal's Ctrl-C plus ``ros2 launch`` forwarding it end in a clean exit 0.
    """
    with stop_signals() as stop:
        parser = build_parser()
        args = parser.parse_args(argv)
        logging.basicConfig(
            level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
        )
        try:
            server = PolicyServer(options_from_args(args))
        except (ValueError, ServerStartError) as exc:
            parser.error(str(exc))
        forget = stop.on_stop(server.request_stop)
        try:
            asyncio.run(_run(server, args.port_file))
        except (OSError, ServerStartError) as exc:
            logger.error("%s", exc)
            return 1
        finally:
            forget()
        if stop.requested:
            logger.info("%s: stopped", stop.describe())
    return 0


if __name__ == "__main__":
    take_stop_signals()
    sys.exit(main())
