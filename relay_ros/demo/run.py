"""One run of the whole loop on this machine: `run_demo` -> `DemoResult`.

`run_demo` checks its arguments, then drives a `DemoRig` through its steps (start,
wait for the first chunk, run, snapshot, stop: see `relay_ros.demo.rig`) and turns
the snapshot into a `DemoResult` (`result_from_snapshot`, plain NumPy). rclpy is
only imported by the rig, inside its methods, so that importing the package (e.g.
from a launch file) does not need it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from relay_ros.demo.errors import DemoArgumentError
from relay_ros.demo.models import check_mode, check_model, load_model_config
from relay_ros.demo.policy_settings import DemoPolicy, check_fault
from relay_ros.demo.result import PRE_ROLL_S, CommandedChunk, DemoProgress, DemoResult
from relay_ros.demo.rig import DemoRig, RunSnapshot
from relay_ros.demo.server_process import server_command
from relay_ros.node.node_config import NodeConfig
from relay_ros.sim.link_profiles import LinkProfile, get_profile
from relay_ros.sim.motion_measures import jerk_rms, switch_summary
from relay_ros.sim.task import task_measures
from relay_ros.world import ALIGNED_START_S, World

__all__ = ["result_from_snapshot", "run_demo"]


def run_demo(
    model: str,
    duration_s: float,
    *,
    request_mode: str = "early",
    latency_ms: float = 80.0,
    jitter_ms: float = 20.0,
    progress: Callable[[DemoProgress], None] | None = None,
    context: Any = None,
    startup_timeout_s: float = 60.0,
    multi_threaded: bool = False,
    policy: DemoPolicy | None = None,
    fault: str | None = None,
    link: str | LinkProfile | None = None,
    node_overrides: Mapping[str, Any] | None = None,
    arm_overrides: Mapping[str, Any] | None = None,
) -> DemoResult:
    """Run the whole loop once and return what happened.

    Starts the server subprocess, then the simulated cameras and arm and policy_node
    (parameters from `demo_node_parameters`) on two ``SingleThreadedExecutor`` s, each
    spinning in its own thread; waits for the first chunk to reach the arm, runs
    ``duration_s`` seconds from then, and stops everything (executors, nodes, server)
    even on Ctrl-C.

    Args:
        model: A model ID of `relay_ros.models`.
        duration_s: Seconds to run after the first chunk (> 0).
        request_mode: ``"early"`` or ``"sync"``.
        latency_ms: Simulated inference latency of the server in ms (>= 0).
        jitter_ms: Uniform extra latency in [-J, +J] ms (>= 0).
        progress: Called from this thread about twice per second with a `DemoProgress`.
        context: An initialised rclpy ``Context`` to use; None = create, init (without
            rclpy signal handlers, so Ctrl-C raises KeyboardInterrupt here) and shut
            down a private one.
        startup_timeout_s: Seconds to wait for the server and for the first chunk.
        multi_threaded: Spin policy_node on a ``MultiThreadedExecutor`` (as its ``main()``
            does) instead of a ``SingleThreadedExecutor``. Same behaviour (its callbacks
            are mutually exclusive) at several times the CPU cost.
        policy: The reference policy, its noise, the smoothing and the world seed
            (None = `DemoPolicy` defaults: visual, noise 1, a server without
            action_prefix, smoothing auto, seed 0).
        fault: None, or a wiring mistake to make on purpose (`FAULTS`).
        link: Put an emulated network link between policy_node and the server: a
            preset name of `relay_ros.sim.link_profiles.PRESETS` (``"wan"``, ...) or a
            `LinkProfile`; None connects directly over loopback.
        node_overrides: Extra policy_node parameters (e.g. ``{"image_encoding": "jpeg"}``),
            applied over the demo's own.
        arm_overrides: Extra sim_arm parameters (e.g. ``{"tracking_time_constant_s":
            0.0}`` for an arm that follows its command exactly; default lag 40 ms).

    Raises:
        DemoArgumentError: an argument is out of range.
        DemoError: the server did not start or died, or no chunk arrived in time
            (the message says why, from policy_node's diagnostics).
        KeyboardInterrupt: Ctrl-C; everything was stopped before it propagates.
    """
    check_model(model)
    check_mode(request_mode)
    check_fault(fault)
    if not (isinstance(duration_s, (int, float)) and math.isfinite(duration_s) and duration_s > 0):
        raise DemoArgumentError(f"duration_s {duration_s!r} is not a positive number of seconds")
    policy = policy or DemoPolicy()
    server_command(model, latency_ms=latency_ms, jitter_ms=jitter_ms)  # validates both
    config = load_model_config(model, policy.layout)
    profile = get_profile(link) if isinstance(link, str) else link

    rig = DemoRig(
        model,
        config,
        request_mode=request_mode,
        latency_ms=latency_ms,
        jitter_ms=jitter_ms,
        policy=policy,
        fault=fault,
        context=context,
        startup_timeout_s=startup_timeout_s,
        multi_threaded=multi_threaded,
        link=profile,
        node_overrides=node_overrides,
        arm_overrides=arm_overrides,
    )
    try:
        rig.start()
        t0 = rig.wait_for_first_chunk(progress, float(duration_s))
        rig.run_until(t0, float(duration_s), progress)
        # Collect before stopping, so the measures end exactly at the run's end.
        snapshot = rig.snapshot(t0, float(duration_s))
    finally:
        rig.stop()
    return result_from_snapshot(
        snapshot,
        model=model,
        config=config,
        request_mode=request_mode,
        latency_ms=latency_ms,
        jitter_ms=jitter_ms,
        policy=policy,
        fault=fault,
        server_pid=rig.server.pid,
    )


def result_from_snapshot(
    snapshot: RunSnapshot,
    *,
    model: str,
    config: NodeConfig,
    request_mode: str,
    latency_ms: float,
    jitter_ms: float,
    policy: DemoPolicy,
    fault: str | None,
    server_pid: int | None,
) -> DemoResult:
    """The `DemoResult` of a run: measures over ``[t0, t_end]`` and series relative to ``t0``."""
    joints = tuple(config.commanded_joints)
    column = {name: i for i, name in enumerate(joints)}
    t0, t_end = snapshot.t0, snapshot.t_end
    times, commanded, followed, switches, ages = _merge_histories(
        snapshot.histories, joints, column, t0
    )
    metrics = snapshot.metrics
    ages_p50 = [m.action_age_p50_s for m in metrics.values() if m.action_age_p50_s is not None]
    ages_max = [m.action_age_max_s for m in metrics.values() if m.action_age_max_s is not None]
    chunks = [
        CommandedChunk(stamp=stamp - t0, times=abs_times - t0, positions=positions)
        for stamp, abs_times, positions in snapshot.chunks
        if stamp <= t_end
    ]
    dt = None
    if chunks and chunks[0].times.size > 1:
        dt = float(np.median(np.diff(chunks[0].times)))
    reasons: dict[str, int] = {}
    for m in metrics.values():
        for code, n in m.rejection_reasons.items():
            reasons[code] = reasons.get(code, 0) + n
    measured = (times >= 0.0) & (times <= t_end - t0)
    arm_joints = config.state_joints[:2]
    task = None
    if all(joint in column for joint in arm_joints):
        task = task_measures(
            World(seed=snapshot.world_seed),
            ALIGNED_START_S + times[measured],  # the world's time starts at t0
            followed[measured, column[arm_joints[0]]],
            followed[measured, column[arm_joints[1]]],
        )
    counts = snapshot.counts
    first_distance = None
    if snapshot.chunks:
        stamp, _, first_positions = snapshot.chunks[0]
        state = np.array([np.interp(stamp - t0, times, followed[:, j]) for j in range(len(joints))])
        first_distance = float(np.max(np.abs(first_positions[0] - state)))
    arm = next(iter(snapshot.steps.values()), None)
    return DemoResult(
        model=model,
        request_mode=request_mode,
        latency_ms=float(latency_ms),
        jitter_ms=float(jitter_ms),
        duration_s=float(t_end - t0),
        execute_horizon=snapshot.execute_horizon,
        dt=dt,
        requests=counts["requests"],
        chunks_received=counts["chunks_received"],
        chunks_published=counts["chunks_published"],
        refusals=counts["refusals"],
        error_replies=counts["error_replies"],
        latencies_s=np.asarray(snapshot.latencies_s, dtype=np.float64),
        stall_time_s=max((m.stall_time_s for m in metrics.values()), default=0.0),
        stall_events=max((m.stall_events for m in metrics.values()), default=0),
        boundary_steps={
            name: np.asarray(ratios, dtype=np.float64) for name, ratios in snapshot.boundary.items()
        },
        action_age_p50_s=max(ages_p50) if ages_p50 else None,
        action_age_max_s=max(ages_max) if ages_max else None,
        accepted=sum(m.accepted for m in metrics.values()),
        rejected=sum(m.rejected for m in metrics.values()),
        rejection_reasons=reasons,
        joint_names=joints,
        joint_limits={
            j: (config.joint_limits[j].min_position, config.joint_limits[j].max_position)
            for j in joints
        },
        times=times,
        commanded=commanded,
        followed=followed,
        switch_times=switches,
        chunks=chunks,
        server_pid=server_pid,
        policy=policy,
        fault=fault,
        task=task,
        jerk_rms=jerk_rms(times[measured], commanded[measured]),
        link=snapshot.link,
        bytes_per_request=(
            snapshot.link_bytes_up / counts["requests"]
            if snapshot.link_bytes_up and counts["requests"]
            else None
        ),
        network=dict(snapshot.network),
        image_encoding=snapshot.image_encoding,
        startup_s=None if snapshot.first_request is None else t0 - snapshot.first_request,
        refusals_before_first=snapshot.refusals_before_first,
        first_point_distance=first_distance,
        switches=None if arm is None else switch_summary(arm),
        smoothing=snapshot.smoothing,
        request_lead_s=snapshot.request_lead_s,
        tracking_lag_s=snapshot.tracking_lag_s,
        ages=ages,
        steps=[dataclasses.replace(b, t=b.t - t0, at=b.at - t0) for b in arm or []],
        task_joints=tuple(j for j in arm_joints if j in column),
    )


def _merge_histories(
    histories: Mapping[str, Any], joints: Sequence[str], column: Mapping[str, int], t0: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One time base for all controllers (they update in the same control cycle); the
    action ages are the first controller's (the arm's)."""
    n = min((len(h.times) for h in histories.values()), default=0)
    first = next(iter(histories.values()), None)
    times = first.times[-n:] if first is not None and n else np.zeros(0)
    commanded = np.full((times.size, len(joints)), np.nan)
    followed = np.full((times.size, len(joints)), np.nan)
    switches: list[float] = []
    for history in histories.values():
        for i, name in enumerate(history.joint_names):
            if name in column and n:
                commanded[:, column[name]] = history.commanded[-n:, i]
                followed[:, column[name]] = history.positions[-n:, i]
        switches.extend(float(t) for t in history.switch_times)
    ages = first.ages[-n:] if first is not None and n else np.zeros(0)
    keep = times >= t0 - PRE_ROLL_S
    switch_array = np.unique(np.round(np.asarray(switches, dtype=np.float64), 3))
    switch_array = switch_array[switch_array >= t0] - t0
    return times[keep] - t0, commanded[keep], followed[keep], switch_array, ages[keep]
