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
    check_joint_names,
    default_output_path,
    node_config,
    parse_param_override,
    read_bag_input,
    read_params_file,
    replay_parameters,
    required_topics,
    resolve_server_url,
)
from relay_ros.bag.replay_monitor import ReplayMonitor
from relay_ros.bag.replay_observations import ObservationSaver
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
    "POLICIES",
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
    "parse_param_override",
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


#: Policies of the reference server a replay can run; the first is the default.
POLICIES = ("recorded", "synthetic")


@dataclass(frozen=True)
class _Plan:
    """Everything :func:`replay` settled before anything starts."""

    bag: Path
    params_file: Path
    params: dict[str, Any]
    config: Any
    required: dict[str, str]
    inputs: BagInput
    node_url: str | None
    url_text: str
    output: Path
    rate: float
    seed: int | None
    model: str
    storage: str
    plot: Path | None
    policy: str | None
    save_observations: Path | None
    node_name: str
    connect_timeout_s: float
    clock_hz: float


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
    policy: str | None = None,
    storage: str = "mcap",
    plot: str | os.PathLike[str] | None = None,
    save_observations: str | os.PathLike[str] | None = None,
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
        camera_map: Camera map YAML (default: the params file's, a relative path
            there taken from the params file's folder; else the package's).
        output: Output bag directory to create (default :func:`default_output_path`).
        rate: Playback rate factor (1.0 = recorded pace).
        seed: Sampling seed sent with every observation (default: the params file's).
        model: Model ID (default: the params file's ``model``, else ``pi05``).
        url: Policy server: None starts the reference server in this process; a
            ``ws://`` URL (``{model}`` filled in) uses that server; ``""`` uses
            ``WALLE_URL`` (environment or ``.env``).
        policy: The reference server's policy: ``"recorded"`` (default: the
            recorded joint states at ``t_obs + i*dt``, see
            :mod:`relay_ros.server.recorded`) or ``"synthetic"``. Not with ``url``.
        storage: Output bag storage, ``mcap`` or ``sqlite3``.
        plot: Write a PNG of commanded vs recorded positions here.
        save_observations: Write every observation the server receives (PNG per
            camera, state JSON) into this new or empty directory. Reference server only.
        overrides: Node parameters (name -> value) over the params file, as
            ``-p name:=value``; ``use_sim_time``, ``dry_run``, ``autostart`` and
            ``policy_url`` are refused.
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
        ReplayError: Bad option, wrong topic type, a configured joint the bag
            does not record, or no policy server.
        ValueError: The node configuration is invalid (``ParameterError``,
            ``CameraMapError``), the message names the parameter.
    """
    plan = _plan(
        Path(bag),
        params_file=params_file,
        camera_map=camera_map,
        output=output,
        rate=rate,
        seed=seed,
        model=model,
        url=url,
        policy=policy,
        storage=storage,
        plot=plot,
        save_observations=save_observations,
        overrides=overrides or {},
        node_name=node_name,
        connect_timeout_s=connect_timeout_s,
        clock_hz=clock_hz,
    )
    saver = (
        ObservationSaver(
            plan.save_observations, plan.config.state_joints, plan.inputs.start_ns / 1e9
        )
        if plan.save_observations is not None
        else None
    )
    try:
        with _ros_context(context) as ctx, _policy_server(plan, saver) as (server_url, url_text):
            outcome = _run(plan, ctx, server_url, url_text, progress)
    finally:
        if saver is not None:
            saver.close()
    report = _report(plan, url_text, outcome)
    if plan.plot is not None:
        plot_replay(report, plan.inputs.joint_times, plan.inputs.joint_positions, plan.plot)
    return report


def _plan(
    bag: Path,
    *,
    params_file: str | os.PathLike[str] | None,
    camera_map: str | os.PathLike[str] | None,
    output: str | os.PathLike[str] | None,
    rate: float,
    seed: int | None,
    model: str | None,
    url: str | None,
    policy: str | None,
    storage: str,
    plot: str | os.PathLike[str] | None,
    save_observations: str | os.PathLike[str] | None,
    overrides: Mapping[str, Any],
    node_name: str,
    connect_timeout_s: float,
    clock_hz: float,
) -> _Plan:
    """Check every input (options, params, bag, joints) before a server or node starts."""
    from relay_ros.paths import config_dir

    if not (isinstance(rate, (int, float)) and math.isfinite(rate) and rate > 0):
        raise ReplayError(f"rate {rate!r} must be a finite number > 0")
    if storage not in SUPPORTED_STORAGES:
        raise ReplayError(f"storage '{storage}' is not one of {list(SUPPORTED_STORAGES)}")
    if url is not None and policy is not None:
        raise ReplayError(
            f"policy '{policy}' is a policy of the reference server; with --url the server "
            "at that URL answers"
        )
    if url is not None and save_observations is not None:
        raise ReplayError(
            "--save-observations records what the reference server receives; it cannot be "
            "used with --url"
        )
    if url is None:
        policy = policy or POLICIES[0]
        if policy not in POLICIES:
            raise ReplayError(f"policy '{policy}' is not one of {list(POLICIES)}")
    if params_file is None:
        params_file = config_dir() / f"{model or 'pi05'}.yaml"
    file_params = read_params_file(params_file, node_name)
    model = model or str(overrides.get("model") or file_params.get("model") or "pi05")
    if camera_map is not None and not Path(camera_map).is_file():
        raise ReplayError(f"camera map '{camera_map}' does not exist")
    # Every input error is found before a server or node starts.
    BagReader(bag).close()
    given: dict[str, Any] = {"model": model, **overrides}
    if camera_map is not None:
        given["camera_map"] = str(camera_map)
    if seed is not None:
        given["seed"] = int(seed)
    params = replay_parameters(params_file, file_params, given)
    config = node_config(file_params, params)
    required = required_topics(config)
    inputs = read_bag_input(bag, required, config.joint_states_topic)
    check_joint_names(bag, config, {**file_params, **params}, inputs, config.joint_states_topic)
    node_url, url_text = resolve_server_url(url, model)
    output_path = Path(output) if output is not None else default_output_path(bag)
    if output_path.exists():
        raise ReplayError(f"output bag '{output_path}' exists already; bags are never overwritten")
    if plot is not None and not Path(plot).parent.is_dir():
        raise ReplayError(f"directory of the plot '{plot}' does not exist")
    return _Plan(
        bag=bag,
        params_file=Path(params_file),
        params=params,
        config=config,
        required=required,
        inputs=inputs,
        node_url=node_url,
        url_text=url_text,
        output=output_path,
        rate=float(rate),
        seed=seed,
        model=model,
        storage=storage,
        plot=None if plot is None else Path(plot),
        policy=policy,
        save_observations=None if save_observations is None else Path(save_observations),
        node_name=node_name,
        connect_timeout_s=connect_timeout_s,
        clock_hz=clock_hz,
    )


@contextlib.contextmanager
def _policy_server(
    plan: _Plan, observation_hook: Callable[[str, dict[str, Any]], None] | None
) -> Iterator[tuple[str, str]]:
    """(URL for the node, description): the given server, or a reference server for this run."""
    if plan.node_url is not None:
        yield plan.node_url, plan.url_text
        return
    from relay_ros.server import ServerOptions, run_server_in_thread
    from relay_ros.server.recorded import RecordedPolicyError, policy_for_config

    factory = None
    if plan.policy == "recorded":
        inputs = plan.inputs
        try:
            recorded = policy_for_config(plan.config, inputs.joint_times, inputs.joint_positions)
        except RecordedPolicyError as exc:
            raise ReplayError(f"recorded policy: {exc}") from None
        factory = lambda: recorded  # noqa: E731  (the server calls a zero-argument factory)
    options = ServerOptions(models=(plan.model,), policy=factory, observation_hook=observation_hook)
    with run_server_in_thread(options) as handle:
        url = handle.url_template
        yield url, f"reference server at {url} ({plan.policy} policy), started for this replay"


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


@dataclass
class _Outcome:
    """What the running replay measured, read once everything has stopped."""

    preview_topic: str
    played: dict[str, int]
    recorded: dict[str, int]
    hold_periods: list[HoldPeriod]
    refusals: dict[str, int]
    counts: dict[str, int]
    latency_ms: dict[str, float | None]
    diagnostics: dict[str, str]


class _Session:
    """The running parts: policy node, monitor node, recorder, executor thread, player.

    :meth:`close` stops and destroys whatever was started, in reverse order, also
    after a failure half-way.
    """

    def __init__(self, plan: _Plan, context: Any, server_url: str) -> None:
        from rclpy.clock import Clock, ClockType
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.node import Node
        from rclpy.parameter import Parameter

        from relay_ros.bag.recorder import BagRecorder
        from relay_ros.node.policy_node import PolicyNode

        self.plan = plan
        self.context = context
        self.player: Any = None
        self.recorder: Any = None
        self.monitor_node: Any = None
        self.executor: Any = None
        self.thread: threading.Thread | None = None
        params = {**plan.params, "policy_url": server_url}
        self.node = PolicyNode(
            plan.node_name,
            context=context,
            cli_args=["--ros-args", "--params-file", str(plan.params_file)],
            parameter_overrides=[Parameter(k, value=v) for k, v in params.items()],
        )
        try:
            name = self.node.get_name()
            self.preview_topic = f"/{name}/preview"
            self.monitor_node = Node(
                f"{name}_replay_monitor",
                context=context,
                parameter_overrides=[Parameter("use_sim_time", value=True)],
            )
            self.monitor = ReplayMonitor(self.node, plan.inputs.start_ns / 1e9)
            # Sampled on wall time: the node's clock stands still before /clock starts.
            self.monitor_node.create_timer(
                0.02, self.monitor.sample, clock=Clock(clock_type=ClockType.STEADY_TIME)
            )
            self.recorder = BagRecorder(
                self.monitor_node, plan.output, self._record_topics(), storage=plan.storage
            )
            self.executor = SingleThreadedExecutor(context=context)
            self.executor.add_node(self.node)
            self.executor.add_node(self.monitor_node)
            self.thread = threading.Thread(
                target=self.executor.spin, name="relay-replay-executor", daemon=True
            )
            self.thread.start()
        except BaseException:
            self.close()
            raise

    def _record_topics(self) -> dict[str, str]:
        topics = {self.preview_topic: _TRAJECTORY_TYPE}
        for out in self.node.config.outputs:
            topics[out.topic] = _TRAJECTORY_TYPE
        topics["/diagnostics"] = _DIAGNOSTICS_TYPE
        return topics

    def wait_connected(self, url_text: str) -> None:
        """Until the node has the server's metadata; ReplayError after the deadline."""
        timeout = self.plan.connect_timeout_s
        if not _wait(lambda: _status_value(self.node, "connected") == "True", timeout):
            detail = self.node.diagnostics_status().message
            raise ReplayError(
                f"policy server {url_text} did not answer within {timeout:g} s: {detail}"
            )
        _wait(lambda: self.monitor_node.count_subscribers(self.preview_topic) >= 1, 5.0)

    def play(self, progress: Callable[[ReplayProgress], None] | None) -> dict[str, int]:
        """Play the configured topics with ``/clock``; messages played per topic."""
        from relay_ros.bag.player import CLOCK_TOPIC, BagPlayer

        plan = self.plan
        self.player = BagPlayer(
            self.context,
            plan.bag,
            rate=plan.rate,
            topics=list(plan.required),
            clock_hz=plan.clock_hz,
            node_name=f"{self.node.get_name()}_bag_player",
        )
        if not self.player.wait_for_subscribers(10.0, [*plan.required, CLOCK_TOPIC]):
            _LOG.warning("not every played topic was matched after 10 s; playing anyway")
        self.player.start()
        while not self.player.wait(timeout=0.5):
            if progress is not None:
                progress(_progress(self.player, self.monitor, plan.inputs))
        if progress is not None:
            progress(_progress(self.player, self.monitor, plan.inputs))
        return dict(self.player.progress.played)

    def finish(self, played: dict[str, int]) -> _Outcome:
        """Let the last replies land, stop spinning, close the output bag, read the node."""
        # Replies and recorder messages still in flight at the bag end.
        time.sleep(0.3)
        self.monitor.sample()
        self._stop_executor()
        node = self.node
        snapshot = node.latency.snapshot()
        status = node.diagnostics_status()
        diagnostics = {kv.key: kv.value for kv in status.values}
        diagnostics["message"] = status.message
        self.recorder.close()
        recorded = self.recorder.counts
        self.recorder = None
        return _Outcome(
            preview_topic=self.preview_topic,
            played=played,
            recorded=recorded,
            hold_periods=self.monitor.finish(),
            refusals=dict(self.monitor.refusals),
            counts=node.counts,
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
            diagnostics=diagnostics,
        )

    def _stop_executor(self) -> None:
        if self.executor is not None:
            self.executor.shutdown(timeout_sec=5.0)
        if self.thread is not None:
            self.thread.join(5.0)
            self.thread = None

    def close(self) -> None:
        if self.recorder is not None:
            with contextlib.suppress(BagError):
                self.recorder.close()
            self.recorder = None
        if self.player is not None:
            self.player.close()
            self.player = None
        self._stop_executor()
        if self.monitor_node is not None:
            self.monitor_node.destroy_node()
            self.monitor_node = None
        self.node.destroy_node()


def _run(
    plan: _Plan,
    context: Any,
    server_url: str,
    url_text: str,
    progress: Callable[[ReplayProgress], None] | None,
) -> _Outcome:
    """Node, monitor and recorder up; wait for the server; play the bag; collect."""
    session = _Session(plan, context, server_url)
    try:
        session.wait_connected(url_text)
        played = session.play(progress)
        return session.finish(played)
    finally:
        session.close()


def _report(plan: _Plan, url_text: str, outcome: _Outcome) -> ReplayReport:
    """Read the output bag back and put the report together."""
    chunks, holds = read_preview(plan.output, outcome.preview_topic)
    steps = [float(np.median(np.diff(c.times))) for c in chunks if len(c.times) > 1]
    inputs = plan.inputs
    return ReplayReport(
        bag=plan.bag,
        output=plan.output,
        model=plan.model,
        url=url_text,
        seed=plan.seed if plan.seed is not None else _seed_of(plan.config),
        rate=plan.rate,
        bag_start_ns=inputs.start_ns,
        duration_s=(inputs.end_ns - inputs.start_ns) / 1e9,
        played=outcome.played,
        bag_topics=inputs.topics,
        recorded=outcome.recorded,
        preview_topic=outcome.preview_topic,
        dt=float(np.median(steps)) if steps else None,
        chunks=chunks,
        holds=holds,
        hold_periods=outcome.hold_periods,
        refusals=outcome.refusals,
        counts=outcome.counts,
        latency_ms=outcome.latency_ms,
        gaps=command_gaps(chunks, holds, inputs.joint_times, inputs.joint_positions),
        diagnostics=outcome.diagnostics,
        policy=plan.policy,
    )


def _seed_of(config: Any) -> int | None:
    seed = getattr(config, "seed", None)
    return None if seed is None or seed < 0 else int(seed)


def _status_value(node: Any, key: str) -> str | None:
    for kv in node.diagnostics_status().values:
        if kv.key == key:
            return kv.value
    return None


def _progress(player: Any, monitor: ReplayMonitor, inputs: BagInput) -> ReplayProgress:
    state = player.progress
    duration = (inputs.end_ns - inputs.start_ns) / 1e9
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
