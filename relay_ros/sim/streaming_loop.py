"""The visual closed loop through policy_node's own StreamingCore, on a synthetic clock.

`run_streaming_loop` plays, in one thread and in simulated time, the parts the demo
runs on rclpy and sockets: the world's cameras (`WorldCamera`, 15 Hz, read by the
core from its frame sources as policy_node reads its polled subscriptions), the
reference server (its checks, `ReferencePolicy` with the visual plan and chunk
noise, the action prefix when advertised), a network (inference time plus, for a
link profile, its delays, jitter, bandwidth for the observation's real bytes and
stalls) and one simulated joint_trajectory_controller per output (100 Hz, each
cycle jittered as a loaded controller_manager's). The core is ticked as the node
ticks it: at ``next_deadline``, on a reply, at least every 0.1 s. So a run
measures what the node decides, start-up included: every request, refusal, hold
and published chunk.

Fairness between runs (``bench/motion.py``): the target moves on the world's time
counted from the first accepted chunk (it stands still before), so early and sync
requests, or two smoothings, see the same target motion for the same seed. Each
random draw has its own seeded stream, indexed by what it is for: the k-th
request's chunk noise ``[seed, 7, k]``, its inference time ``[seed, 13, k]``, its link
delays ``[seed, 17, k]``, the controller cycles ``[seed, 11]``: two variants of one
seed see the same draws for their k-th request whatever else differs (not only the
same world).

The server is the seeds' by default (no ``action_prefix`` extension, as
``../shared/seeds`` list its metadata); ``server_prefix`` advertises it. The node's
``smoothing`` parameter picks the strategy (``auto``: the node's choice for that
server). The arm trails its command through a first-order lag (``tracking_lag_s``,
40 ms by default) and its controllers behave as the user's joint_trajectory_controller
is set (``interpolate_from_desired_state``, ``allow_trajectory_replacement``:
`relay_ros.sim.trajectory_follower`).
"""

from __future__ import annotations

import dataclasses
import logging
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import yaml

from relay_ros.formats import format_for
from relay_ros.formats.embodiment import load_embodiment
from relay_ros.node.node_config import NodeConfig, config_from_parameters
from relay_ros.node.param_spec import flatten_parameters
from relay_ros.paths import config_dir, config_file
from relay_ros.pipeline.adaptive_timing import AdaptiveTiming
from relay_ros.pipeline.camera_map import load_model_camera_map
from relay_ros.pipeline.frame_source import LatestFrame
from relay_ros.pipeline.gate.messages import TrajectoryMessage
from relay_ros.pipeline.observation_inputs import DEFAULT_OBSERVATION_TIMING
from relay_ros.pipeline.observation_request import RequestTag
from relay_ros.pipeline.smoothing import SMOOTHING_CHOICES
from relay_ros.pipeline.streaming import StreamingCore
from relay_ros.pipeline.trajectory import parse_t_obs
from relay_ros.server.chunk_noise import ChunkNoise
from relay_ros.server.metadata import build_metadata
from relay_ros.server.policy_robot import PolicyRobot
from relay_ros.server.synthetic import POLICY_KINDS, ReferencePolicy
from relay_ros.sim.controller_measures import BoundaryStep
from relay_ros.sim.link_profiles import LinkProfile, get_profile
from relay_ros.sim.motion_measures import SwitchSummary, jerk_rms, switch_summary
from relay_ros.sim.robot import policy_robot, resting_position
from relay_ros.sim.task import TaskMeasures, task_measures
from relay_ros.sim.trajectory_command import TrajectoryCommand
from relay_ros.sim.trajectory_follower import DEFAULT_TRACKING_LAG_S, TrajectoryFollower
from relay_ros.sim.world_camera import WorldCamera
from relay_ros.wire.codec import packb
from relay_ros.wire.connection import InferOutcome
from relay_ros.world import World

__all__ = [
    "DEFAULT_TRACKING_LAG_S",
    "LoopRun",
    "LoopRunResult",
    "StartUp",
    "run_streaming_loop",
]

logger = logging.getLogger(__name__)

