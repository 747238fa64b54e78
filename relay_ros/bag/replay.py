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
3. starts :class:`~relay_ros.node.policy_node.PolicyNode` with ``use_sim_time``,
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

The pieces live in their own modules: :mod:`~relay_ros.bag.replay_inputs`
(params file, node configuration, bag checks), :mod:`~relay_ros.bag.replay_monitor`
(hold periods, refusal grouping), :mod:`~relay_ros.bag.replay_report` (report
types, reading the preview back, gaps, the text) and
:mod:`~relay_ros.bag.replay_plot` (the PNG). This module runs them in order and
re-exports their public names, so ``from relay_ros.bag.replay import ...`` is
all a caller needs.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from relay_ros.bag.reader import SUPPORTED_STORAGES, BagError, BagReader
from relay_ros.bag.replay_inputs import (
    BagInput,
    ReplayError,
    default_output_path,
    node_config,
    read_bag_input,
    read_params_file,
    required_topics,
    resolve_server_url,
)
from relay_ros.bag.replay_monitor import ReplayMonitor
from relay_ros.bag.replay_plot import plot_replay
from relay_ros.bag.replay_report import (
    PREVIEW_TAG,
    Chunk,
    HoldCommand,
    HoldPeriod,
    JointGap,
    ReplayReport,
    command_gaps,
    read_preview,
)

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

_TRAJECTORY_TYPE = "trajectory_msgs/msg/JointTrajectory"
_DIAGNOSTICS_TYPE = "diagnostic_msgs/msg/DiagnosticArray"


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
    required = required_topics(config)
    inputs = read_bag_input(bag_path, required, config.joint_states_topic)
    node_url, url_text = resolve_server_url(url, model)
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
    inputs: BagInput,
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
    from relay_ros.node.policy_node import PolicyNode

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
            record_topics[node.resolve_topic_name(out.topic)] = _TRAJECTORY_TYPE
        record_topics["/diagnostics"] = _DIAGNOSTICS_TYPE

        monitor_node = Node(
            f"{node.get_name()}_replay_monitor",
            context=context,
            parameter_overrides=[Parameter("use_sim_time", value=True)],
        )
        monitor = ReplayMonitor(node, start_s)
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


def _progress(
    player: Any, monitor: ReplayMonitor, inputs: BagInput, duration: float
) -> ReplayProgress:
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
