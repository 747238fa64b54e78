"""One run of the whole loop on this machine: `run_demo` -> `DemoResult`.

Starts the reference server (`ServerProcess`), then, in this process, the simulated
cameras, the simulated arm (a ``joint_trajectory_controller`` stand-in per configured
output) and ``policy_node`` with ``config/<model>.yaml``; waits for the first chunk,
runs for the requested time, collects the measures and series and stops everything,
even on Ctrl-C. The part of the demo that runs ROS; rclpy is imported inside
`run_demo`, so that importing the package (e.g. from a launch file) does not need it.
"""

from __future__ import annotations

import contextlib
import math
import signal
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from relay_ros.demo.errors import DemoArgumentError, DemoError
from relay_ros.demo.launch_plan import (
    ARM_NODE,
    CAMERAS_NODE,
    POLICY_NODE,
    demo_node_parameters,
)
from relay_ros.demo.models import check_mode, check_model, load_model_config
from relay_ros.demo.result import PRE_ROLL_S, CommandedChunk, DemoProgress, DemoResult
from relay_ros.demo.server_process import ServerProcess, server_command
from relay_ros.sim.link import LinkThread
from relay_ros.sim.link_profiles import LinkProfile, get_profile

__all__ = ["run_demo"]


class _LatencyCollector:
    """Keeps every latency sample of a rolling `LatencyStats` by polling it often enough."""

    def __init__(self) -> None:
        self._seen = 0
        self.samples: list[float] = []

    def poll(self, stats: Any) -> None:
        values = stats.values()
        count = int(stats.count)
        new = count - self._seen
        if new > 0:
            self.samples.extend(values[-min(new, len(values)) :])
        self._seen = count