# Seeded streams: one per kind of draw (the module docstring).
_NOISE_STREAM, _CYCLE_STREAM, _LATENCY_STREAM, _LINK_STREAM = 7, 11, 13, 17
_WORLD_T0 = 1000.0  # world time at the first accepted chunk
_CYCLE_S = 0.01  # controller period (100 Hz)
_CAMERA_S = 1.0 / 15.0
_IDLE_TICK_S = 0.1  # as policy_node
_MIN_TICK_S = 0.001
_REPLY_OVERHEAD_BYTES = 200


@dataclass(frozen=True)
class LoopRun:
    """One run's settings.

    Attributes:
        model: A model id: config/<model>.yaml (GR00T with the ``so100`` embodiment).
        request_mode: ``"early"`` or ``"sync"``.
        smoothing: The node's ``smoothing`` parameter (``auto``: its choice).
        server_prefix: The reference server advertises ``action_prefix`` (False: the
            seeds' server).
        latency_s: Server inference time per request (s).
        jitter_s: Uniform extra inference time in [-jitter, +jitter] (s).
        link: A link preset (``lan``, ``wan``, ``lte``) between node and server, or None.
        execute_horizon: Actions per chunk before the next; None: the model's config
            (0 there: automatic).
        request_lead_s: The node's ``request_lead_s``; None: the model's config (auto).
        observation_timing: StreamingCore's ``observation_timing``.
        chunk_noise: Scale of the policy's chunk-to-chunk variation.
        seed: World, noise and latency seed.
        duration_s: Simulated seconds measured after the first accepted chunk.
        cycle_jitter_s: Each controller cycle is up to this early or late (s).
        timing: The rule of the node's automatic lead and execute horizon (None: its
            default; `relay_ros.pipeline.adaptive_timing`).
        tracking_lag_s: The arm's first-order lag behind its command (s; 0: exact).
        interpolate_from_desired_state: The controllers start a new trajectory from
            their last command (True) or from the measured state (False).
        allow_trajectory_replacement: The controllers splice a new trajectory into
            the running one (ros2_controllers 2026).
        unchecked: Publish what the scheduler makes without the node's motion
            checks (velocity limits and ``max_joint_step`` out of reach): the
            reference that shows what smoothing removes, since with the checks a
            jump is refused and becomes a hold, which has no jerk. Never a node setting.
        ramp_in_s: The node's ``ramp_in_s``. 0 by default, not the node's 0.5 s: the
            motion tables measure the switches, each run starting at full speed;
            ``bench/ramp_in.py`` measures the gentle start on the same worlds.
        node_parameters: policy_node parameters on top of config/<model>.yaml, by
            name, as a params file gives them (e.g.
            ``("joint_limits.joint1.has_acceleration_limits", True)``).
        policy: The reference server's plan, ``"visual"`` or ``"flow"``.
        policy_robot: The robot the reference policy stands in for: speed,
            acceleration, rest pose (``relay-policy-server --max-speed``,
            ``--max-acceleration``, ``--rest-pose``); None: its default.
        layout: An openpi layout (``droid``, ``aloha``): the server speaks it and the
            node runs config/<layout>.yaml with its camera map, as ``make demo
            LAYOUT=...``; None: the model's own format and config.
    """

    model: str = "pi05"
    request_mode: str = "early"
    smoothing: str = "auto"
    server_prefix: bool = False
    latency_s: float = 0.08
    jitter_s: float = 0.02
    link: str | None = None
    execute_horizon: int | None = None
    request_lead_s: float | None = None
    observation_timing: str = DEFAULT_OBSERVATION_TIMING
    chunk_noise: float = 1.0
    seed: int = 0
    duration_s: float = 12.0
    cycle_jitter_s: float = 0.0015
    timing: AdaptiveTiming | None = None
    tracking_lag_s: float = DEFAULT_TRACKING_LAG_S
    interpolate_from_desired_state: bool = True
    allow_trajectory_replacement: bool = False
    unchecked: bool = False
    ramp_in_s: float = 0.0
    node_parameters: tuple[tuple[str, Any], ...] = ()
    policy: str = "visual"
    policy_robot: PolicyRobot | None = None
    layout: str | None = None

    def __post_init__(self) -> None:
        if self.policy not in POLICY_KINDS:
            raise ValueError(f"policy {self.policy!r} is not one of {list(POLICY_KINDS)}")
        if self.smoothing not in SMOOTHING_CHOICES:
            raise ValueError(
                f"smoothing {self.smoothing!r} is not one of {list(SMOOTHING_CHOICES)}"
            )


