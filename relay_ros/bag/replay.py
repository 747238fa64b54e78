"""``relay-ros replay``: play a recorded bag through policy_node in dry-run mode.

Robot teams record cameras and joint states on the robot (``ros2 bag record``)
and test a configuration offline before it drives hardware. :func:`replay` does
the whole run in one process:

1. reads the bag (:class:`~relay_ros.bag.reader.BagReader`), checks that it holds
   the camera topics of the camera map and the joint states topic with the right
   types, and reads the recorded joint states (a corrupt file fails here, before
   anything starts);
2. starts the reference policy server in a thread (or uses ``url``: a given
   server, or ``WALLE_URL``);
3. starts :class:`~relay_ros.policy_node.PolicyNode` with ``use_sim_time``,
   ``dry_run`` and ``autostart`` forced on, so it runs on bag time and only
   publishes on ``~/preview``;
4. records ``~/preview``, the per-controller trajectory topics and
   ``/diagnostics`` into an output bag (:class:`~relay_ros.bag.recorder.BagRecorder`,
   stamped with bag time) while a :class:`~relay_ros.bag.player.BagPlayer` plays
   the input topics with ``/clock``;
5. reads the output bag back and builds a :class:`ReplayReport`: messages played
   per topic, chunks, latency, refusals and holds with their reasons and bag
   times, and per joint the gap between commanded and recorded positions
   (optionally a PNG, :func:`plot_replay`).

Everything runs in one rclpy context with one ``SingleThreadedExecutor`` (rclpy
7.1's MultiThreadedExecutor skips timer periods, see ``policy_node``).

Timing is real: the player publishes at the recorded pace (scaled by ``rate``)
and the policy answers over a real WebSocket, so *which* recorded samples an
observation catches depends on scheduling (see docs/replay.md,
"Reproducibility"). The policy itself is deterministic for a fixed ``seed``: the
same observation gives the same chunk.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from relay_ros.bag.reader import SUPPORTED_STORAGES, BagError, BagReader

__all__ = [
    "PREVIEW_TAG",
    "Chunk",
    "HoldCommand",
    "HoldPeriod",
    "JointGap",
    "ReplayError",
    "ReplayProgress",
    "ReplayReport",
    "command_gaps",
    "default_output_path",
    "node_config",
    "plot_replay",
    "read_params_file",
    "read_preview",
    "replay",
]

_LOG = logging.getLogger(__name__)

#: Prefix of ``header.frame_id`` on the node's chunk messages (``t_obs=<seconds>``).
PREVIEW_TAG = "t_obs="

_CAMERA_TYPES = {"raw": "sensor_msgs/msg/Image", "compressed": "sensor_msgs/msg/CompressedImage"}
_JOINT_STATE_TYPE = "sensor_msgs/msg/JointState"
_TRAJECTORY_TYPE = "trajectory_msgs/msg/JointTrajectory"
_DIAGNOSTICS_TYPE = "diagnostic_msgs/msg/DiagnosticArray"
# Numbers that change from message to message (ages, positions, steps, counts);
# digits inside names (joint4, base_0_rgb) are kept.
_NUMBER = re.compile(r"(?<![\w.'])-?\d+(?:\.\d+)?(?:e-?\d+)?(?![\w'])")


class ReplayError(RuntimeError):
    """The replay cannot run (bad option, bag does not fit the configuration, no server)."""


# ---------------------------------------------------------------------- report types
@dataclass(frozen=True)
class Chunk:
    """One chunk the node would have commanded (all controllers of one publication).

    Attributes:
        stamp: ``header.stamp``, bag time in seconds (absolute).
        t_obs: Time of the observation it was computed from, bag time in seconds.
        joint_names: Commanded joints, controllers in configuration order.
        times: (N,) absolute bag time of each point (stamp + time_from_start), s.
        positions: (N, J) commanded positions (rad, or m for prismatic joints).
    """

    stamp: float
    t_obs: float
    joint_names: tuple[str, ...]
    times: np.ndarray
    positions: np.ndarray

    def action_indices(self, dt: float) -> np.ndarray:
        """Index of each point in the policy's chunk: ``round((time - t_obs) / dt)``."""
        return np.rint((self.times - self.t_obs) / dt).astype(int)


@dataclass(frozen=True)
class HoldCommand:
    """A hold the node published (one point, zero velocity): stop at ``positions``."""

    stamp: float
    joint_names: tuple[str, ...]
    positions: np.ndarray


@dataclass(frozen=True)
class HoldPeriod:
    """An interval in which the node held position instead of streaming chunks.

    ``start``/``end`` are seconds after the bag start (``end`` None: still holding
    at the end of the bag); ``reason`` is the node's first sentence for it.
    """

    reason: str
    start: float
    end: float | None