@contextlib.contextmanager
def _sigint_masked() -> Iterator[None]:
    """Ignore Ctrl-C while cleaning up (only possible in the main thread)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _as_overrides(params: Mapping[str, Any]) -> list[Any]:
    from rclpy.parameter import Parameter

    return [Parameter(name, value=value) for name, value in params.items()]


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
    link: str | LinkProfile | None = None,
    node_overrides: Mapping[str, Any] | None = None,
) -> DemoResult:
    """Run the whole loop once and return what happened.

    Starts the server subprocess, then the simulated cameras and arm and policy_node
    (parameters from `demo_node_parameters`) on a ``MultiThreadedExecutor`` spinning in
    a thread; waits for the first chunk to reach the arm, runs ``duration_s`` seconds
    from then, and stops everything (executor, nodes, server) even on Ctrl-C.

    Args:
        model: One of `DEMO_MODELS`.
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
        link: Put an emulated network link between policy_node and the server: a
            preset name of `relay_ros.sim.link_profiles.PRESETS` (``"wan"``, ...) or a
            `LinkProfile`; None connects directly over loopback.
        node_overrides: Extra policy_node parameters (e.g. ``{"image_encoding": "jpeg"}``),
            applied over the demo's own.

    Raises:
        DemoArgumentError: an argument is out of range.
        DemoError: the server did not start or died, or no chunk arrived in time
            (the message says why, from policy_node's diagnostics).
        KeyboardInterrupt: Ctrl-C; everything was stopped before it propagates.
    """
    check_model(model)
    check_mode(request_mode)
    if not (isinstance(duration_s, (int, float)) and math.isfinite(duration_s) and duration_s > 0):
        raise DemoArgumentError(f"duration_s {duration_s!r} is not a positive number of seconds")
    server_command(model, latency_ms=latency_ms, jitter_ms=jitter_ms)  # validates both
    config = load_model_config(model)
    profile = get_profile(link) if isinstance(link, str) else link

    import rclpy
    from rclpy.executors import MultiThreadedExecutor, SingleThreadedExecutor
    from rclpy.signals import SignalHandlerOptions
    from rclpy.task import Future
    from trajectory_msgs.msg import JointTrajectory

    from relay_ros.node.policy_node import PolicyNode
    from relay_ros.sim.arm_node import SimArmNode
    from relay_ros.sim.cameras_node import SimCamerasNode

    own_context = context is None
    server = ServerProcess(
        model, latency_ms=latency_ms, jitter_ms=jitter_ms, startup_timeout_s=startup_timeout_s
    )
    link_thread: LinkThread | None = None
    nodes: list[Any] = []
    executors: list[Any] = []
    # Done = stop spinning. Executor.shutdown destroys the guard condition that callbacks
    # still running in a MultiThreadedExecutor's pool trigger when they finish (rclpy
    # Jazzy does not wait for them), so: stop spinning, drain the pools, then shut down.
    stop_spinning = Future()
    spin_threads: list[threading.Thread] = []
    spin_errors: list[BaseException] = []
    try:
        server.start()
        if own_context:
            context = rclpy.context.Context()
            rclpy.init(context=context, signal_handler_options=SignalHandlerOptions.NO)
        port = server.port or 0
        if profile is not None:
            lifetime = startup_timeout_s + float(duration_s) + 60.0
            link_thread = LinkThread(profile, ("127.0.0.1", port), lifetime_s=lifetime).start()
            port = link_thread.port
        params = demo_node_parameters(model, port=port, request_mode=request_mode)
        params["policy_node"][1].update(node_overrides or {})
        cameras = SimCamerasNode(
            node_name=CAMERAS_NODE,
            context=context,
            parameter_overrides=_as_overrides(params["sim_cameras"][0]),
        )
        nodes.append(cameras)
        arm = SimArmNode(
            node_name=ARM_NODE,
            context=context,
            parameter_overrides=_as_overrides(params["sim_arm"][0]),
        )
        nodes.append(arm)

        joints = tuple(config.commanded_joints)
        column = {name: i for i, name in enumerate(joints)}
        recorded: list[tuple[float, np.ndarray, np.ndarray]] = []
        record_lock = threading.Lock()

        def on_preview(msg: JointTrajectory) -> None:
            names = list(msg.joint_names)
            if sorted(names) != sorted(joints) or not msg.points:
                return
            stamp = msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9
            tfs = np.array(
                [p.time_from_start.sec + p.time_from_start.nanosec * 1e-9 for p in msg.points]
            )
            raw = np.array([list(p.positions) for p in msg.points], dtype=np.float64)
            positions = np.empty_like(raw)
            for i, name in enumerate(names):
                positions[:, column[name]] = raw[:, i]
            with record_lock:
                recorded.append((stamp, stamp + tfs, positions))

        recorder = rclpy.create_node("demo_recorder", context=context)
        nodes.append(recorder)
        recorder.create_subscription(JointTrajectory, f"/{POLICY_NODE}/preview", on_preview, 100)
        policy = PolicyNode(
            POLICY_NODE,
            context=context,
            cli_args=["--ros-args", "--params-file", params["policy_node"][0]],
            parameter_overrides=_as_overrides(params["policy_node"][1]),
        )
        nodes.append(policy)

        # Two executors, each spinning in its own thread: policy_node's, and the simulated
        # robot's (a separate process on a real system). All policy_node callbacks share
        # one MutuallyExclusiveCallbackGroup, so a MultiThreadedExecutor runs them no more
        # concurrently than a SingleThreadedExecutor; but while one runs, rclpy's
        # dispatcher keeps waking for the blocked ones (100 Hz joint states and ticks) and
        # burns several times the CPU, which on a busy 2-core machine delayed
        # /joint_states and camera frames by up to 2 s. See docs/demo.md.
        sim_executor = SingleThreadedExecutor(context=context)
        for node in (cameras, arm, recorder):
            sim_executor.add_node(node)
        policy_executor = (
            MultiThreadedExecutor(num_threads=2, context=context)
            if multi_threaded
            else SingleThreadedExecutor(context=context)
        )
        policy_executor.add_node(policy)
        executors.extend([policy_executor, sim_executor])

        def spin(executor: Any) -> None:
            try:
                executor.spin_until_future_complete(stop_spinning)
            except BaseException as exc:  # reported to the calling thread
                spin_errors.append(exc)

        for name, executor in (("policy", policy_executor), ("sim", sim_executor)):
            thread = threading.Thread(
                target=spin, args=(executor,), name=f"relay-demo-{name}-executor", daemon=True
            )
            thread.start()
            spin_threads.append(thread)

        def now() -> float:
            return policy.get_clock().now().nanoseconds * 1e-9

        def check_alive() -> None:
            if spin_errors:
                raise DemoError(f"the ROS executor stopped: {spin_errors[0]!r}")
            if not server.running():
                raise DemoError(f"the policy server exited: {server.log_tail() or 'no output'}")

        latencies = _LatencyCollector()

        def stall_now() -> float:
            return max((m.stall_time_s for m in arm.metrics().values()), default=0.0)

        def report(elapsed: float, starting: bool) -> None:
            latencies.poll(policy.latency)
            if progress is None:
                return
            samples = latencies.samples
            progress(
                DemoProgress(
                    request_mode=request_mode,
                    elapsed_s=elapsed,
                    duration_s=float(duration_s),
                    chunks=policy.counts["chunks_published"],
                    latency_p50_s=float(np.median(samples)) if samples else None,
                    stall_time_s=stall_now(),
                    starting=starting,
                )
            )

        # Start-up: wait for the first chunk on the arm.
        deadline = time.monotonic() + startup_timeout_s
        last_report = 0.0
        while True:
            check_alive()
            with record_lock:
                first = recorded[0][0] if recorded else None
            if first is not None:
                break
            if time.monotonic() > deadline:
                status = policy.diagnostics_status()
                raise DemoError(
                    f"no chunk reached the arm within {startup_timeout_s:g} s; "
                    f"policy_node says: {status.message}"
                )
            if time.monotonic() - last_report >= 0.5:
                report(0.0, True)
                last_report = time.monotonic()
            time.sleep(0.05)

        t0 = first
        t_end = t0 + float(duration_s)
        while True:
            check_alive()
            current = now()
            report(min(current - t0, float(duration_s)), False)
            remaining = t_end - current
            if remaining <= 0:
                break
            time.sleep(min(0.5, remaining))

        # Collect before stopping, so the measures end exactly at the run's end.
        latencies.poll(policy.latency)
        metrics = arm.metrics()
        counts = policy.counts
        followers = arm.followers
        histories = {name: f.history() for name, f in followers.items()}
        boundary = {
            name: [b.ratio for b in f.boundary_steps() if b.ratio is not None and b.t >= t0]
            for name, f in followers.items()
        }
        with record_lock:
            recorded_chunks = list(recorded)
        execute_horizon = policy.config.execute_horizon
        link_bytes_up = None if link_thread is None else link_thread.stats().bytes_up
        network = {
            f"{name}_s": value
            for name, stats in policy.core.network_timing.items()
            if name != "request_bytes" and (value := stats.percentile(50)) is not None
        }
        image_encoding = policy.config.image_encoding
    finally:
        with _sigint_masked():
            stop_spinning.set_result(None)
            for thread in spin_threads:
                thread.join(timeout=5.0)
            for executor in executors:
                pool = getattr(executor, "_executor", None)  # the MultiThreadedExecutor's
                if pool is not None:
                    pool.shutdown(wait=True)
                executor.shutdown(timeout_sec=5.0)
            for node in reversed(nodes):
                with contextlib.suppress(Exception):
                    node.destroy_node()
            if own_context and context is not None:
                with contextlib.suppress(Exception):
                    context.try_shutdown()
            if link_thread is not None:
                link_thread.stop()
            server.stop()

    times, commanded, followed, switches = _merge_histories(histories, joints, column, t0)
    ages_p50 = [m.action_age_p50_s for m in metrics.values() if m.action_age_p50_s is not None]
    ages_max = [m.action_age_max_s for m in metrics.values() if m.action_age_max_s is not None]
    chunks = [
        CommandedChunk(stamp=stamp - t0, times=abs_times - t0, positions=positions)
        for stamp, abs_times, positions in recorded_chunks
        if stamp <= t_end
    ]
    dt = None
    if chunks and chunks[0].times.size > 1:
        dt = float(np.median(np.diff(chunks[0].times)))
    reasons: dict[str, int] = {}
    for m in metrics.values():
        for code, n in m.rejection_reasons.items():
            reasons[code] = reasons.get(code, 0) + n
    return DemoResult(
        model=model,
        request_mode=request_mode,
        latency_ms=float(latency_ms),
        jitter_ms=float(jitter_ms),
        duration_s=float(duration_s),
        execute_horizon=execute_horizon,
        dt=dt,
        requests=counts["requests"],
        chunks_received=counts["chunks_received"],
        chunks_published=counts["chunks_published"],
        refusals=counts["refusals"],
        error_replies=counts["error_replies"],
        latencies_s=np.asarray(latencies.samples, dtype=np.float64),
        stall_time_s=max((m.stall_time_s for m in metrics.values()), default=0.0),
        stall_events=max((m.stall_events for m in metrics.values()), default=0),
        boundary_steps={
            name: np.asarray(ratios, dtype=np.float64) for name, ratios in boundary.items()
        },
        action_age_p50_s=max(ages_p50) if ages_p50 else None,
        action_age_max_s=max(ages_max) if ages_max else None,
        accepted=sum(m.accepted for m in metrics.values()),
        rejected=sum(m.rejected for m in metrics.values()),
        rejection_reasons=reasons,
        joint_names=joints,
        joint_limits={j: tuple(config.joint_limits[j]) for j in joints},
        times=times,
        commanded=commanded,
        followed=followed,
        switch_times=switches,
        chunks=chunks,
        server_pid=server.pid,
        link=None if profile is None else profile.describe(),
        bytes_per_request=(
            link_bytes_up / counts["requests"] if link_bytes_up and counts["requests"] else None
        ),
        network=network,
        image_encoding=image_encoding,
    )


def _merge_histories(
    histories: Mapping[str, Any], joints: Sequence[str], column: Mapping[str, int], t0: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One time base for all controllers (they update in the same control cycle)."""
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
    keep = times >= t0 - PRE_ROLL_S
    switch_array = np.unique(np.round(np.asarray(switches, dtype=np.float64), 3))
    switch_array = switch_array[switch_array >= t0] - t0
    return times[keep] - t0, commanded[keep], followed[keep], switch_array
