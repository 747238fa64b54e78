"""``relay-ros replay``: play a recorded bag through policy_node in dry-run mode.

Robot teams record cameras and joint states on the robot (``ros2 bag record``)
and test a configuration offline before it drives hardware. :func:`replay` does
the whole run in one process:

1. settles and checks every input (:func:`~relay_ros.bag.replay_plan.plan_replay`):
   options, params file and ``-p`` overrides, the bag's topics and types, the
   configured joint names, the recorded joint states (a corrupt file fails
   here, before anything starts) and, by default, the recorded policy;
2. starts the reference policy server in a thread (recorded or synthetic
   policy), or uses ``url``: a given server, or ``WALLE_URL``;
3. runs a :class:`~relay_ros.bag.replay_session.ReplaySession`: policy_node with
   ``use_sim_time``, ``dry_run`` and ``autostart`` forced on (bag time, only
   ``~/preview``), a recorder for its outputs, and the bag played with ``/clock``;
4. reads the output bag back and builds a :class:`ReplayReport` (headline:
   commanded vs recorded; messages played, chunks, latency, refusals and holds
   with their reasons, per joint gaps), optionally a PNG (:func:`plot_replay`).

Timing is real: the player publishes at the recorded pace (scaled by ``rate``)
and the policy answers over a real WebSocket, so *which* recorded samples an
observation catches depends on scheduling (see docs/replay.md,
"Reproducibility"). The recorded policy's chunk depends only on the observation
time; the synthetic one is deterministic for a fixed ``seed``.

The pieces live in their own modules: :mod:`~relay_ros.bag.replay_inputs`
(params file, ``-p``, node configuration, bag and joint checks),
:mod:`~relay_ros.bag.replay_plan` (all checks in order, the plan),
:mod:`~relay_ros.bag.replay_session` (the rclpy part),
:mod:`~relay_ros.bag.replay_monitor` (hold periods, refusal grouping),
:mod:`~relay_ros.bag.replay_report` (report types, reading the preview back,
gaps, the text), :mod:`~relay_ros.bag.replay_plot` (the PNG) and
:mod:`~relay_ros.bag.replay_observations` (``--save-observations``). This module
runs them in order and re-exports their public names, so
``from relay_ros.bag.replay import ...`` is all a caller needs.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from relay_ros.bag.replay_inputs import (
    ReplayError,
    default_output_path,
    node_config,
    parse_param_override,
    read_params_file,
)
from relay_ros.bag.replay_observations import ObservationSaver
from relay_ros.bag.replay_plan import POLICIES, ReplayPlan, plan_replay
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
from relay_ros.bag.replay_session import (
    ReplayOutcome,
    ReplayProgress,
    ReplaySession,
    ros_context,
)
from relay_ros.formats import format_for
from relay_ros.server import ServerOptions, run_server_in_thread

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
    plan = plan_replay(
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
            plan.save_observations,
            plan.config.state_joints,
            plan.inputs.start_ns / 1e9,
            format_for(plan.config.model, plan.config.layout),
        )
        if plan.save_observations is not None
        else None
    )
    try:
        with ros_context(context) as ctx, _policy_server(plan, saver) as (server_url, url_text):
            outcome = _run(plan, ctx, server_url, url_text, progress)
    finally:
        if saver is not None:
            saver.close()
    report = _report(plan, url_text, outcome)
    if plan.plot is not None:
        plot_replay(report, plan.inputs.joint_times, plan.inputs.joint_positions, plan.plot)
    return report


@contextlib.contextmanager
def _policy_server(
    plan: ReplayPlan, observation_hook: Callable[[str, dict[str, Any]], None] | None
) -> Iterator[tuple[str, str]]:
    """(URL for the node, description): the given server, or a reference server for this run."""
    if plan.node_url is not None:
        yield plan.node_url, plan.url_text
        return
    recorded = plan.recorded_policy

    def factory() -> Any:  # the server builds its policy from a zero-argument factory
        return recorded

    config = plan.config
    options = ServerOptions(
        models=(plan.model,),
        # The node's adapter and layout, so that the replay runs what the robot would.
        lora_adapters=(config.lora,) if config.lora else (),
        layout=config.layout or None,
        policy=None if recorded is None else factory,
        observation_hook=observation_hook,
    )
    with run_server_in_thread(options) as handle:
        url = handle.url_template
        yield url, f"reference server at {url} ({plan.policy} policy), started for this replay"


def _run(
    plan: ReplayPlan,
    context: Any,
    server_url: str,
    url_text: str,
    progress: Callable[[ReplayProgress], None] | None,
) -> ReplayOutcome:
    """Node, monitor and recorder up; wait for the server; play the bag; collect."""
    session = ReplaySession(plan, context, server_url)
    try:
        session.wait_connected(url_text)
        played = session.play(progress)
        return session.finish(played)
    finally:
        session.close()


def _report(plan: ReplayPlan, url_text: str, outcome: ReplayOutcome) -> ReplayReport:
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
