"""What one demo run produced: `DemoResult`, its `CommandedChunk` s, and `DemoProgress`.

Plain data with the measures derived from it (latency percentiles, largest boundary
step, limit violations); filled by `run_demo`, read by the report and the plot.
Times are float seconds since the publication of the first chunk, positions radians
(or metres for prismatic joints).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from relay_ros.demo.policy_settings import DemoPolicy
from relay_ros.sim.controller_measures import BoundaryStep
from relay_ros.sim.motion_measures import SwitchSummary
from relay_ros.sim.task import TaskMeasures

__all__ = ["PRE_ROLL_S", "CommandedChunk", "DemoProgress", "DemoResult"]

#: Seconds of history before the first chunk that the recorded series keep.
PRE_ROLL_S = 0.5


@dataclass(frozen=True)
class CommandedChunk:
    """One chunk as policy_node published it (all commanded joints, from ``~/preview``).

    Attributes:
        stamp: ``header.stamp`` in seconds since the run's start (the publication time).
        times: (N,) time of each point in seconds since the run's start.
        positions: (N, D) positions per point, in `DemoResult.joint_names` order.
    """

    stamp: float
    times: np.ndarray
    positions: np.ndarray

    @property
    def end(self) -> float:
        """Time of the last point (s since the run's start)."""
        return float(self.times[-1])


@dataclass(frozen=True)
class DemoProgress:
    """A live snapshot of a run, handed to the ``progress`` callback ~2x per second.

    Attributes:
        request_mode: ``"early"`` or ``"sync"``.
        elapsed_s: Seconds since the first chunk (0 while starting).
        duration_s: Planned run time in seconds.
        chunks: Chunks published so far.
        latency_p50_s: Median observation -> reply latency in seconds, or None.
        stall_time_s: Time the arm had no future point to follow, seconds.
        starting: True until the first chunk reaches the arm.
    """

    request_mode: str
    elapsed_s: float
    duration_s: float
    chunks: int
    latency_p50_s: float | None
    stall_time_s: float
    starting: bool = False


@dataclass
class DemoResult:
    """Measures and recorded series of one demo run (see docs/demo.md).

    Times in the series are seconds since ``t0``, the publication of the first chunk.

    Attributes:
        model: Model ID.
        request_mode: ``"early"`` or ``"sync"``.
        latency_ms: Simulated inference latency of the server in ms.
        jitter_ms: Its jitter in ms.
        duration_s: Seconds measured (from the first chunk to the end of the run).
        execute_horizon: Actions executed per chunk at the end of the run (the
            latency's when automatic), or None.
        smoothing: How policy_node joined the chunks (its strategy, described).
        request_lead_s: Its request lead at the end of the run (s), or None.
        tracking_lag_s: The simulated arm's tracking lag (s).
        dt: Control period in seconds (spacing of the published points).
        requests: Observations sent to the server.
        chunks_received: Replies with a chunk.
        chunks_published: Chunks published to the controllers.
        refusals: Chunks or observations the node refused (safety, limits, stale input).
        error_replies: Error replies from the server.
        latencies_s: Every observation -> reply latency in seconds, in order.
        stall_time_s: Total time any controller had no future point to follow.
        stall_events: Separate holding periods (largest over controllers).
        boundary_steps: Boundary step ratio of every chunk switch, per controller name.
        action_age_p50_s: Median action age at execution in seconds, or None when the
            trajectories carry no observation time.
        action_age_max_s: Largest action age in seconds, or None.
        accepted: Trajectories the arm accepted (all controllers).
        rejected: Trajectories the arm rejected (all controllers).
        rejection_reasons: Count per rejection code.
        joint_names: Commanded joints, the columns of the position series.
        joint_limits: ``{joint: (lower, upper)}`` from the model config.
        times: (N,) control-cycle times of the arm.
        commanded: (N, D) positions the controllers commanded at each cycle.
        followed: (N, D) positions the joints followed (published on /joint_states).
        ages: (N,) observation age of the action the arm ran at each cycle (s, NaN in
            a hold or before the first chunk).
        switch_times: Times a new trajectory took over on the arm.
        chunks: Every published chunk.
        server_pid: Process id of the server subprocess (gone when the run returns).
        policy: The reference policy, noise, smoothing and world seed of the run.
        fault: The wiring mistake made on purpose, or None.
        task: Tracking error to the target over the measured cycles (None when the
            model's first two state joints are not commanded).
        jerk_rms: RMS jerk of the commanded positions (rad/s^3), or None.
        link: The emulated network link (`LinkProfile.describe`), None for loopback.
        bytes_per_request: Uplink bytes per request through the link (observation,
            WebSocket framing, the connection's handshake spread over the requests),
            None without a link.
        network: policy_node's latency split, p50 in seconds: ``upload_s``,
            ``server_s``, ``download_s``, ``total_s`` (docs/network.md).
        image_encoding: How policy_node sent the frames (``raw`` or ``jpeg``).
        startup_s: First request to the first published chunk (s, within 10 ms), or None.
        refusals_before_first: Refusals by the node before the first chunk.
        first_point_distance: Largest joint distance from the followed state to the
            first chunk's first point (rad), or None.
        switches: The arm's chunk switches at the same instant (C0/C1 over moving
            switches, at rest apart; `relay_ros.sim.motion_measures`), or None.
        steps: The arm's switches one by one (`BoundaryStep`, times since ``t0``), for
            the zoomed plot.
        task_joints: The joints that move the end effector (the world's arm), whose
            velocity the plot shows; the others carry only the policy's noise here.
    """

    model: str
    request_mode: str
    latency_ms: float
    jitter_ms: float
    duration_s: float
    execute_horizon: int | None
    dt: float | None
    requests: int
    chunks_received: int
    chunks_published: int
    refusals: int
    error_replies: int
    latencies_s: np.ndarray
    stall_time_s: float
    stall_events: int
    boundary_steps: dict[str, np.ndarray]
    action_age_p50_s: float | None
    action_age_max_s: float | None
    accepted: int
    rejected: int
    rejection_reasons: dict[str, int]
    joint_names: tuple[str, ...]
    joint_limits: dict[str, tuple[float, float]]
    times: np.ndarray
    commanded: np.ndarray
    followed: np.ndarray
    switch_times: np.ndarray
    chunks: list[CommandedChunk] = field(default_factory=list)
    server_pid: int | None = None
    policy: DemoPolicy = field(default_factory=DemoPolicy)
    fault: str | None = None
    task: TaskMeasures | None = None
    jerk_rms: float | None = None
    link: str | None = None
    bytes_per_request: float | None = None
    network: dict[str, float] = field(default_factory=dict)
    image_encoding: str = "raw"
    startup_s: float | None = None
    refusals_before_first: int = 0
    first_point_distance: float | None = None
    switches: SwitchSummary | None = None
    smoothing: str = ""
    request_lead_s: float | None = None
    tracking_lag_s: float = 0.0
    ages: np.ndarray = field(default_factory=lambda: np.zeros(0))
    steps: list[BoundaryStep] = field(default_factory=list)
    task_joints: tuple[str, ...] = ()

    def latency_percentile_s(self, q: float) -> float | None:
        """The ``q``-th percentile (0..100) of the latencies in seconds, or None."""
        if self.latencies_s.size == 0:
            return None
        return float(np.percentile(self.latencies_s, q))

    @property
    def latency_p50_s(self) -> float | None:
        """Median latency in seconds, or None."""
        return self.latency_percentile_s(50.0)

    @property
    def latency_p99_s(self) -> float | None:
        """99th percentile latency in seconds, or None."""
        return self.latency_percentile_s(99.0)

    @property
    def boundary_step_max(self) -> float | None:
        """Largest boundary step ratio over all controllers, or None without switches."""
        values = [float(v.max()) for v in self.boundary_steps.values() if v.size]
        return max(values) if values else None

    def limit_violations(self, tolerance: float = 1e-6) -> list[str]:
        """Every joint whose commanded position left its limits, as sentences.

        Checks the points of every published chunk and the command of every control
        cycle. ``tolerance`` (rad or m) absorbs float32 rounding.
        """
        problems = []
        for j, joint in enumerate(self.joint_names):
            lower, upper = self.joint_limits[joint]
            values = [self.commanded[:, j]] + [c.positions[:, j] for c in self.chunks]
            merged = np.concatenate(values) if values else np.zeros(0)
            if merged.size == 0:
                continue
            low, high = float(merged.min()), float(merged.max())
            if low < lower - tolerance or high > upper + tolerance:
                problems.append(
                    f"joint {joint!r} was commanded in [{low:.4f}, {high:.4f}]; "
                    f"limits are [{lower:g}, {upper:g}]"
                )
        return problems
