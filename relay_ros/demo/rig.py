"""The running demo: server subprocess, simulated robot and policy_node on rclpy.

`DemoRig` is the only demo module that spins ROS (rclpy is imported inside its
methods, so importing the package needs no ROS). Its steps, each one method:

1. `DemoRig.start`: the reference server (`ServerProcess`), an rclpy context, the
   simulated cameras and arm, a `ChunkRecorder` on ``/policy_node/preview`` and
   policy_node, spun by two ``SingleThreadedExecutor`` s in their own threads
   (policy_node's, and the simulated robot's, a separate process on a real system);
2. `DemoRig.wait_for_first_chunk`: until a chunk reaches the arm (the run's ``t0``);
3. `DemoRig.run_until`: the measured run, reporting progress;
4. `DemoRig.snapshot`: the measures and series, taken before anything stops;
5. `DemoRig.stop`: executors, nodes, context and server, even after Ctrl-C.

Why two single-threaded executors: all policy_node callbacks share one
``MutuallyExclusiveCallbackGroup``, so a ``MultiThreadedExecutor`` runs them no more
concurrently; but while one runs, rclpy's dispatcher keeps waking for the blocked
ones (100 Hz joint states and ticks) and burns several times the CPU, which on a
busy 2-core machine delayed ``/joint_states`` and camera frames by up to 2 s. See
docs/demo.md.
"""

from __future__ import annotations

import contextlib
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from relay_ros.demo.errors import DemoError
from relay_ros.demo.launch_plan import ARM_NODE, CAMERAS_NODE, POLICY_NODE, demo_node_parameters
from relay_ros.demo.policy_settings import DemoPolicy
from relay_ros.demo.recorder import ChunkRecorder, LatencyCollector, RecordedChunk
from relay_ros.demo.result import DemoProgress
from relay_ros.demo.server_process import ServerProcess
from relay_ros.node.node_config import NodeConfig
from relay_ros.sim.link import LinkThread
from relay_ros.sim.link_profiles import LinkProfile
from relay_ros.stop_signals import deferred_interrupts

__all__ = ["DemoRig", "RunSnapshot", "swapped_camera_map"]


@dataclass(frozen=True)
class RunSnapshot:
    """Everything a run measured, taken at its end (absolute times, node clock).

    Attributes:
        t0: publication time of the first chunk (s).
        t_end: planned end of the run (s).
        metrics: ``FollowerMetrics`` per controller of the simulated arm.
        counts: policy_node's counters.
        histories: ``FollowerHistory`` per controller.
        boundary: boundary step ratios after ``t0`` per controller.
        steps: every switch (`BoundaryStep`) after ``t0`` per controller.
        chunks: every chunk published on ``~/preview``.
        latencies_s: every latency sample.
        execute_horizon: the execute horizon policy_node ran with at the end (the
            latency's when automatic).
        smoothing: how policy_node joined the chunks (its strategy, described).
        request_lead_s: its request lead at the end (s; 0 in sync mode).
        tracking_lag_s: the simulated arm's tracking lag (s).
        world_seed: the seed of the world the cameras drew (its time starts at ``t0``,
            at `relay_ros.world.ALIGNED_START_S`).
        first_request: when the first request went out (node clock, within 10 ms).
        refusals_before_first: refusals by policy_node before the first chunk.
        link: the emulated link (`LinkProfile.describe`), None for loopback.
        link_bytes_up: bytes that crossed the link's uplink, None without a link.
        network: policy_node's latency split p50 (``upload_s``, ``server_s``,
            ``download_s``, ``total_s``).
        image_encoding: policy_node's ``image_encoding``.
    """

    t0: float
    t_end: float
    metrics: Mapping[str, Any]
    counts: Mapping[str, int]
    histories: Mapping[str, Any]
    boundary: Mapping[str, list[float]]
    steps: Mapping[str, list[Any]]
    chunks: list[RecordedChunk]
    latencies_s: list[float]
    execute_horizon: int | None
    world_seed: int
    smoothing: str = ""
    request_lead_s: float | None = None
    tracking_lag_s: float = 0.0
    first_request: float | None = None
    refusals_before_first: int = 0
    link: str | None = None
    link_bytes_up: int | None = None
    network: Mapping[str, float] = field(default_factory=dict)
    image_encoding: str = "raw"


def _as_overrides(params: Mapping[str, Any]) -> list[Any]:
    from rclpy.parameter import Parameter

    return [Parameter(name, value=value) for name, value in params.items()]