@dataclass(frozen=True)
class StartUp:
    """From the first request to the first chunk the node published.

    Attributes:
        first_chunk_s: First request to the first published chunk (s).
        round_trip_s: That chunk's own request's round trip (s).
        refusals: Chunks or observations refused before it.
        first_point_distance: Largest per-joint distance from the measured state to
            its first point (rad).
    """

    first_chunk_s: float
    round_trip_s: float
    refusals: int
    first_point_distance: float


@dataclass
class LoopRunResult:
    """What one run measured; times in seconds since the first published chunk.

    Attributes:
        run: The settings.
        times: (N,) control cycles (real, jittered).
        commanded: (N, D) commanded positions of every joint.
        followed: (N, D) followed (measured) positions of the arm controller's joints.
        ages: (N,) observation age of the action each cycle ran (s, NaN in a hold).
        task: Tracking error to the target.
        jerk_rms: RMS jerk of the commanded positions from the real times (rad/s^3).
        switches: The switches' C0/C1 gaps (`switch_summary`).
        steps: Every switch of the arm controller.
        startup: The start.
        requests: Requests sent in the run (start-up included).
        refusals: Refusals while measured (after the first chunk).
        refusal_reasons: Why each of them was refused.
        stall_time_s: Time the arm controller had nothing left to follow.
        smoothing: What the node ran (its start-up description).
        latency_p50_s: Median observation -> reply latency the node measured (s).
        execute_horizon: The E of the last publication (the rule's when automatic).
        joint_names: The columns of ``commanded``.
    """

    run: LoopRun
    times: np.ndarray
    commanded: np.ndarray
    followed: np.ndarray
    ages: np.ndarray
    task: TaskMeasures
    jerk_rms: float | None
    switches: SwitchSummary
    steps: list[BoundaryStep]
    startup: StartUp
    requests: int
    refusals: int
    refusal_reasons: list[str]
    stall_time_s: float
    smoothing: str
    latency_p50_s: float | None
    execute_horizon: int
    joint_names: tuple[str, ...]

    @property
    def age_p50_s(self) -> float | None:
        """Median observation age of the executed actions (s), holds left out."""
        ages = self.ages[np.isfinite(self.ages)]
        return float(np.median(ages)) if ages.size else None


def model_config(model: str, parameters: tuple[tuple[str, Any], ...] = ()) -> NodeConfig:
    """policy_node's configuration from ``config/<model>.yaml`` (its first node's
    ``ros__parameters``, node defaults for the rest) with ``parameters`` on top, as the
    node would resolve it."""
    path = config_file(f"{model}.yaml")
    with open(path, encoding="utf-8") as stream:
        data = yaml.safe_load(stream)
    for entry in data.values() if isinstance(data, dict) else ():
        if isinstance(entry, dict) and isinstance(entry.get("ros__parameters"), dict):
            given = flatten_parameters(entry["ros__parameters"])
            given.update(dict(parameters))
            return config_from_parameters(given, default_config_dir=config_dir)
    raise ValueError(f"parameter file {str(path)!r} has no 'ros__parameters' section")


class _Log:
    """The core's logger: sentences to ``logging`` at DEBUG (a bench prints tables)."""

    def info(self, message: str) -> None:
        logger.debug(message)

    def warning(self, message: str) -> None:
        logger.debug(message)

    def error(self, message: str) -> None:
        logger.debug(message)


@dataclass
class _Flight:
    tag: RequestTag
    arrival: float
    reply: np.ndarray


