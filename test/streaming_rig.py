"""A synthetic-clock rig around StreamingCore: no ROS, no sockets, no sleeping.

The rig plays the node's part: it feeds camera frames and joint states every
step, delivers each submitted observation's reply after a chosen latency (from a
policy function, as the reference server would compute it), ticks the core at
the timer rate and records every trajectory the core publishes.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from trajectory_checker import VelocityChecker, robot_velocity_limits

from relay_ros.demo.models import load_model_config
from relay_ros.formats import format_for
from relay_ros.formats.embodiment import load_embodiment
from relay_ros.node.node_config import NodeConfig
from relay_ros.paths import config_dir
from relay_ros.pipeline.camera_map import load_model_camera_map
from relay_ros.pipeline.frame_source import ArrivedFrame, LatestFrame
from relay_ros.pipeline.gate.messages import TrajectoryMessage
from relay_ros.pipeline.health import assess
from relay_ros.pipeline.observation_request import RequestTag
from relay_ros.pipeline.state import TRUST_AFTER_SAMPLES
from relay_ros.pipeline.streaming import StreamingCore
from relay_ros.server.metadata import build_metadata
from relay_ros.wire.connection import InferOutcome

PI_JOINTS = ["joint1", "joint2", "joint3", "joint4", "joint5", "joint6", "gripper_joint"]
GROOT_JOINTS = ["joint1", "joint2", "joint3", "joint4", "joint5", "gripper_joint"]

Policy = Callable[[dict[str, Any]], Any]


def ramp_policy(horizon: int, step: float = 0.002) -> Policy:
    """Actions that start at the observed state and move every joint by ``step``."""

    ramp = np.arange(horizon, dtype=np.float32)[:, None] * step

    def infer(obs: dict[str, Any]) -> Any:
        state = obs["state"]
        if isinstance(state, dict):  # GR00T: one (1, H, k) array per action group
            return {
                "action." + key.split(".", 1)[1]: (np.asarray(value).reshape(1, -1) + ramp)[None]
                for key, value in state.items()
            }
        return np.asarray(state, dtype=np.float32).reshape(-1)[None, :] + ramp

    return infer


def velocity_limits(model: str, max_velocity: float) -> dict[str, Any]:
    """config/<model>.yaml's joint limits with every velocity limit set to ``max_velocity``
    (for tests of timing whose policies move faster than the shipped limits)."""
    base = load_model_config(model).joint_limits
    return {
        joint: dataclasses.replace(limit, max_velocity=max_velocity)
        for joint, limit in base.items()
    }


class ListLogger:
    """Collects what the core logs, and passes it on to ``logging``."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, str]] = []
        self._log = logging.getLogger("streaming_rig")

    def info(self, message: str) -> None:
        self.lines.append(("info", message))
        self._log.info(message)

    def warning(self, message: str) -> None:
        self.lines.append(("warning", message))
        self._log.warning(message)

    def error(self, message: str) -> None:
        self.lines.append(("error", message))
        self._log.error(message)

    def text(self, level: str | None = None) -> str:
        return "\n".join(m for lvl, m in self.lines if level is None or lvl == level)


@dataclass
class _InFlight:
    obs: dict[str, Any]
    tag: RequestTag
    arrival: float
    deadline: float  # the request timeout the core asked for, as PolicyConnection does
    sent_perf: float = 0.0  # perf clock when submitted: "on the wire" for request_to_wire


class _TimedSource(LatestFrame):
    """A camera's frame source whose reads take the rig's ``read_cost_s`` of perf time."""

    def __init__(self, rig: CoreRig, key: str) -> None:
        super().__init__()
        self._rig = rig
        self._key = key

    def take_newest(self, now: float) -> ArrivedFrame | None:
        if self._key == self._rig.camera_keys[0]:
            self._rig.reads.append(now)
        frame = super().take_newest(now)
        if frame is not None:
            self._rig.perf_extra += self._rig.read_cost_s
        return frame