def swapped_camera_map(camera_map: Path, directory: Path) -> Path:
    """A copy of ``camera_map`` in ``directory`` with its base and wrist entries exchanged.

    The keys stay; the entries (topic, transport, QoS) of the first base-role key and
    the first wrist-role key trade places: the model now gets the wrist camera as its
    base camera and the other way round, the mistake the camera map's comments warn of.

    Raises:
        DemoError: the map has no base or no wrist camera.
    """
    from relay_ros.server.visual_policy import CAMERA_KEY_ROLES  # OpenCV: only when asked

    with open(camera_map, encoding="utf-8") as stream:
        data = yaml.safe_load(stream)
    roles = {CAMERA_KEY_ROLES.get(key): key for key in reversed(list(data))}
    base, wrist = roles.get("base"), roles.get("wrist")
    if base is None or wrist is None:
        raise DemoError(
            f"camera map {str(camera_map)!r} needs a base and a wrist camera to swap; "
            f"it has {list(data)}"
        )
    data[base], data[wrist] = data[wrist], data[base]
    path = directory / "swapped_cameras.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


class DemoRig:
    """One run's processes, nodes and threads; see the module docstring for the steps.

    Args:
        model: A model ID of `relay_ros.models`.
        config: ``config/<model>.yaml`` as policy_node reads it.
        request_mode: ``"early"`` or ``"sync"``.
        latency_ms: Simulated inference latency of the server (ms).
        jitter_ms: Its uniform jitter (ms).
        policy: The reference policy and the smoothing.
        fault: None or one of `FAULTS`.
        context: An initialised rclpy ``Context``, or None for a private one.
        startup_timeout_s: Seconds to wait for the server and for the first chunk.
        multi_threaded: Spin policy_node on a ``MultiThreadedExecutor``.
        link: An emulated network link between policy_node and the server, or None.
        node_overrides: Extra policy_node parameters, over the demo's own.
        arm_overrides: Extra sim_arm parameters (e.g. its ``tracking_time_constant_s``).
    """

    def __init__(
        self,
        model: str,
        config: NodeConfig,
        *,
        request_mode: str,
        latency_ms: float,
        jitter_ms: float,
        policy: DemoPolicy,
        fault: str | None,
        context: Any,
        startup_timeout_s: float,
        multi_threaded: bool,
        link: LinkProfile | None = None,
        node_overrides: Mapping[str, Any] | None = None,
        arm_overrides: Mapping[str, Any] | None = None,
    ) -> None:
        self.model = model
        self.config = config
        self.request_mode = request_mode
        self.policy = policy
        self.fault = fault
        self.startup_timeout_s = startup_timeout_s
        self.multi_threaded = multi_threaded
        self.server = ServerProcess(
            model,
            latency_ms=latency_ms,
            jitter_ms=jitter_ms,
            startup_timeout_s=startup_timeout_s,
            policy=policy,
        )
        self.link_profile = link
        self.link: LinkThread | None = None
        self._extra_node_params = dict(node_overrides or {})
        self._extra_arm_params = dict(arm_overrides or {})
        self.recorder = ChunkRecorder(config.commanded_joints)
        self._first_request: float | None = None
        self._refusals_before_first = 0
        self.latencies = LatencyCollector()
        self._context = context
        self._own_context = context is None
        self._nodes: list[Any] = []
        self._executors: list[Any] = []
        self._threads: list[threading.Thread] = []
        self._spin_errors: list[BaseException] = []
        self._stop_spinning: Any = None
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self._arm: Any = None
        self._policy_node: Any = None

    # ------------------------------------------------------------------ 1. start

    def start(self) -> None:
        """Start the server, the nodes and the executor threads."""
        import rclpy
        from rclpy.signals import SignalHandlerOptions
        from rclpy.task import Future

        self._stop_spinning = Future()
        self.server.start()
        if self._own_context:
            self._context = rclpy.context.Context()
            rclpy.init(context=self._context, signal_handler_options=SignalHandlerOptions.NO)
        port = self.server.port or 0
        if self.link_profile is not None:
            # Long enough for any run; stop() ends it before that.
            self.link = LinkThread(
                self.link_profile, ("127.0.0.1", port), lifetime_s=24 * 3600.0
            ).start()
            port = self.link.port
        params = demo_node_parameters(
            self.model,
            port=port,
            request_mode=self.request_mode,
            policy=self.policy,
        )
        self._start_nodes(params)
        self._start_executors()

    def _node_overrides(self, params: Mapping[str, list[Any]]) -> dict[str, dict[str, Any]]:
        """The launch plan's parameters plus the fault of this run."""
        cameras = dict(params["sim_cameras"][0])
        policy = dict(params["policy_node"][1])
        if self.fault == "swap-red-blue":
            cameras["swap_red_blue"] = True
        elif self.fault == "swap-cameras":
            self._tmp = tempfile.TemporaryDirectory(prefix="relay_ros_demo_")
            path = swapped_camera_map(self.config.camera_map, Path(self._tmp.name))
            policy["camera_map"] = str(path)
        policy.update(self._extra_node_params)
        arm = {**params["sim_arm"][0], **self._extra_arm_params}
        return {"sim_cameras": cameras, "sim_arm": arm, "policy": policy}

    def _start_nodes(self, params: Mapping[str, list[Any]]) -> None:
        # rclpy and the nodes load only when a run starts: relay_ros.demo imports without ROS.
        import rclpy
        from trajectory_msgs.msg import JointTrajectory

        from relay_ros.node.policy_node import PolicyNode
        from relay_ros.sim.arm_node import SimArmNode
        from relay_ros.sim.cameras_node import SimCamerasNode

        overrides = self._node_overrides(params)
        context = self._context
        cameras = SimCamerasNode(
            node_name=CAMERAS_NODE,
            context=context,
            parameter_overrides=_as_overrides(overrides["sim_cameras"]),
        )
        # The target moves from the first chunk on: early and sync runs of one seed
        # see the same world (bench/motion.py does the same).
        cameras.align_world()
        self.recorder.on_first = cameras.start_world
        self._nodes.append(cameras)
        self._arm = SimArmNode(
            node_name=ARM_NODE,
            context=context,
            parameter_overrides=_as_overrides(overrides["sim_arm"]),
        )
        self._nodes.append(self._arm)
        recorder = rclpy.create_node("demo_recorder", context=context)
        self._nodes.append(recorder)
        recorder.create_subscription(
            JointTrajectory, f"/{POLICY_NODE}/preview", self.recorder.on_preview, 100
        )
        self._policy_node = PolicyNode(
            POLICY_NODE,
            context=context,
            cli_args=["--ros-args", "--params-file", params["policy_node"][0]],
            parameter_overrides=_as_overrides(overrides["policy"]),
        )
        self._nodes.append(self._policy_node)

    def _start_executors(self) -> None:
        from rclpy.executors import MultiThreadedExecutor, SingleThreadedExecutor

        context = self._context
        sim_executor = SingleThreadedExecutor(context=context)
        for node in self._nodes:
            if node is not self._policy_node:
                sim_executor.add_node(node)
        policy_executor = (
            MultiThreadedExecutor(num_threads=2, context=context)
            if self.multi_threaded
            else SingleThreadedExecutor(context=context)
        )
        policy_executor.add_node(self._policy_node)
        self._executors.extend([policy_executor, sim_executor])

        def spin(executor: Any) -> None:
            try:
                executor.spin_until_future_complete(self._stop_spinning)
            except BaseException as exc:  # reported to the calling thread
                self._spin_errors.append(exc)

        for name, executor in (("policy", policy_executor), ("sim", sim_executor)):
            thread = threading.Thread(
                target=spin, args=(executor,), name=f"relay-demo-{name}-executor", daemon=True
            )
            thread.start()
            self._threads.append(thread)

    # --------------------------------------------------------------- 2, 3. run

    def now(self) -> float:
        """policy_node's clock (s)."""
        return self._policy_node.get_clock().now().nanoseconds * 1e-9

    def check_alive(self) -> None:
        """Raise `DemoError` if an executor thread failed or the server exited."""
        if self._spin_errors:
            raise DemoError(f"the ROS executor stopped: {self._spin_errors[0]!r}")
        if not self.server.running():
            raise DemoError(f"the policy server exited: {self.server.log_tail() or 'no output'}")

    def _stall_now(self) -> float:
        return max((m.stall_time_s for m in self._arm.metrics().values()), default=0.0)

    def report(
        self,
        progress: Callable[[DemoProgress], None] | None,
        elapsed: float,
        duration_s: float,
        starting: bool,
    ) -> None:
        """Poll the latencies and, with a ``progress`` callback, hand it a snapshot."""
        self.latencies.poll(self._policy_node.latency)
        if progress is None:
            return
        samples = self.latencies.samples
        progress(
            DemoProgress(
                request_mode=self.request_mode,
                elapsed_s=elapsed,
                duration_s=duration_s,
                chunks=self._policy_node.counts["chunks_published"],
                latency_p50_s=float(np.median(samples)) if samples else None,
                stall_time_s=self._stall_now(),
                starting=starting,
            )
        )

    def wait_for_first_chunk(
        self, progress: Callable[[DemoProgress], None] | None, duration_s: float
    ) -> float:
        """Block until the first chunk is published; its stamp (the run's ``t0``).

        Raises:
            DemoError: none within ``startup_timeout_s`` (says what policy_node reports).
        """
        deadline = time.monotonic() + self.startup_timeout_s
        last_report = 0.0
        while True:
            self.check_alive()
            counts = self._policy_node.counts
            if self._first_request is None and counts["requests"] > 0:
                self._first_request = self.now()  # within a 10 ms poll of the request
            first = self.recorder.first_stamp()
            if first is not None:
                self._refusals_before_first = counts["refusals"]
                return first
            if time.monotonic() > deadline:
                status = self._policy_node.diagnostics_status()
                raise DemoError(
                    f"no chunk reached the arm within {self.startup_timeout_s:g} s; "
                    f"policy_node says: {status.message}"
                )
            if time.monotonic() - last_report >= 0.5:
                self.report(progress, 0.0, duration_s, True)
                last_report = time.monotonic()
            time.sleep(0.01)

    def run_until(
        self, t0: float, duration_s: float, progress: Callable[[DemoProgress], None] | None
    ) -> None:
        """Let the loop run until ``t0 + duration_s`` on the node clock, reporting progress."""
        t_end = t0 + duration_s
        while True:
            self.check_alive()
            current = self.now()
            self.report(progress, min(current - t0, duration_s), duration_s, False)
            remaining = t_end - current
            if remaining <= 0:
                return
            time.sleep(min(0.5, remaining))

    # ------------------------------------------------------------- 4. snapshot

    def snapshot(self, t0: float, duration_s: float) -> RunSnapshot:
        """The run's measures and series, taken while everything still runs."""
        self.latencies.poll(self._policy_node.latency)
        followers = self._arm.followers
        return RunSnapshot(
            t0=t0,
            t_end=t0 + duration_s,
            metrics=self._arm.metrics(),
            counts=dict(self._policy_node.counts),
            histories={name: f.measures.history() for name, f in followers.items()},
            boundary={
                name: [
                    b.ratio
                    for b in f.measures.boundary_steps()
                    if b.ratio is not None and b.t >= t0
                ]
                for name, f in followers.items()
            },
            steps={
                name: [b for b in f.measures.boundary_steps() if b.t >= t0]
                for name, f in followers.items()
            },
            chunks=self.recorder.chunks(),
            latencies_s=list(self.latencies.samples),
            execute_horizon=self._policy_node.core.execute_horizon,
            world_seed=self.policy.seed,
            smoothing=self._policy_node.core.smoothing or "",
            request_lead_s=self._policy_node.core.request_lead_s,
            tracking_lag_s=float(self._arm.get_parameter("tracking_time_constant_s").value),
            first_request=self._first_request,
            refusals_before_first=self._refusals_before_first,
            link=None if self.link is None else self.link.profile.describe(),
            link_bytes_up=None if self.link is None else self.link.stats().bytes_up,
            network={
                f"{name}_s": value
                for name, stats in self._policy_node.core.network_timing.items()
                if name != "request_bytes" and (value := stats.percentile(50)) is not None
            },
            image_encoding=self._policy_node.config.image_encoding,
        )

    # ----------------------------------------------------------------- 5. stop

    def stop(self) -> None:
        """Stop everything that was started; idempotent, Ctrl-C held until it is done.

        Executor.shutdown destroys the guard condition that callbacks still running in
        a MultiThreadedExecutor's pool trigger when they finish (rclpy Jazzy does not
        wait for them), so: stop spinning, drain the pools, then shut down.
        """
        with deferred_interrupts():
            if self._stop_spinning is not None and not self._stop_spinning.done():
                self._stop_spinning.set_result(None)
            for thread in self._threads:
                thread.join(timeout=5.0)
            for executor in self._executors:
                pool = getattr(executor, "_executor", None)  # the MultiThreadedExecutor's
                if pool is not None:
                    pool.shutdown(wait=True)
                executor.shutdown(timeout_sec=5.0)
            self._executors.clear()
            for node in reversed(self._nodes):
                with contextlib.suppress(Exception):
                    node.destroy_node()
            self._nodes.clear()
            if self._own_context and self._context is not None:
                with contextlib.suppress(Exception):
                    self._context.try_shutdown()
                self._context = None
            if self.link is not None:
                self.link.stop()
            self.server.stop()
            if self._tmp is not None:
                self._tmp.cleanup()
                self._tmp = None