@dataclass(frozen=True)
class JointGap:
    """|commanded(t) - recorded(t)| for one joint over the commanded points.

    Recorded joint states are interpolated linearly (by bag time) at the time
    of every commanded point inside the recorded range. Units of the joint
    (rad or m). ``samples`` is 0 (and the numbers NaN) if nothing overlapped.
    """

    joint: str
    mean_abs: float
    max_abs: float
    samples: int


@dataclass(frozen=True)
class ReplayProgress:
    """What :func:`replay` reports to its ``progress`` callback, about twice a second."""

    bag_time_s: float
    duration_s: float
    fraction: float
    played: Mapping[str, int]
    chunks: int
    requests: int
    hold_reason: str | None


@dataclass
class ReplayReport:
    """The outcome of a replay (times in seconds after the bag start unless noted).

    Attributes:
        bag: Input bag path.
        output: Output bag path (holds ``~/preview``, controller topics, diagnostics).
        model: Policy model ID.
        url: Policy server URL used.
        seed: Sampling seed (None: random sampling).
        rate: Playback rate factor.
        bag_start_ns: Bag time of the first message (absolute, ns).
        duration_s: Bag length.
        played: Messages played per topic.
        bag_topics: Every topic of the input bag with its message count.
        recorded: Messages recorded into the output bag per topic.
        preview_topic: The node's preview topic.
        dt: Control period of the chunks (s).
        chunks: Chunks the node would have commanded, in publication order.
        holds: Hold commands the node published.
        hold_periods: When and why the node held position.
        refusals: Refused chunks/frames per reason (numbers in reasons are ``#``).
        counts: The node's counters at the end (requests, chunks_published, ...).
        latency_ms: Latency statistics (count, mean, p50, p95, p99, max), ms.
        gaps: Per joint gap between commanded and recorded positions.
        diagnostics: Values of the node's last ``/diagnostics`` status.
    """

    bag: Path
    output: Path
    model: str
    url: str
    seed: int | None
    rate: float
    bag_start_ns: int
    duration_s: float
    played: dict[str, int]
    bag_topics: dict[str, int]
    recorded: dict[str, int]
    preview_topic: str
    dt: float | None
    chunks: list[Chunk] = field(default_factory=list)
    holds: list[HoldCommand] = field(default_factory=list)
    hold_periods: list[HoldPeriod] = field(default_factory=list)
    refusals: dict[str, int] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    latency_ms: dict[str, float | None] = field(default_factory=dict)
    gaps: dict[str, JointGap] = field(default_factory=dict)
    diagnostics: dict[str, str] = field(default_factory=dict)

    @property
    def bag_start_s(self) -> float:
        """Bag time of the first message, absolute seconds."""
        return self.bag_start_ns / 1e9

    def format(self) -> str:
        """The human-readable report ``relay-ros replay`` prints."""
        seed = "random" if self.seed is None else str(self.seed)
        lines = [
            f"replayed {self.bag} ({self.duration_s:.2f} s) at rate {self.rate:g} through "
            f"policy_node (dry run, {self.model}, seed {seed})",
            f"policy server: {self.url}",
            f"output bag: {self.output}",
            "  recorded: " + ", ".join(f"{t} {n}" for t, n in self.recorded.items()),
            "",
            "messages played:",
        ]
        width = max((len(t) for t in self.bag_topics), default=10)
        for topic, total in self.bag_topics.items():
            if topic in self.played:
                lines.append(f"  {topic:<{width}}  {self.played[topic]:>6} / {total}")
            else:
                lines.append(f"  {topic:<{width}}  {'-':>6} / {total} (not used by the node)")
        c = self.counts
        lines += [
            "",
            f"chunks: {len(self.chunks)} published on {self.preview_topic}, "
            f"{c.get('requests', 0)} requests, {c.get('chunks_received', 0)} replies, "
            f"{c.get('error_replies', 0)} error replies, "
            f"{c.get('connection_errors', 0)} connection errors",
        ]
        if self.chunks:
            first, last = self.chunks[0].stamp, self.chunks[-1].stamp
            lines.append(
                f"  first at {first - self.bag_start_s:.3f} s, last at "
                f"{last - self.bag_start_s:.3f} s (bag time), {len(self.holds)} hold command(s)"
            )
        lat = self.latency_ms
        if lat.get("count"):
            lines.append(
                "latency (observation -> reply, bag time): "
                + ", ".join(
                    f"{k} {lat[k]:.1f} ms" for k in ("p50", "p95", "p99", "max") if lat.get(k)
                )
                + f" over {int(lat['count'] or 0)} replies"
            )
        else:
            lines.append("latency: no replies")
        lines.append("")
        if self.refusals:
            lines.append(f"refusals: {sum(self.refusals.values())}")
            for reason, n in self.refusals.items():
                lines.append(f"  {n:>4} x {reason}")
        else:
            lines.append("refusals: none")
        if self.hold_periods:
            lines.append("holds (node held position instead of streaming):")
            for hold in self.hold_periods:
                end = f"{hold.end:.3f} s" if hold.end is not None else "end of bag"
                lines.append(f"  {hold.start:7.3f} s .. {end}: {hold.reason}")
        else:
            lines.append("holds: none")
        lines.append("")
        if self.gaps:
            lines.append("commanded vs recorded joint states, |commanded(t) - recorded(t)|:")
            jw = max(len(j) for j in self.gaps)
            lines.append(f"  {'joint':<{jw}}  {'mean':>8}  {'max':>8}  points")
            for gap in self.gaps.values():
                lines.append(
                    f"  {gap.joint:<{jw}}  {gap.mean_abs:8.4f}  {gap.max_abs:8.4f}  {gap.samples}"
                )
        else:
            lines.append("commanded vs recorded: nothing commanded")
        return "\n".join(lines)


