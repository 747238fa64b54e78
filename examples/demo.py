"""Where does a request's time go? Network vs inference, and the route taken.

    python examples/demo.py pi05            # WALLE_URL from the environment or a .env
    python examples/demo.py groot -n 50 --jpeg

Connects to the policy server for MODEL the way every client does (``WALLE_URL``
with ``{model}`` filled in, the direct route when the server offers one and
``WALLE_DIRECT`` is unset or 1), prints the server's metadata and the route taken,
then sends N observations of the model's shape (synthetic frames at the server's
image size, a zero state) and prints, per request and as percentiles, the round
trip split into the server's own time (its ``server_timing``) and the network
(upload and download, ``PolicyClient.infer_reply(...).timing``). If the network is
most of the round trip, look at the route, the link and ``--jpeg`` (docs/network.md);
if the server is, at the model.

Exit codes: 0 done, 1 the server refused an observation, 2 no server (WALLE_URL
unset, unreachable) or a bad argument. A colcon install ships this file as
``share/relay_ros/examples/demo.py``.
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from typing import Any

import numpy as np

from relay_ros import PolicyClient
from relay_ros.models import MODEL_IDS
from relay_ros.pipeline.image_encoding import encode_frame
from relay_ros.pipeline.observation import ObservationBuilder
from relay_ros.pipeline.server_spec import ServerSpec
from relay_ros.wire.env import direct_enabled, redact_url, resolve_url


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="demo.py",
        description="Time N observations against the policy server of MODEL: network vs "
        "server time, the route taken (direct or proxied) and the server's metadata.",
    )
    parser.add_argument("model", nargs="?", default="pi05", choices=list(MODEL_IDS))
    parser.add_argument("-n", "--requests", type=int, default=20, help="observations (20)")
    parser.add_argument("--prompt", default="pick up the red block", help="task instruction")
    parser.add_argument(
        "--jpeg", action="store_true", help="send frames as JPEG bytes (pi0/pi05 only)"
    )
    parser.add_argument(
        "--open-timeout",
        type=float,
        default=300.0,
        help="seconds to wait for the server, which answers only once its model is loaded (300)",
    )
    parser.add_argument(
        "--timeout", type=float, default=60.0, help="seconds one request may take (60)"
    )
    args = parser.parse_args(argv)
    if args.requests < 1:
        parser.error(f"--requests {args.requests}: expected at least 1")
    if args.jpeg and args.model == "groot":
        parser.error("--jpeg: GR00T servers take raw frames only")
    return args


def _frames(spec: ServerSpec, keys: list[str], jpeg: bool) -> dict[str, Any]:
    """One synthetic frame per camera at the server's image size (a gradient, so a
    JPEG is as large as a camera's would be)."""
    height, width = spec.image_size
    ramp = np.linspace(0, 255, width, dtype=np.float32)
    frame = np.stack([np.tile(ramp, (height, 1))] * 3, axis=-1).astype(np.uint8)
    return {key: encode_frame(frame, spec.image_size) if jpeg else frame for key in keys}


def _route(client: PolicyClient, metadata: dict[str, Any]) -> str:
    """Which connection the client uses, in words."""
    offered = metadata.get("direct_url")
    if offered is None:
        return "proxied: the server offers no direct route"
    if client.url == offered:
        return f"direct: {redact_url(offered)}"
    if not direct_enabled():
        return f"proxied: WALLE_DIRECT=0 (the server offers {redact_url(offered)})"
    return f"proxied: the direct route {redact_url(offered)} was not taken (see the log)"


def _ms(values: list[float], q: float) -> str:
    return f"{1000.0 * float(np.percentile(values, q)):7.1f}"


def main(argv: list[str] | None = None) -> int:
    """Run the demo; returns the exit code."""
    args = _arguments(argv)
    try:
        url = resolve_url(args.model)
    except KeyError:
        sys.stderr.write(
            "WALLE_URL is not set: export it, or put it in a .env file in the directory you "
            "run from, e.g. WALLE_URL='wss://<workspace>--walle-{model}.modal.run'\n"
        )
        return 2
    print(f"connecting to {redact_url(url)} (a server loading its model answers when ready)")
    started = time.perf_counter()
    try:
        client = PolicyClient(args.model, open_timeout=args.open_timeout)
    except (OSError, RuntimeError, ValueError) as exc:
        sys.stderr.write(f"cannot connect to {redact_url(url)}: {type(exc).__name__}: {exc}\n")
        return 2
    with client:
        metadata = client.get_server_metadata()
        print(f"connected in {time.perf_counter() - started:.2f} s")
        print(f"route: {_route(client, metadata)}")
        print("metadata:")
        for key in sorted(metadata):
            print(f"  {key}: {metadata[key]!r}")
        spec = ServerSpec.from_metadata(metadata, model=args.model)
        keys = list(spec.camera_keys[: spec.max_cameras])
        builder = ObservationBuilder(spec, camera_keys=keys)
        session = uuid.uuid4().hex if spec.needs_session_id else None
        frames = _frames(spec, keys, args.jpeg)
        state = np.zeros(spec.state_width, dtype=np.float32)
        totals: list[float] = []
        servers: list[float] = []
        networks: list[float] = []
        sent: list[int] = []
        untimed = False
        progress = sys.stderr.isatty()
        for i in range(args.requests):
            observation = builder.build(
                frames, state, args.prompt, session_id=session, seed=i,
                observation_time=time.time(),
            )  # fmt: skip
            reply = client.infer_reply(observation, timeout=args.timeout)
            if reply.error is not None:
                message = reply.error.get("message")
                sys.stderr.write(f"\nthe server refused observation {i + 1}: {message}\n")
                return 1
            assert reply.timing is not None  # every reply of infer_reply is timed
            split = reply.timing.split()
            untimed = split["server_s"] is None
            server = split["server_s"] or 0.0
            totals.append(split["total_s"])
            servers.append(server)
            networks.append(split["upload_s"] + split["download_s"])
            sent.append(reply.timing.bytes_sent)
            line = (
                f"[{i + 1:3d}/{args.requests}] round trip {1000 * split['total_s']:7.1f} ms = "
                f"network {1000 * networks[-1]:6.1f} ms + server {1000 * server:6.1f} ms"
            )
            sys.stderr.write(f"\r{line}" if progress else f"{line}\n")
            sys.stderr.flush()
        if progress:
            sys.stderr.write("\n")
    print(f"\n{args.requests} requests, {np.median(sent) / 1000:.1f} kB each (framing included)")
    print("             p50 ms   p95 ms   max ms")
    for name, values in (("round trip", totals), ("server", servers), ("network", networks)):
        print(f"{name:<10} {_ms(values, 50)}  {_ms(values, 95)}  {_ms(values, 100)}")
    share = float(np.median(networks)) / max(float(np.median(totals)), 1e-9)
    print(f"the network is {100 * share:.0f}% of the median round trip")
    if untimed:
        print("(the server sends no server_timing: its time counts as network here)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