@dataclass
class _Loop:
    """The state of one run (see `run_streaming_loop`)."""

    run: LoopRun
    now: float = 0.0
    first_chunk: float | None = None
    first_request: float | None = None
    startup: StartUp | None = None
    flight: _Flight | None = None
    event: bool = False
    last_roundtrip: float = 0.0
    requests: int = 0
    inference_s: list[float] = field(default_factory=list)  # per request, its draw
    refusals_seen: int = 0
    refusal_reasons: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        r = self.run
        base = model_config(r.layout or r.model, r.node_parameters)
        changes: dict[str, Any] = {
            "request_mode": r.request_mode,
            "smoothing": r.smoothing,
            "ramp_in_s": r.ramp_in_s,
            # The node is told what its controllers do (docs/node.md, "ros2_control
            # settings"): where the check and the splice start a new trajectory.
            "interpolate_from_desired_state": r.interpolate_from_desired_state,
        }
        if r.execute_horizon is not None:
            changes["execute_horizon"] = r.execute_horizon
        if r.request_lead_s is not None:
            changes["request_lead_s"] = r.request_lead_s
        self.format = format_for(r.model, r.layout)
        self.embodiment = load_embodiment("so100") if self.format.needs_embodiment else None
        self.metadata = build_metadata(
            r.model,
            embodiment=self.embodiment,
            # The seeds' extension: an openpi layout's server (like openpi's) has none.
            action_prefix=r.server_prefix and r.layout is None,
            layout=r.layout,
        )
        horizon = int(self.metadata["action_horizon"])
        if r.unchecked:
            changes["max_joint_step"] = 1e3
            changes["joint_limits"] = {
                joint: dataclasses.replace(limit, max_velocity=1e3)
                for joint, limit in base.joint_limits.items()
            }
        self.config = dataclasses.replace(base, **changes)
        self.dt = 1.0 / float(self.metadata["control_hz"])
        self.action_dim = self.format.action_width(self.metadata, self.embodiment)
        self.validate = self.format.validator(
            self.metadata,
            embodiment=self.embodiment,
            needs_session_id=False,
            adapters=(),
            prefix_horizon=horizon if self.metadata.get("action_prefix") else None,
        )
        cameras = load_model_camera_map(
            config_dir() / f"{r.layout or r.model}_cameras.yaml", r.model, r.layout
        )
        self.keys = [c.key for c in cameras]
        self.world = World(seed=r.seed)
        self.cameras = {
            k: WorldCamera("wrist" if "wrist" in k else "base", 320, 240, self.world)
            for k in self.keys
        }
        self.sources = {k: LatestFrame() for k in self.keys}
        self.policy = ReferencePolicy(
            r.policy,
            action_horizon=horizon,
            control_hz=1.0 / self.dt,
            noise=ChunkNoise(scale=r.chunk_noise),
            # A layout's robot is not the simulated arm the policy knows (make demo).
            robot=r.policy_robot or self.layout_robot(),
        )
        self.link: LinkProfile | None = get_profile(r.link) if r.link else None
        self.followers = {
            o.name: TrajectoryFollower(
                list(o.joints),
                [resting_position(self.config.joint_limits[j]) for j in o.joints],
                name=o.name,
                tracking_time_constant_s=r.tracking_lag_s,
                interpolate_from_desired_state=r.interpolate_from_desired_state,
                allow_trajectory_replacement=r.allow_trajectory_replacement,
                history_length=int((r.duration_s + 40.0) / _CYCLE_S),
                log_rejections=False,
            )
            for o in self.config.outputs
        }
        self.dims = {o.name: list(o.dims or ()) for o in self.config.outputs}  # π0: flat
        self.joints = [j for f in self.followers.values() for j in f.joint_names]
        self.core = StreamingCore(
            self.config,
            camera_keys=self.keys,
            submit=self.submit,
            publish=self.published,
            request_reset=lambda: None,
            log=_Log(),
            perf_clock=lambda: self.now,
            frame_sources=self.sources,
            observation_timing=r.observation_timing,  # type: ignore[arg-type]
            timing=r.timing,
        )

    def layout_robot(self) -> PolicyRobot | None:
        """For a layout, the robot its config commands (the demo tells its server the
        same); None: the reference policy's default, the simulated arm."""
        motion = policy_robot(self.config) if self.run.layout else None
        return None if motion is None else PolicyRobot(*motion)

    # ------------------------------------------------------------ the world
    def world_time(self, t: float | np.ndarray) -> Any:
        """The world's clock: it starts at the first published chunk."""
        if self.first_chunk is None:
            return np.full_like(np.asarray(t, dtype=np.float64), _WORLD_T0)
        return _WORLD_T0 + np.maximum(0.0, np.asarray(t, dtype=np.float64) - self.first_chunk)

    def positions(self) -> np.ndarray:
        return np.concatenate([f.positions for f in self.followers.values()])

    def capture(self) -> None:
        q = self.positions()
        t = float(self.world_time(self.now))
        for key, camera in self.cameras.items():
            self.sources[key].put(camera.render(t, float(q[0]), float(q[1])), self.now)

    # ------------------------------------------------------------ the server
    def submit(self, obs: dict[str, Any], tag: RequestTag) -> bool:
        if self.flight is not None:
            return False
        if self.first_request is None:
            self.first_request = self.now
        request = self.validate(obs)
        k = self.requests
        self.requests += 1
        reply = self.policy.chunk(
            request, self.stream(_NOISE_STREAM, k), action_dim=self.action_dim
        )
        r = self.run
        draw = self.stream(_LATENCY_STREAM, k).uniform(-r.jitter_s, r.jitter_s)
        latency = max(0.0, r.latency_s + draw)
        self.inference_s.append(latency)
        latency += self.network_time(
            len(packb(obs)), reply.nbytes + _REPLY_OVERHEAD_BYTES, self.stream(_LINK_STREAM, k)
        )
        self.flight = _Flight(tag, self.now + latency, reply)
        return True

    def stream(self, kind: int, index: int) -> np.random.Generator:
        """The seeded generator of draw ``kind`` for the ``index``-th request."""
        return np.random.default_rng([self.run.seed, kind, index])

    def network_time(self, up_bytes: int, down_bytes: int, rng: np.random.Generator) -> float:
        """Delays, jitter and transmission of one request on the link (jitter from
        ``rng``); a stall that starts while it is under way holds it for its length."""
        link = self.link
        if link is None:
            return 0.0
        seconds = 0.0
        for nbytes, rate in ((up_bytes, link.up_mbit_s), (down_bytes, link.down_mbit_s)):
            jitter = rng.uniform(-link.jitter_ms, link.jitter_ms)
            seconds += max(0.0, link.delay_ms + jitter) / 1000.0
            if rate is not None:
                seconds += nbytes * 8.0 / (rate * 1e6)
        if link.stall_every_s and link.stall_ms > 0:
            k = math.floor((self.now + seconds) / link.stall_every_s)
            if k >= 1 and k * link.stall_every_s >= self.now:
                seconds += link.stall_ms / 1000.0
        return seconds

    def deliver(self) -> None:
        flight, self.flight = self.flight, None
        assert flight is not None
        reply: Any = flight.reply
        reply = self.format.reply_actions(reply, self.embodiment)
        roundtrip = self.now - flight.tag.t_obs
        self.last_roundtrip = roundtrip
        self.core.result(InferOutcome(flight.tag, reply, roundtrip, None, None, self.now), self.now)
        self.note_refusals()
        self.event = True

    # ------------------------------------------------------------ the controllers
    def published(self, msg: TrajectoryMessage) -> None:
        if msg.output is None:
            return
        points = msg.points
        follower = self.followers[msg.output]
        if msg.frame_id and self.first_chunk is None:
            self.first_chunk = self.now
            assert self.first_request is not None
            state = self.positions()[: len(points.positions[0])]
            self.startup = StartUp(
                first_chunk_s=self.now - self.first_request,
                round_trip_s=self.last_roundtrip,
                refusals=self.core.counts["refusals"],
                first_point_distance=float(np.max(np.abs(points.positions[0] - state))),
            )
        command = TrajectoryCommand(
            points.stamp,
            list(msg.joint_names),
            [
                (float(t), list(map(float, p)), list(map(float, v)))
                for t, p, v in zip(points.time_from_start, points.positions, points.velocities)
            ],
        )
        follower.receive(command, self.now, t_obs=parse_t_obs(msg.frame_id))

    def note_refusals(self) -> None:
        """Keep the reason of every refusal after the first chunk (the core says why
        the last one was refused; its count says how many came since)."""
        count = self.core.counts["refusals"]
        if count > self.refusals_seen:
            if self.first_chunk is not None:
                reason = self.core.last_refusal or ""
                self.refusal_reasons.extend([reason] * (count - self.refusals_seen))
            self.refusals_seen = count

    # ------------------------------------------------------------ the clock
    def loop(self) -> None:
        r = self.run
        cycle_rng = np.random.default_rng([r.seed, _CYCLE_STREAM])
        k, next_cycle, next_frame, next_tick = 0, 0.0, 0.0, 0.0
        self.core.connected(self.metadata, 0.0)
        while True:
            arrival = self.flight.arrival if self.flight is not None else math.inf
            self.now = min(next_cycle, next_frame, next_tick, arrival)
            if self.first_chunk is not None and self.now > self.first_chunk + r.duration_s:
                return
            if self.now > 30.0 and self.first_chunk is None:
                raise RuntimeError(f"no chunk was published in 30 simulated seconds: {r}")
            if self.now == next_cycle:
                for follower in self.followers.values():
                    follower.update(self.now)
                self.core.joint_state(self.joints, list(self.positions()), self.now)
                k += 1
                next_cycle = k * _CYCLE_S + cycle_rng.uniform(-r.cycle_jitter_s, r.cycle_jitter_s)
                next_cycle = max(next_cycle, self.now + 1e-6)
            if self.now == next_frame:
                self.capture()
                next_frame += _CAMERA_S
            if self.now == arrival:
                self.deliver()
            if self.now >= next_tick or self.event:
                self.event = False
                self.core.joint_state(self.joints, list(self.positions()), self.now)
                self.core.tick(self.now)
                self.note_refusals()
                deadline = self.core.next_deadline(self.now)
                wait = _IDLE_TICK_S if deadline is None else min(_IDLE_TICK_S, deadline - self.now)
                next_tick = self.now + max(_MIN_TICK_S, wait)