@dataclass
class CoreRig:
    """StreamingCore for ``model`` with config/<model>.yaml plus ``overrides``."""

    model: str = "pi05"
    # An openpi layout (config/<layout>.yaml and its camera map, the layout's metadata).
    layout: str | None = None
    overrides: dict[str, Any] = field(default_factory=dict)
    policy: Policy | None = None
    latency_s: float = 0.05
    tick_s: float = 0.01
    metadata: dict[str, Any] | None = None
    # As policy_node: frames put in each camera's frame source every step and read
    # by the core when it wants them (taking read_cost_s of perf time each) instead
    # of pushed every step, and the core ticked only at its next_deadline, after an
    # event, or every idle_tick_s.
    on_demand: bool = False
    read_cost_s: float = 0.0
    idle_tick_s: float = 0.1
    # The measured joint states follow what the controllers were sent (a perfect
    # joint_trajectory_controller); False: the arm stands still at ``state``.
    follow: bool = True
    # Latency of each request in turn (then latency_s); None: always latency_s.
    latency_schedule: list[float] | None = None
    # Seconds between camera frames (both cameras at once); None: every step.
    camera_period_s: float | None = None
    # StreamingCore's observation_timing: "request" (the newest of each when due)
    # keeps the request times independent of the ticking; test_observation_timing.py
    # tests the others.
    observation_timing: str = "request"
    # Switches that stop the core from the start (StreamingCore's ``stopped``).
    stopped: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        base = load_model_config(self.model, self.layout)
        self.config: NodeConfig = dataclasses.replace(base, **self.overrides)
        cameras = load_model_camera_map(
            config_dir() / f"{self.layout or self.model}_cameras.yaml", self.model, self.layout
        )
        self.camera_keys = [c.key for c in cameras]
        groot = format_for(self.model).needs_embodiment  # GR00T: the so100 joints
        if self.layout is not None:
            self.joints = list(self.config.state_joints)
        else:
            self.joints = list(GROOT_JOINTS if groot else PI_JOINTS)
        self.state = np.full(len(self.joints), 0.1)
        if self.metadata is None:
            embodiment = load_embodiment("so100") if groot else None
            self.metadata = build_metadata(self.model, embodiment=embodiment, layout=self.layout)
        if self.policy is None:
            self.policy = ramp_policy(int(self.metadata["action_horizon"]))
        self.log = ListLogger()
        self.now = 0.0
        self.cameras_on = True
        self.joint_states_on = True
        self.accept = True  # the connection takes a request
        self.connected = False
        self.reconnect_at: float | None = None
        self.timeouts = 0
        self.in_flight: _InFlight | None = None
        self.observations: list[dict[str, Any]] = []
        self.sent: list[float] = []  # observation time of each request sent
        self.published: list[tuple[float, TrajectoryMessage]] = []
        self.server_resets = 0
        self.perf_extra = 0.0  # perf time spent by the rig's own "work" (reads)
        self.reads: list[float] = []  # times the core read the cameras
        self.ticks = 0
        self._event = False
        self._last_tick = -math.inf
        self._following: dict[str, tuple[list[int], np.ndarray, float, Any]] = {}
        self.sources = {key: _TimedSource(self, key) for key in self.camera_keys}
        # Every trajectory sent to a controller is checked against the robot's velocity
        # limits (not ones a test raised); conftest.py judges it when the test ends. The
        # state is brought up to date at every step, before the tick publishes.
        self.checker = VelocityChecker(
            robot_velocity_limits(self.layout or self.model),
            lambda: (dict(zip(self.joints, self.state.tolist())), self.now),
            name=f"CoreRig({self.model})",
            from_desired_state=bool(self.config.interpolate_from_desired_state),
        )
        self.core = StreamingCore(
            self.config,
            camera_keys=self.camera_keys,
            submit=self._submit,
            publish=self._published,
            request_reset=self._reset,
            log=self.log,
            perf_clock=lambda: self.now + self.perf_extra,
            frame_sources=self.sources if self.on_demand else None,
            stopped=self.stopped,
            **(
                {}
                if self.observation_timing is None
                else {"observation_timing": self.observation_timing}
            ),
        )
        self._next_frame = 0.0
        self._warmed_up = False

    def _published(self, msg: TrajectoryMessage) -> None:
        self.published.append((self.now, msg))
        if msg.output is not None:
            p = msg.points
            self.checker.add(
                msg.output,
                msg.joint_names,
                p.stamp,
                p.time_from_start,
                p.positions,
                p.velocities,
                received=self.now,
            )
        if self.follow and msg.output is not None:
            index = [self.joints.index(j) for j in msg.joint_names]
            stamp = msg.points.stamp or self.now  # a zero stamp starts on arrival
            self._following[msg.output] = (index, self.state[index].copy(), stamp, msg.points)

    def _follow(self) -> None:
        """As joint_trajectory_controller: from the position at arrival to the first
        point, then linear between points, the last one held."""
        for index, start, stamp, points in self._following.values():
            times = np.concatenate(([stamp], stamp + points.time_from_start))
            positions = np.vstack((start[None, :], points.positions))
            for column, joint in enumerate(index):
                self.state[joint] = np.interp(self.now, times, positions[:, column])

    # ------------------------------------------------------------ the connection
    def _submit(self, obs: dict[str, Any], tag: RequestTag) -> bool:
        if not (self.accept and self.connected) or self.in_flight is not None:
            return False
        self.observations.append(obs)
        self.sent.append(tag.t_obs)
        timeout = self.core.request_timeout()
        latency = self.latency_s
        if self.latency_schedule:
            latency = self.latency_schedule.pop(0)
        self.in_flight = _InFlight(
            obs, tag, self.now + latency, self.now + timeout, self.now + self.perf_extra
        )
        return True

    def _reset(self) -> None:
        self.server_resets += 1

    def connect(self) -> None:
        self.connected = True
        self._event = True
        assert self.metadata is not None
        self.core.connected(self.metadata, self.now)

    def disconnect(self, reason: str = "connection closed") -> None:
        self.connected = False
        self._event = True
        if self.in_flight is not None:
            self._deliver(InferOutcome(self.in_flight.tag, None, None, None, reason))
        self.core.disconnected(reason, self.now)

    def _deliver(self, outcome: InferOutcome) -> None:
        self.in_flight = None
        self._event = True
        self.core.result(outcome, self.now)

    # ------------------------------------------------------------ the clock
    def feed(self) -> None:
        size = self.core.image_size
        frame_due = self.camera_period_s is None or self.now >= self._next_frame - 1e-9
        if frame_due and self.camera_period_s is not None:
            self._next_frame = self.now + self.camera_period_s
        if self.cameras_on and size is not None and frame_due:
            for key in self.camera_keys:
                frame = np.zeros((*size, 3), np.uint8)
                if self.on_demand:
                    self.sources[key].put(frame, self.now)
                else:
                    self.core.frame_arrived(key, frame, self.now)
        if self.joint_states_on:
            self.core.joint_state(self.joints, [float(v) for v in self.state], self.now)

    def step(self) -> None:
        if not self._warmed_up and self.joint_states_on:
            # The robot's joint states flowed before the first step, as they do before a
            # node gets its first chunk: a joint is trusted after TRUST_AFTER_SAMPLES in a
            # row (pipeline/state.py).
            self._warmed_up = True
            for k in range(TRUST_AFTER_SAMPLES - 1, 0, -1):
                t = self.now - k * self.tick_s
                self.core.joint_state(self.joints, [float(v) for v in self.state], t)
        self.now = round(self.now + self.tick_s, 9)
        if self.follow:
            self._follow()
        self.feed()
        if not self.connected and self.reconnect_at is not None and self.now >= self.reconnect_at:
            self.reconnect_at = None
            self.connect()
        flight = self.in_flight
        timed_out = flight is not None and flight.deadline < flight.arrival
        if flight is not None and timed_out and self.now >= flight.deadline - 1e-9:
            # PolicyConnection: the request failed, the connection is dropped and reopened.
            timeout = flight.deadline - flight.tag.t_obs
            self.timeouts += 1
            self.disconnect(f"no reply within request_timeout_s = {timeout:.1f} s")
            self.reconnect_at = self.now + 0.25
        elif flight is not None and self.now >= flight.arrival - 1e-9:
            assert self.policy is not None
            reply = self.policy(flight.obs)
            roundtrip = flight.arrival - flight.tag.t_obs
            self._deliver(InferOutcome(flight.tag, reply, roundtrip, None, None, flight.sent_perf))
        if self.on_demand:
            deadline = self.core.next_deadline(self._last_tick)
            due = (
                self._event
                or self.now >= self._last_tick + self.idle_tick_s - 1e-9
                or (deadline is not None and self.now >= deadline - 1e-9)
            )
            if not due:
                return
        self._event = False
        self._last_tick = self.now
        self.ticks += 1
        self.core.tick(self.now)

    def run(self, seconds: float) -> None:
        for _ in range(int(round(seconds / self.tick_s))):
            self.step()

    def run_until(self, predicate: Callable[[], Any], timeout_s: float = 10.0) -> None:
        for _ in range(int(round(timeout_s / self.tick_s))):
            if predicate():
                return
            self.step()
        raise AssertionError(f"condition not met within {timeout_s} s of synthetic time")

    # ------------------------------------------------------------ what came out
    def messages(self, output: str | None) -> list[TrajectoryMessage]:
        """Trajectories published to one controller (None: ~/preview)."""
        return [msg for _, msg in self.published if msg.output == output]

    def chunks(self, output: str | None = "arm") -> list[TrajectoryMessage]:
        return [m for m in self.messages(output) if m.frame_id]

    def holds(self, output: str | None = "arm") -> list[TrajectoryMessage]:
        return [m for m in self.messages(output) if not m.frame_id]

    def health(self) -> Any:
        return assess(self.core, self.now, connected=self.connected, connection_error=None)
