"""The visual closed loop on a synthetic clock, without ROS or sockets.

`run_closed_loop` runs, in one thread and in simulated time, what the demo runs on
rclpy and WebSockets: the world's cameras (`WorldCamera`, 320x240 at 15 Hz, resized
with padding to 224x224 like policy_node, the wrist one through JPEG), the reference
server's policy (`ReferencePolicy`, visual plan plus chunk noise, with the simulated
inference latency), policy_node's `ChunkScheduler` (early requests, auto lead) with
``blend_steps`` or the ``action_prefix`` extension (`committed_prefix`), and the
simulated ``joint_trajectory_controller`` (`TrajectoryFollower`) at 100 Hz. It is
deterministic for a seed, takes about a second of CPU per 10 simulated seconds, and
is what ``bench/boundaries.py`` and the fast wiring tests measure. It leaves out
the node's safety checks and ROS transport timing; the demo has them.

Wiring faults: ``"swap-cameras"`` hands the base frame to the wrist key and the
other way round; ``"swap-red-blue"`` reverses the channels of every frame.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import cv2
import numpy as np

from relay_ros.formats.requests import Request
from relay_ros.pipeline.action_prefix import committed_prefix
from relay_ros.pipeline.adaptive_timing import AdaptiveTiming
from relay_ros.pipeline.gate.controller import CommandedMotion
from relay_ros.pipeline.images import resize_with_pad
from relay_ros.pipeline.scheduler import ChunkScheduler
from relay_ros.pipeline.scheduler_config import SchedulerConfig
from relay_ros.pipeline.smoothing import CrossFade, NoSmoothing
from relay_ros.pipeline.trajectory import finite_difference_velocities
from relay_ros.server.action_prefix import default_soft_steps
from relay_ros.server.chunk_noise import ChunkNoise
from relay_ros.server.synthetic import ReferencePolicy
from relay_ros.sim.motion_measures import jerk_rms
from relay_ros.sim.task import TaskMeasures, task_measures
from relay_ros.sim.trajectory_command import TrajectoryCommand
from relay_ros.sim.trajectory_follower import TrajectoryFollower
from relay_ros.sim.world_camera import WorldCamera
from relay_ros.world import World

__all__ = ["SMOOTHINGS", "ClosedLoopResult", "LoopSettings", "run_closed_loop"]

SMOOTHINGS = ("none", "blend", "prefix")
FAULTS = ("swap-cameras", "swap-red-blue")
_JOINTS = tuple(f"joint{i}" for i in range(1, 7)) + ("gripper_joint",)
_ACTION_DIM = 32
_START_T = 1000.0  # simulated clock at the start (any value; the world is periodic-free)


@dataclass(frozen=True)
class LoopSettings:
    """One closed-loop run (π0.5-like: H = 50 at 50 Hz, E = 25).

    Attributes:
        duration_s: simulated seconds measured after the first chunk.
        latency_s: simulated inference time per request (s).
        jitter_s: uniform extra latency in [-jitter, +jitter] (s).
        smoothing: ``"none"``, ``"blend"`` (node ``blend_steps``) or ``"prefix"``.
        chunk_noise: scale of the policy's chunk-to-chunk variation (0 = off).
        fault: None, ``"swap-cameras"`` or ``"swap-red-blue"``.
        seed: world (target schedule), noise and latency seed.
        request_mode: ``"early"`` or ``"sync"``.
    """

    duration_s: float = 20.0
    latency_s: float = 0.08
    jitter_s: float = 0.02
    smoothing: str = "none"
    chunk_noise: float = 1.0
    fault: str | None = None
    seed: int = 0
    request_mode: str = "early"
    horizon: int = 50
    control_hz: float = 50.0
    execute_horizon: int = 25

    def __post_init__(self) -> None:
        if self.smoothing not in SMOOTHINGS:
            raise ValueError(f"smoothing {self.smoothing!r} is not one of {list(SMOOTHINGS)}")
        if self.fault is not None and self.fault not in FAULTS:
            raise ValueError(f"fault {self.fault!r} is not one of {list(FAULTS)}")


@dataclass
class ClosedLoopResult:
    """What a closed-loop run measured (times in seconds since the first chunk).

    Attributes:
        settings: the run's settings.
        times: (N,) control cycles.
        commanded: (N, 7) commanded positions.
        followed: (N, 7) followed positions.
        boundary_ratios: boundary step ratio at every chunk switch (`TrajectoryFollower`).
        task: tracking error to the target.
        jerk_rms: RMS jerk of the commanded positions (rad/s^3).
        stall_time_s: time the controller had nothing to follow.
        chunks: published chunks as ``(times, positions (n, 7))``.
    """

    settings: LoopSettings
    times: np.ndarray
    commanded: np.ndarray
    followed: np.ndarray
    boundary_ratios: np.ndarray
    task: TaskMeasures
    jerk_rms: float | None
    stall_time_s: float
    chunks: list[tuple[np.ndarray, np.ndarray]] = field(default_factory=list)

    @property
    def boundary_median(self) -> float | None:
        """Median boundary step ratio, or None without switches."""
        r = self.boundary_ratios
        return float(np.median(r)) if r.size else None

    @property
    def boundary_max(self) -> float | None:
        """Largest boundary step ratio, or None without switches."""
        r = self.boundary_ratios
        return float(r.max()) if r.size else None


class _Cameras:
    """The two cameras as the node would send them: letterboxed 224x224, wrist as JPEG."""

    def __init__(self, world: World, fault: str | None) -> None:
        self._base = WorldCamera("base", 320, 240, world)
        self._wrist = WorldCamera("wrist", 320, 240, world)
        self._fault = fault
        self.frames: dict[str, object] = {}

    def capture(self, t: float, q: np.ndarray) -> None:
        base = self._base.render(t, q[0], q[1])
        wrist = self._wrist.render(t, q[0], q[1])
        if self._fault == "swap-red-blue":
            base, wrist = base[..., ::-1], wrist[..., ::-1]
        base = resize_with_pad(np.ascontiguousarray(base), 224, 224)
        wrist = resize_with_pad(np.ascontiguousarray(wrist), 224, 224)
        ok, jpeg = cv2.imencode(".jpg", cv2.cvtColor(wrist, cv2.COLOR_RGB2BGR))
        wrist_sent: object = jpeg.tobytes() if ok else wrist
        if self._fault == "swap-cameras":
            self.frames = {"base_0_rgb": wrist_sent, "left_wrist_0_rgb": base}
        else:
            self.frames = {"base_0_rgb": base, "left_wrist_0_rgb": wrist_sent}


def run_closed_loop(settings: LoopSettings | None = None) -> ClosedLoopResult:
    """Run the loop for ``settings.duration_s`` simulated seconds after the first chunk."""
    s = settings or LoopSettings()
    world = World(seed=s.seed)
    rng = np.random.default_rng([s.seed, 7])
    dt = 1.0 / s.control_hz
    policy = ReferencePolicy(
        "visual",
        action_horizon=s.horizon,
        control_hz=s.control_hz,
        noise=ChunkNoise(scale=s.chunk_noise),
    )
    tick = 0.01
    scheduler = ChunkScheduler(
        SchedulerConfig(
            dt=dt,
            horizon=s.horizon,
            execute_horizon=s.execute_horizon,
            smoothing=(
                CrossFade(default_soft_steps(s.horizon))
                if s.smoothing == "blend"
                else NoSmoothing()
            ),
            mode=s.request_mode,  # type: ignore[arg-type]
            publish_early_s=tick,
            # This loop's numbers (bench/boundaries.py) were taken with the earlier
            # automatic lead: the p95 latency plus 50 ms.
            timing=AdaptiveTiming(lead_percentile=95.0, lead_margin_s=0.05),
        )
    )
    follower = TrajectoryFollower(list(_JOINTS), [0.0] * len(_JOINTS), history_length=100_000)
    motion = CommandedMotion()  # what the follower is commanded, as the gate keeps it
    cameras = _Cameras(world, s.fault)
    camera_period = 1.0 / 15.0
    next_frame = _START_T
    in_flight: tuple[float, float, np.ndarray] | None = None  # (t_obs, due, chunk)
    first: float | None = None
    chunks: list[tuple[np.ndarray, np.ndarray]] = []
    step = 0
    while True:
        now = _START_T + step * tick
        step += 1
        if first is not None and now > first + s.duration_s:
            break
        if now > _START_T + s.duration_s + 30.0:
            raise RuntimeError("no chunk was published in 30 simulated seconds")
        q = follower.update(now).positions
        if now >= next_frame - 1e-9:
            cameras.capture(now, q)
            next_frame += camera_period
        if in_flight is not None and now >= in_flight[1] - 1e-9:
            scheduler.latencies.add(now - in_flight[0])  # the caller records, as the node does
            scheduler.chunk_received(in_flight[2], in_flight[0], now)
            in_flight = None
        if in_flight is None and scheduler.wants_request(now):
            state = np.zeros(_ACTION_DIM, dtype=np.float32)
            state[: len(_JOINTS)] = q
            prefix, committed = None, 0
            if s.smoothing == "prefix":
                found = committed_prefix(scheduler, now, q, followed=motion.trajectory)
                committed = found.committed_steps
                prefix = np.zeros((found.rows.shape[0], _ACTION_DIM), dtype=np.float32)
                prefix[:, : len(_JOINTS)] = found.rows
            request = Request(
                state, "", None, None, None, 1.0, dict(cameras.frames), prefix, committed
            )
            chunk = policy.chunk(request, rng, action_dim=_ACTION_DIM)[:, : len(_JOINTS)]
            latency = max(0.0, s.latency_s + rng.uniform(-s.jitter_s, s.jitter_s))
            scheduler.request_sent(now, committed_steps=committed)
            in_flight = (now, now + latency, chunk)
        publication = scheduler.poll(now, motion.trajectory)
        if publication is not None:
            # The follower starts each trajectory from its last command (no checks here).
            at_now = motion.state_at(now)
            start, velocity = (
                at_now
                if at_now is not None
                else (np.asarray(q, dtype=np.float64), np.zeros(len(q)))
            )
            motion.follow(now, start, velocity, publication.positions, publication.time_from_start)
            times = publication.time_from_start
            velocities = finite_difference_velocities(publication.positions, times)
            points = [
                (float(t), list(map(float, p)), list(map(float, v)))
                for t, p, v in zip(times, publication.positions, velocities)
            ]
            follower.receive(
                TrajectoryCommand(publication.stamp, list(_JOINTS), points, publication.t_obs),
                now,
            )
            chunks.append((publication.times, np.array(publication.positions)))
            if first is None:
                first = now
    assert first is not None
    history = follower.measures.history()
    measured = history.times >= first
    times = history.times[measured]
    commanded = history.commanded[measured]
    followed = history.positions[measured]
    ratios = [
        b.ratio for b in follower.measures.boundary_steps() if b.ratio is not None and b.t >= first
    ]
    return ClosedLoopResult(
        settings=s,
        times=times - first,
        commanded=commanded,
        followed=followed,
        boundary_ratios=np.asarray(ratios, dtype=np.float64),
        task=task_measures(world, times, followed[:, 0], followed[:, 1]),
        jerk_rms=jerk_rms(times, commanded),
        stall_time_s=follower.measures.metrics().stall_time_s,
        chunks=[(t - first, p) for t, p in chunks],
    )