def run_streaming_loop(run: LoopRun | None = None) -> LoopRunResult:
    """Run the loop until ``duration_s`` simulated seconds after the first chunk."""
    state = _Loop(run or LoopRun())
    state.loop()
    assert state.first_chunk is not None and state.startup is not None
    first = state.first_chunk
    arm = next(iter(state.followers.values()))
    histories = [f.measures.history() for f in state.followers.values()]
    times = histories[0].times
    keep = times >= first
    # Every controller runs on the same cycles: their columns side by side.
    commanded = np.concatenate([h.commanded[keep] for h in histories], axis=1)
    followed = histories[0].positions[keep]
    steps = [s for s in arm.measures.boundary_steps() if s.t >= first]
    counts = state.core.counts
    return LoopRunResult(
        run=state.run,
        times=times[keep] - first,
        commanded=commanded,
        followed=followed,
        ages=histories[0].ages[keep],
        task=task_measures(
            state.world, state.world_time(times[keep]), followed[:, 0], followed[:, 1]
        ),
        jerk_rms=jerk_rms(times[keep], commanded),
        switches=switch_summary(steps),
        steps=steps,
        startup=state.startup,
        requests=counts["requests"],
        refusals=counts["refusals"] - state.startup.refusals,
        refusal_reasons=list(state.refusal_reasons),
        stall_time_s=arm.measures.metrics().stall_time_s,
        smoothing=state.core.smoothing or "none",
        latency_p50_s=state.core.latency.percentile(50),
        execute_horizon=state.core.execute_horizon or 0,
        joint_names=tuple(j for f in state.followers.values() for j in f.joint_names),
    )