# ---------------------------------------------------------------------- helpers
def read_params_file(path: str | os.PathLike[str], node_name: str = "policy_node") -> dict:
    """The ``ros__parameters`` of a ROS 2 params file that apply to ``node_name``.

    Sections ``/**``, ``**``, ``node_name`` and ``/node_name`` are merged in that
    order (later wins), like rcl does for one node.

    Raises:
        ReplayError: The file is missing or is not a params file.
    """
    p = Path(path)
    if not p.is_file():
        raise ReplayError(f"params file '{p}' does not exist")
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise ReplayError(f"params file '{p}' is not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise ReplayError(
            f"params file '{p}' is not a ROS 2 params file: expected "
            "'<node>: {ros__parameters: {...}}' at the top level"
        )
    merged: dict[str, Any] = {}
    for key in ("/**", "**", node_name, f"/{node_name}"):
        section = data.get(key)
        if isinstance(section, dict) and isinstance(section.get("ros__parameters"), dict):
            merged.update(_flatten(section["ros__parameters"]))
    return merged


def _flatten(params: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in params.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(_flatten(value, f"{name}."))
        else:
            out[name] = value
    return out


def default_output_path(bag: str | os.PathLike[str], directory: Path | None = None) -> Path:
    """``<bag name>_replay_<YYYYmmdd-HHMMSS>`` in ``directory`` (default: working directory).

    A counter is appended if that path exists (bags are never overwritten).
    """
    p = Path(bag)
    name = p.stem if p.suffix in (".mcap", ".db3") else p.name
    base = (directory or Path.cwd()) / f"{name}_replay_{datetime.now():%Y%m%d-%H%M%S}"
    path, n = base, 1
    while path.exists():
        n += 1
        path = base.with_name(f"{base.name}_{n}")
    return path


def _normalise(reason: str) -> str:
    """A reason with its changing numbers (ages, positions) replaced by ``#``."""
    return _NUMBER.sub("#", reason)


def _hold_key(reason: str) -> str:
    """What makes two hold reasons one hold period: the text before the first ':'.

    "stale observation: stale input: ..." and "stale observation: stale inputs: ..."
    (a second camera going stale) are one period; a reason without ':' counts
    with its changing numbers replaced (:func:`_normalise`).
    """
    head, sep, _rest = reason.partition(": ")
    return head if sep else _normalise(reason)


def _stamp_s(stamp: Any) -> float:
    return int(stamp.sec) + int(stamp.nanosec) * 1e-9


def _duration_s(duration: Any) -> float:
    return int(duration.sec) + int(duration.nanosec) * 1e-9


@dataclass
class _BagInput:
    """What the replay needs from the input bag before anything starts."""

    start_ns: int
    end_ns: int
    topics: dict[str, int]
    types: dict[str, str]
    joint_times: np.ndarray  # (M,) bag time, absolute seconds
    joint_positions: dict[str, np.ndarray]  # joint -> (M,) positions, NaN where absent


def _read_input(bag: Path, required: Mapping[str, str], joint_topic: str) -> _BagInput:
    """Open the bag, check the topics and types, read every joint state (and all data)."""
    with BagReader(bag) as reader:
        reader.require_topics(required)
        for topic, msgtype in required.items():
            actual = reader.topics[topic].msgtype
            if actual != msgtype:
                raise ReplayError(
                    f"bag '{bag}' records topic '{topic}' as {actual}; the configuration "
                    f"expects {msgtype}"
                )
        times: list[float] = []
        rows: list[dict[str, float]] = []
        # Read every played message once: a damaged data file fails here, not mid-replay.
        for message in reader.messages(list(required)):
            if message.topic != joint_topic:
                continue
            msg = reader.deserialize(message)
            times.append(message.timestamp_ns / 1e9)
            rows.append({n: float(v) for n, v in zip(msg.name, msg.position)})
        names = list(dict.fromkeys(n for row in rows for n in row))
        positions = {n: np.array([row.get(n, math.nan) for row in rows]) for n in names}
        return _BagInput(
            start_ns=reader.start_ns,
            end_ns=reader.end_ns,
            topics={name: info.count for name, info in reader.topics.items()},
            types={name: info.msgtype for name, info in reader.topics.items()},
            joint_times=np.array(times),
            joint_positions=positions,
        )


def node_config(file_params: Mapping[str, Any], overrides: Mapping[str, Any]) -> Any:
    """The node's :class:`~relay_ros.params.NodeConfig` for these parameters, without rclpy.

    The same resolution as policy_node: declared defaults, then the params file,
    then ``overrides``; per-output and per-joint parameters follow ``outputs``.

    Raises:
        ParameterError: A parameter is missing or invalid (the message names it).
    """
    from relay_ros.params import (
        PARAMETERS,
        build_config,
        limit_parameter_specs,
        output_parameter_specs,
    )

    given = {**file_params, **overrides}

    def value(name: str, default: Any) -> Any:
        return given.get(name, default)

    values = {spec.name: value(spec.name, spec.default) for spec in PARAMETERS}
    for name in values.get("outputs") or []:
        for spec in output_parameter_specs(name):
            values[spec.name] = value(spec.name, spec.default)
    commanded = [
        joint
        for name in values.get("outputs") or []
        for joint in values.get(f"outputs.{name}.joints") or []
    ]
    for spec in limit_parameter_specs(list(dict.fromkeys(commanded))):
        values[spec.name] = value(spec.name, spec.default)
    return build_config(values)


def _required_topics(config: Any) -> dict[str, str]:
    """Topic -> type the node subscribes to (cameras from the camera map, joint states)."""
    from relay_ros.camera_map import camera_constraints, load_camera_map

    allowed, max_cameras = camera_constraints(config.model)
    cameras = load_camera_map(config.camera_map, allowed_keys=allowed, max_cameras=max_cameras)
    required = {entry.topic: _CAMERA_TYPES[entry.transport] for entry in cameras}
    required[config.joint_states_topic] = _JOINT_STATE_TYPE
    return required


def _resolve_url(url: str | None, model: str) -> tuple[str | None, str]:
    """(url for the node or None to start the reference server, description)."""
    if url is None:
        return None, "reference server"
    if url in ("", "env", "WALLE_URL"):
        from relay_ros.env import resolve_url

        try:
            resolved = resolve_url(model)
        except KeyError:
            raise ReplayError(
                "--url without a value uses WALLE_URL, but WALLE_URL is not set in the "
                "environment or a .env file; give the URL, e.g. --url ws://host:8000/{model}"
            ) from None
        return resolved, resolved
    if not url.startswith(("ws://", "wss://")):
        raise ReplayError(f"server URL '{url}' must start with ws:// or wss://")
    return url, url.replace("{model}", model)


# ---------------------------------------------------------------------- ROS side
class _Monitor:
    """Samples the node's hold reason, refusals and counters on the executor thread."""

    def __init__(self, node: Any, bag_start_s: float) -> None:
        self._node = node
        self._start = bag_start_s
        self._lock = threading.Lock()
        self.periods: list[HoldPeriod] = []
        self._open: tuple[str, str, float] | None = None  # (normalised, text, start)
        self.refusals: dict[str, int] = {}
        self._refusal_count = 0
        self._last_refusal: str | None = None
        self.counts: dict[str, int] = dict(node.counts)
        self.hold_reason: str | None = None

    def sample(self) -> None:
        node = self._node
        now = node.get_clock().now().nanoseconds / 1e9 - self._start
        counts = node.counts
        reason = node.hold_reason
        refusal = node.last_refusal
        with self._lock:
            self.counts = counts
            self.hold_reason = reason
            new = counts["refusals"] - self._refusal_count
            if new > 0 and refusal is not None:
                key = _normalise(refusal)
                self.refusals[key] = self.refusals.get(key, 0) + new
            self._refusal_count = counts["refusals"]
            self._last_refusal = refusal
            key = _hold_key(reason) if reason is not None else None
            if self._open is not None and self._open[0] != key:
                self.periods.append(HoldPeriod(self._open[1], self._open[2], max(now, 0.0)))
                self._open = None
            if key is not None and self._open is None:
                self._open = (key, reason, max(now, 0.0))  # type: ignore[arg-type]

    def finish(self) -> list[HoldPeriod]:
        with self._lock:
            periods = list(self.periods)
            if self._open is not None:
                periods.append(HoldPeriod(self._open[1], self._open[2], None))
            return periods


@contextlib.contextmanager
def _policy_server(url: str | None, model: str) -> Iterator[str]:
    if url is not None:
        yield url
        return
    from relay_ros.server import ServerOptions, run_server_in_thread

    with run_server_in_thread(ServerOptions(models=(model,))) as handle:
        yield handle.url_template


@contextlib.contextmanager
def _ros_context(context: Any) -> Iterator[Any]:
    if context is not None:
        yield context
        return
    import rclpy

    ctx = rclpy.context.Context()
    rclpy.init(context=ctx)
    try:
        yield ctx
    finally:
        rclpy.shutdown(context=ctx)


def _wait(predicate: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def replay(
    bag: str | os.PathLike[str],
    *,
    params_file: str | os.PathLike[str] | None = None,
    camera_map: str | os.PathLike[str] | None = None,
    output: str | os.PathLike[str] | None = None,
    rate: float = 1.0,
    seed: int | None = None,
    model: str | None = None,
    url: str | None = None,
    storage: str = "mcap",
    plot: str | os.PathLike[str] | None = None,
    overrides: Mapping[str, Any] | None = None,
    context: Any = None,
    node_name: str = "policy_node",
    progress: Callable[[ReplayProgress], None] | None = None,
    connect_timeout_s: float = 30.0,
    clock_hz: float = 100.0,
) -> ReplayReport:
    """Play ``bag`` through policy_node (dry run, bag time) and report what it commanded.

    Args:
        bag: Input bag (directory, or one ``.mcap``/``.db3`` file).
        params_file: Node parameters (default ``config/<model>.yaml``).
        camera_map: Camera map YAML (default: the params file's, else the package's).
        output: Output bag directory to create (default :func:`default_output_path`).
        rate: Playback rate factor (1.0 = recorded pace).
        seed: Sampling seed sent with every observation (default: the params file's).
        model: Model ID (default: the params file's ``model``, else ``pi05``).
        url: Policy server: None starts the reference server in this process; a
            ``ws://`` URL (``{model}`` filled in) uses that server; ``""`` uses
            ``WALLE_URL`` (environment or ``.env``).
        storage: Output bag storage, ``mcap`` or ``sqlite3``.
        plot: Write a PNG of commanded vs recorded positions here.
        overrides: Extra node parameters (name -> value), applied last.
        context: rclpy context to use (default: a new one, shut down at the end).
        node_name: Name of the policy node (its preview topic is ``/<name>/preview``).
        progress: Called about twice a second (wall time) while playing.
        connect_timeout_s: Wall seconds to wait for the policy server.
        clock_hz: ``/clock`` messages per wall second. The node's timer fires on
            the first ``/clock`` past each tick, so a higher rate puts observation
            times closer to the ideal ones (at more CPU).

    Raises:
        BagError: The bag is missing, corrupt, or lacks a configured topic
            (:class:`~relay_ros.bag.reader.MissingTopicsError` names them).
        ReplayError: Bad option, wrong topic type, or no policy server.
        ValueError: The node configuration is invalid (``ParameterError``,
            ``CameraMapError``), the message names the parameter.
    """
    from relay_ros.paths import config_dir

    bag_path = Path(bag)
    if not (isinstance(rate, (int, float)) and math.isfinite(rate) and rate > 0):
        raise ReplayError(f"rate {rate!r} must be a finite number > 0")
    if storage not in SUPPORTED_STORAGES:
        raise ReplayError(f"storage '{storage}' is not one of {list(SUPPORTED_STORAGES)}")
    if params_file is None:
        params_file = config_dir() / f"{model or 'pi05'}.yaml"
    file_params = read_params_file(params_file, node_name)
    model = model or str(file_params.get("model") or "pi05")
    if camera_map is not None and not Path(camera_map).is_file():
        raise ReplayError(f"camera map '{camera_map}' does not exist")
    # Every input error is found before a server or node starts.
    BagReader(bag_path).close()
    params: dict[str, Any] = {
        "model": model,
        "use_sim_time": True,
        "dry_run": True,
        "autostart": True,
    }
    if camera_map is not None:
        params["camera_map"] = str(Path(camera_map).resolve())
    if seed is not None:
        params["seed"] = int(seed)
    params.update(overrides or {})
    config = node_config(file_params, params)
    required = _required_topics(config)
    inputs = _read_input(bag_path, required, config.joint_states_topic)
    node_url, url_text = _resolve_url(url, model)
    output_path = Path(output) if output is not None else default_output_path(bag_path)
    if output_path.exists():
        raise ReplayError(f"output bag '{output_path}' exists already; bags are never overwritten")
    if plot is not None and not Path(plot).parent.is_dir():
        raise ReplayError(f"directory of the plot '{plot}' does not exist")

    with _ros_context(context) as ctx, _policy_server(node_url, model) as server_url:
        return _run(
            bag_path,
            ctx,
            server_url=server_url,
            url_text=url_text
            if node_url is not None
            else f"reference server at {server_url}, started for this replay",
            params_file=Path(params_file),
            params=params,
            required=required,
            inputs=inputs,
            output=output_path,
            rate=float(rate),
            seed=seed,
            model=model,
            storage=storage,
            plot=plot,
            node_name=node_name,
            progress=progress,
            connect_timeout_s=connect_timeout_s,
            clock_hz=clock_hz,
        )


def _run(
    bag: Path,
    context: Any,
    *,
    server_url: str,
    url_text: str,
    params_file: Path,
    params: Mapping[str, Any],
    required: Mapping[str, str],
    inputs: _BagInput,
    output: Path,
    rate: float,
    seed: int | None,
    model: str,
    storage: str,
    plot: str | os.PathLike[str] | None,
    node_name: str,
    progress: Callable[[ReplayProgress], None] | None,
    connect_timeout_s: float,
    clock_hz: float,
) -> ReplayReport:
    from rclpy.clock import Clock, ClockType
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.node import Node
    from rclpy.parameter import Parameter

    from relay_ros.bag.player import CLOCK_TOPIC, BagPlayer
    from relay_ros.bag.recorder import BagRecorder
    from relay_ros.policy_node import PolicyNode

    params = {**params, "policy_url": server_url}
    node = PolicyNode(
        node_name,
        context=context,
        cli_args=["--ros-args", "--params-file", str(params_file)],
        parameter_overrides=[Parameter(k, value=v) for k, v in params.items()],
    )
    executor = None
    player = None
    recorder = None
    monitor_node = None
    thread = None
    try:
        config = node.config
        start_s = inputs.start_ns / 1e9
        preview_topic = f"/{node.get_name()}/preview"
        record_topics = {preview_topic: _TRAJECTORY_TYPE}
        for out in config.outputs:
            record_topics[out.topic] = _TRAJECTORY_TYPE
        record_topics["/diagnostics"] = _DIAGNOSTICS_TYPE

        monitor_node = Node(
            f"{node.get_name()}_replay_monitor",
            context=context,
            parameter_overrides=[Parameter("use_sim_time", value=True)],
        )
        monitor = _Monitor(node, start_s)
        # Sampled on wall time: the node's clock stands still before /clock starts.
        monitor_node.create_timer(
            0.02, monitor.sample, clock=Clock(clock_type=ClockType.STEADY_TIME)
        )
        recorder = BagRecorder(monitor_node, output, record_topics, storage=storage)
        executor = SingleThreadedExecutor(context=context)
        executor.add_node(node)
        executor.add_node(monitor_node)
        thread = threading.Thread(target=executor.spin, name="relay-replay-executor", daemon=True)
        thread.start()

        connected = _wait(lambda: _status_value(node, "connected") == "True", connect_timeout_s)
        if not connected:
            detail = node.diagnostics_status().message
            raise ReplayError(
                f"policy server {url_text} did not answer within {connect_timeout_s:g} s: {detail}"
            )
        _wait(lambda: monitor_node.count_subscribers(preview_topic) >= 1, 5.0)
        player = BagPlayer(
            context,
            bag,
            rate=rate,
            topics=list(required),
            clock_hz=clock_hz,
            node_name=f"{node.get_name()}_bag_player",
        )
        if not player.wait_for_subscribers(10.0, [*required, CLOCK_TOPIC]):
            _LOG.warning("not every played topic was matched after 10 s; playing anyway")
        duration = (inputs.end_ns - inputs.start_ns) / 1e9
        player.start()
        while not player.wait(timeout=0.5):
            if progress is not None:
                progress(_progress(player, monitor, inputs, duration))
        if progress is not None:
            progress(_progress(player, monitor, inputs, duration))
        played = dict(player.progress.played)
        # Replies and recorder messages still in flight at the bag end.
        time.sleep(0.3)
        monitor.sample()
        executor.shutdown(timeout_sec=5.0)
        thread.join(5.0)
        thread = None
        hold_periods = monitor.finish()
        counts = node.counts
        snapshot = node.latency.snapshot()
        status = node.diagnostics_status()
        diagnostics = {kv.key: kv.value for kv in status.values}
        diagnostics["message"] = status.message
        recorder.close()
        recorded = recorder.counts
        recorder = None
    finally:
        if recorder is not None:
            with contextlib.suppress(BagError):
                recorder.close()
        if player is not None:
            player.close()
        if executor is not None:
            executor.shutdown(timeout_sec=5.0)
        if thread is not None:
            thread.join(5.0)
        if monitor_node is not None:
            monitor_node.destroy_node()
        node.destroy_node()

    chunks, holds = read_preview(output, preview_topic)
    steps = [float(np.median(np.diff(c.times))) for c in chunks if len(c.times) > 1]
    dt = float(np.median(steps)) if steps else None
    report = ReplayReport(
        bag=bag,
        output=output,
        model=model,
        url=url_text,
        seed=seed if seed is not None else _seed_of(config),
        rate=rate,
        bag_start_ns=inputs.start_ns,
        duration_s=(inputs.end_ns - inputs.start_ns) / 1e9,
        played=played,
        bag_topics=inputs.topics,
        recorded=recorded,
        preview_topic=preview_topic,
        dt=dt,
        chunks=chunks,
        holds=holds,
        hold_periods=hold_periods,
        refusals=dict(monitor.refusals),
        counts=counts,
        latency_ms={
            "count": float(snapshot.count),
            **{
                k: (None if v is None else v * 1000.0)
                for k, v in (
                    ("mean", snapshot.mean),
                    ("p50", snapshot.p50),
                    ("p95", snapshot.p95),
                    ("p99", snapshot.p99),
                    ("max", snapshot.max),
                )
            },
        },
        gaps=command_gaps(chunks, holds, inputs.joint_times, inputs.joint_positions),
        diagnostics=diagnostics,
    )
    if plot is not None:
        plot_replay(report, inputs.joint_times, inputs.joint_positions, plot)
    return report


def _seed_of(config: Any) -> int | None:
    seed = getattr(config, "seed", None)
    return None if seed is None or seed < 0 else int(seed)


def _status_value(node: Any, key: str) -> str | None:
    for kv in node.diagnostics_status().values:
        if kv.key == key:
            return kv.value
    return None


def _progress(player: Any, monitor: _Monitor, inputs: _BagInput, duration: float) -> ReplayProgress:
    state = player.progress
    bag_time = max(state.bag_time_ns - inputs.start_ns, 0) / 1e9 if state.bag_time_ns else 0.0
    counts = monitor.counts
    return ReplayProgress(
        bag_time_s=bag_time,
        duration_s=duration,
        fraction=min(bag_time / duration, 1.0) if duration > 0 else 1.0,
        played=dict(state.played),
        chunks=counts.get("chunks_published", 0),
        requests=counts.get("requests", 0),
        hold_reason=monitor.hold_reason,
    )


# ---------------------------------------------------------------------- analysis
def read_preview(
    output: str | os.PathLike[str], preview_topic: str
) -> tuple[list[Chunk], list[HoldCommand]]:
    """Chunks and hold commands from a recorded ``~/preview`` topic.

    Per-controller messages of one publication (same stamp and ``t_obs``) are
    merged into one :class:`Chunk`. Messages without a ``t_obs=`` tag are holds.
    """
    chunks: list[Chunk] = []
    holds: list[HoldCommand] = []
    with BagReader(output) as reader:
        if preview_topic not in reader.topics:
            return chunks, holds
        parts: dict[tuple[float, float], list[Any]] = {}
        for message in reader.messages([preview_topic]):
            msg = reader.deserialize(message)
            stamp = _stamp_s(msg.header.stamp)
            names = tuple(msg.joint_names)
            if not msg.header.frame_id.startswith(PREVIEW_TAG):
                if msg.points:
                    holds.append(HoldCommand(stamp, names, np.array(msg.points[0].positions)))
                continue
            t_obs = float(msg.header.frame_id[len(PREVIEW_TAG) :])
            parts.setdefault((stamp, t_obs), []).append(msg)
    for (stamp, t_obs), msgs in parts.items():
        names: tuple[str, ...] = ()
        columns = []
        times = np.array([stamp + _duration_s(p.time_from_start) for p in msgs[0].points])
        for msg in msgs:
            names += tuple(msg.joint_names)
            columns.append(
                np.array([list(p.positions) for p in msg.points]).reshape(len(msg.points), -1)
            )
        n = min(c.shape[0] for c in columns)
        chunks.append(Chunk(stamp, t_obs, names, times[:n], np.hstack([c[:n] for c in columns])))
    chunks.sort(key=lambda c: c.stamp)
    holds.sort(key=lambda h: h.stamp)
    return chunks, holds


def command_gaps(
    chunks: Sequence[Chunk],
    holds: Sequence[HoldCommand],
    joint_times: np.ndarray,
    joint_positions: Mapping[str, np.ndarray],
) -> dict[str, JointGap]:
    """Per joint mean and max |commanded(t) - recorded(t)|.

    commanded(t) follows joint_trajectory_controller: a chunk's points count until
    the next chunk or hold replaces it. recorded(t) is the joint state linearly
    interpolated at t (bag time); points outside the recorded range are skipped.
    """
    switches = sorted([c.stamp for c in chunks] + [h.stamp for h in holds])
    diffs: dict[str, list[np.ndarray]] = {}
    for chunk in chunks:
        keep = chunk.times < _replaced_at(chunk, switches)
        for j, name in enumerate(chunk.joint_names):
            diffs.setdefault(name, [])
            rec = joint_positions.get(name)
            if rec is None or len(joint_times) == 0:
                continue
            t = chunk.times[keep]
            inside = (t >= joint_times[0]) & (t <= joint_times[-1])
            valid = ~np.isnan(rec)
            if not inside.any() or valid.sum() < 1:
                continue
            recorded = np.interp(t[inside], joint_times[valid], rec[valid])
            diffs[name].append(np.abs(chunk.positions[keep, j][inside] - recorded))
    gaps: dict[str, JointGap] = {}
    for name, parts in diffs.items():
        values = np.concatenate(parts) if parts else np.array([])
        if values.size:
            gaps[name] = JointGap(name, float(values.mean()), float(values.max()), int(values.size))
        else:
            gaps[name] = JointGap(name, math.nan, math.nan, 0)
    return gaps


def _replaced_at(chunk: Chunk, switches: Sequence[float]) -> float:
    """When the next chunk or hold replaces ``chunk`` (inf if none does), bag time s."""
    return next((s for s in switches if s > chunk.stamp), math.inf)


def plot_replay(
    report: ReplayReport,
    joint_times: np.ndarray,
    joint_positions: Mapping[str, np.ndarray],
    path: str | os.PathLike[str],
) -> Path:
    """Write a PNG: per joint, recorded positions and every commanded chunk, holds shaded."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    joints = list(report.gaps) or list(joint_positions)
    t0 = report.bag_start_s
    switches = sorted([c.stamp for c in report.chunks] + [h.stamp for h in report.holds])
    fig, axes = plt.subplots(
        len(joints), 1, figsize=(10, 1.8 * len(joints) + 1), sharex=True, squeeze=False
    )
    for ax, joint in zip(axes[:, 0], joints):
        if joint in joint_positions:
            ax.plot(
                joint_times - t0, joint_positions[joint], color="black", lw=1.2, label="recorded"
            )
        for k, chunk in enumerate(report.chunks):
            if joint in chunk.joint_names:
                j = chunk.joint_names.index(joint)
                followed = chunk.times < _replaced_at(chunk, switches)
                t, q = chunk.times - t0, chunk.positions[:, j]
                ax.plot(t, q, color="tab:blue", lw=0.8, alpha=0.3, ls="--")
                ax.plot(
                    t[followed],
                    q[followed],
                    color="tab:blue",
                    lw=1.4,
                    label="commanded (followed part solid)" if k == 0 else None,
                )
        for k, hold in enumerate(report.holds):
            if joint in hold.joint_names:
                ax.plot(
                    hold.stamp - t0,
                    hold.positions[hold.joint_names.index(joint)],
                    "x",
                    color="tab:red",
                    label="hold" if k == 0 else None,
                )
        for k, period in enumerate(report.hold_periods):
            end = period.end if period.end is not None else report.duration_s
            ax.axvspan(
                period.start,
                end,
                color="tab:orange",
                alpha=0.15,
                label="holding" if k == 0 else None,
            )
        gap = report.gaps.get(joint)
        title = (
            joint
            if gap is None or not gap.samples
            else (f"{joint}  (mean |cmd-rec| {gap.mean_abs:.3f}, max {gap.max_abs:.3f})")
        )
        ax.set_title(title, fontsize=9, loc="left")
        ax.grid(alpha=0.3)
    axes[0, 0].legend(loc="upper right", fontsize=8)
    axes[-1, 0].set_xlabel("bag time (s)")
    fig.suptitle(f"{report.bag.name}: commanded ({report.model}, dry run) vs recorded")
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out
