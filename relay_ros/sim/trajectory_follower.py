"""A simulated joint_trajectory_controller and the streaming measures, without rclpy.

`TrajectoryFollower` behaves like one ros2_control ``joint_trajectory_controller``
(Humble and Jazzy, from their ``trajectory.cpp`` and ``validate_trajectory_msg``)
so that the policy node can be tested end to end on a laptop, and it measures what
the robot experienced (``docs/streaming.md`` of the shared spec): stall time,
boundary step, action age and rejected messages.

Controller rules reproduced here:

- A new accepted message replaces the running trajectory outright; it takes over
  on the first control cycle (``update``/``sample`` call) after its arrival.
- ``stamp == 0``: the trajectory starts at that first cycle. A future stamp does
  not wait: the command moves from the current state at that cycle to the first
  point at ``stamp + time_from_start[0]``. A past stamp jumps straight into the
  segment that contains "now".
- Rejections (each logged with its reason and counted): a non-zero stamp whose
  ``stamp + last time_from_start`` is already past, unknown, duplicate or missing
  joints (missing ones are filled with the current command when partial goals are
  allowed), empty joint names or points, wrong array sizes, non-increasing
  ``time_from_start``, a non-zero velocity on the last point (Jazzy default), and,
  as a simulator-only guard, non-finite values.
- A segment is cubic (Hermite) when both of its points carry velocities, linear
  otherwise; after the last point the controller holds it.

The "current state" a new trajectory starts from is the old trajectory's command
at the adoption time, i.e. JTC with ``interpolate_from_desired_state: true`` (Jazzy)
or ``open_loop_control: true`` (Humble) running at an infinitely fast rate. The
followed (measured) joint state tracks the command perfectly, or through a
first-order lag when ``tracking_time_constant_s > 0``.

Times are float seconds on one clock; positions in radians (or metres), velocities
per second.
"""

from __future__ import annotations

import logging
import math
import threading
from collections import deque
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, NamedTuple

import numpy as np

from relay_ros.pipeline.trajectory import (
    T_OBS_PREFIX,
    format_t_obs,
    parse_t_obs,
    read_joint_trajectory,
)

__all__ = [
    "REJECT_CODES",
    "T_OBS_PREFIX",
    "Acceptance",
    "BoundaryStep",
    "FollowerConfigError",
    "FollowerHistory",
    "FollowerMetrics",
    "FollowerSample",
    "TrajectoryCommand",
    "TrajectoryFollower",
    "TrajectoryPoint",
    "format_t_obs",
    "parse_t_obs",
]

logger = logging.getLogger(__name__)

#: Every rejection code `TrajectoryFollower.receive` can return, in checking order.
REJECT_CODES: tuple[str, ...] = (
    "empty_joint_names",
    "duplicate_joint",
    "unknown_joint",
    "missing_joints",
    "empty_points",
    "wrong_size",
    "non_finite",
    "non_increasing_time",
    "nonzero_end_velocity",
    "ends_in_past",
)

# joint_trajectory_controller compares the last velocities against float epsilon.
_VELOCITY_EPSILON = float(np.finfo(np.float32).eps)
# Bound on the stored action-age samples used for percentiles (about 16 min at 100 Hz).
_MAX_AGE_SAMPLES = 100_000
# Bound on the stored per-switch boundary-step records.
_MAX_BOUNDARY_RECORDS = 10_000


class FollowerConfigError(ValueError):
    """The follower was constructed with inconsistent joints or positions."""


class TrajectoryPoint(NamedTuple):
    """One point of a `TrajectoryCommand` (a plain tuple works too).

    Attributes:
        time_from_start: Seconds after ``stamp`` at which the point is reached.
        positions: One position per entry of ``joint_names``.
        velocities: One velocity per joint, or None (then segments to it are linear).
    """

    time_from_start: float
    positions: Sequence[float]
    velocities: Sequence[float] | None = None


@dataclass(frozen=True)
class TrajectoryCommand:
    """A ``trajectory_msgs/JointTrajectory`` as plain data.

    Attributes:
        stamp: ``header.stamp`` in seconds; 0.0 means "start now".
        joint_names: Joint names of the columns of every point.
        points: ``(time_from_start, positions, velocities | None)`` per point.
        t_obs: Observation time (s) the actions were computed from, for action age.
    """

    stamp: float
    joint_names: Sequence[str]
    points: Sequence[TrajectoryPoint | tuple[Any, ...]]
    t_obs: float | None = None

    @classmethod
    def from_msg(cls, msg: Any) -> TrajectoryCommand:
        """Convert a JointTrajectory message (rclpy or rosbags, duck-typed).

        ``header.frame_id`` of the form ``t_obs=<float>`` sets `t_obs`. Accelerations and
        efforts are not represented (the policy node never sends them).
        """
        data = read_joint_trajectory(msg)
        return cls(
            stamp=data.stamp,
            joint_names=list(data.joint_names),
            points=[
                TrajectoryPoint(float(t), list(q), list(v) if v else None)
                for t, q, v in zip(data.time_from_start, data.positions, data.velocities)
            ],
            t_obs=data.t_obs,
        )


@dataclass(frozen=True)
class Acceptance:
    """Result of `TrajectoryFollower.receive`; truthy when accepted.

    Attributes:
        accepted: True when the trajectory replaced the running one.
        code: One of `REJECT_CODES` when rejected, else None.
        reason: Human-readable reason naming the bad value, else None.
    """

    accepted: bool
    code: str | None = None
    reason: str | None = None

    def __bool__(self) -> bool:
        return self.accepted


@dataclass(frozen=True)
class FollowerSample:
    """State of the controller at one control cycle.

    Attributes:
        t: Time of the cycle in seconds.
        positions: Followed (measured) joint positions, controller joint order.
        velocities: Followed joint velocities per second.
        commanded_positions: Positions commanded by the trajectory at ``t``.
        holding: True when there is no future trajectory point to follow.
    """

    t: float
    positions: np.ndarray
    velocities: np.ndarray
    commanded_positions: np.ndarray
    holding: bool


@dataclass(frozen=True)
class BoundaryStep:
    """The boundary step at one chunk switch.

    Attributes:
        t: Time the new trajectory took over (s).
        jump: Largest per-joint distance from the last command of the old trajectory
            to the first point of the new one that is still ahead.
        scale: Largest per-joint step between consecutive points of the new chunk
            (of earlier chunks if the new one has none).
        ratio: ``jump / scale``; ~1 is seamless. None when every chunk so far is static.
    """

    t: float
    jump: float
    scale: float
    ratio: float | None


@dataclass(frozen=True)
class FollowerMetrics:
    """What the robot experienced, since the first accepted trajectory (or `reset_metrics`).

    Attributes:
        name: Controller name.
        accepted: Trajectories accepted.
        rejected: Trajectories rejected.
        rejection_reasons: Count per rejection code (see `REJECT_CODES`).
        last_rejection: Reason text of the latest rejection, or None.
        switches: Times an accepted trajectory took over from an earlier one.
        superseded: Accepted trajectories replaced before they ever ran.
        measured_s: Seconds covered by the measures.
        stall_time_s: Total seconds with no future point to follow (holding).
        stall_events: Number of separate holding periods.
        longest_stall_s: Longest single holding period in seconds.
        holding: Whether the controller is holding at the last update.
        boundary_step_max: Largest boundary-step ratio, or None if no switch had one.
        boundary_step_mean: Mean boundary-step ratio, or None.
        boundary_step_last: Ratio at the latest switch, or None.
        boundary_jump_max: Largest boundary jump in joint units (rad or m).
        action_age_samples: Control cycles that executed an action with known t_obs.
        action_age_mean_s: Mean of now - t_obs over those cycles, or None.
        action_age_p50_s: Median action age in seconds, or None.
        action_age_p99_s: 99th percentile action age in seconds, or None.
        action_age_max_s: Largest action age in seconds, or None.
    """

    name: str
    accepted: int = 0
    rejected: int = 0
    rejection_reasons: dict[str, int] = field(default_factory=dict)
    last_rejection: str | None = None
    switches: int = 0
    superseded: int = 0
    measured_s: float = 0.0
    stall_time_s: float = 0.0
    stall_events: int = 0
    longest_stall_s: float = 0.0
    holding: bool = False
    boundary_step_max: float | None = None
    boundary_step_mean: float | None = None
    boundary_step_last: float | None = None
    boundary_jump_max: float = 0.0
    action_age_samples: int = 0
    action_age_mean_s: float | None = None
    action_age_p50_s: float | None = None
    action_age_p99_s: float | None = None
    action_age_max_s: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """Return the metrics as a JSON-friendly dict."""
        return asdict(self)


@dataclass(frozen=True)
class FollowerHistory:
    """Recorded control cycles, for plotting (oldest first, bounded length).

    Attributes:
        joint_names: Column names of the position arrays.
        times: (N,) cycle times in seconds.
        commanded: (N, D) commanded positions.
        positions: (N, D) followed positions.
        switch_times: (M,) times at which a new trajectory took over.
    """

    joint_names: tuple[str, ...]
    times: np.ndarray
    commanded: np.ndarray
    positions: np.ndarray
    switch_times: np.ndarray


@dataclass
class _Trajectory:
    """An accepted trajectory in controller joint order."""

    stamp: float  # 0.0 = start at adoption
    times: np.ndarray  # (N,) time_from_start
    positions: np.ndarray  # (N, D); NaN columns = joints to fill at adoption
    velocities: np.ndarray  # (N, D); zeros where a point has none
    has_velocity: np.ndarray  # (N,) bool
    t_obs: float | None
    start: float | None = None  # absolute start time once known
    before_time: float = 0.0  # the "point before the trajectory" (JTC)
    before_positions: np.ndarray = field(default_factory=lambda: np.zeros(0))
    before_velocities: np.ndarray = field(default_factory=lambda: np.zeros(0))

    def end_time(self) -> float:
        """Absolute time of the last point, +inf while a zero stamp awaits adoption."""
        if self.start is None:
            return math.inf
        return self.start + float(self.times[-1])


def _interpolate(
    t_a: float,
    p_a: np.ndarray,
    v_a: np.ndarray,
    t_b: float,
    p_b: np.ndarray,
    v_b: np.ndarray,
    t: float,
    cubic: bool,
) -> tuple[np.ndarray, np.ndarray]:
    """Interpolate as JTC's ``interpolate_between_points`` (linear or cubic Hermite)."""
    duration = t_b - t_a
    tau = t - t_a
    if tau < 0.0:
        tau, cubic = 0.0, False
    if tau > duration:
        tau, cubic = duration, False
    if duration <= 0.0:
        return p_a.copy(), np.zeros_like(p_a)
    if not cubic:
        slope = (p_b - p_a) / duration
        return p_a + slope * tau, slope
    c2 = (-3.0 * p_a + 3.0 * p_b - 2.0 * v_a * duration - v_b * duration) / duration**2
    c3 = (2.0 * p_a - 2.0 * p_b + v_a * duration + v_b * duration) / duration**3
    positions = p_a + v_a * tau + c2 * tau**2 + c3 * tau**3
    velocities = v_a + 2.0 * c2 * tau + 3.0 * c3 * tau**2
    return positions, velocities


class TrajectoryFollower:
    """One simulated joint_trajectory_controller with streaming measures.

    Thread-safe: ``receive``, ``update``/``sample``, ``metrics`` and ``history`` may be
    called from different threads (a ROS subscription, a timer and a demo loop).

    Args:
        joint_names: The controller's joints, in command order.
        initial_positions: Start positions, one per joint.
        name: Controller name used in messages and metrics.
        allow_partial_joints: Accept trajectories for a subset of the joints (JTC
            ``allow_partial_joints_goal``); missing joints hold their current command.
        allow_nonzero_velocity_at_end: Accept a non-zero last velocity (JTC
            ``allow_nonzero_velocity_at_trajectory_end``; false on Jazzy, true on Humble).
        tracking_time_constant_s: 0 = the joints follow the command exactly; > 0 = a
            first-order lag with this time constant in seconds.
        history_length: Control cycles kept for `history` (oldest dropped first).
        log_rejections: Log each rejection at WARNING on this module's logger (a node
            that logs them through ROS passes False).

    Raises:
        FollowerConfigError: No joints, duplicate joints, a position count that differs
            from the joint count, non-finite positions, or negative constants.
    """

    def __init__(
        self,
        joint_names: Sequence[str],
        initial_positions: Sequence[float],
        *,
        name: str = "controller",
        allow_partial_joints: bool = False,
        allow_nonzero_velocity_at_end: bool = False,
        tracking_time_constant_s: float = 0.0,
        history_length: int = 60_000,
        log_rejections: bool = True,
    ) -> None:
        names = tuple(str(n) for n in joint_names)
        if not names:
            raise FollowerConfigError(f"controller {name!r} has no joints; expected at least one")
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise FollowerConfigError(
                f"controller {name!r} lists joints {duplicates} more than once; "
                "expected unique joint names"
            )
        initial = np.asarray(initial_positions, dtype=np.float64).reshape(-1)
        if initial.shape != (len(names),):
            raise FollowerConfigError(
                f"controller {name!r} has {initial.size} initial positions for "
                f"{len(names)} joints {list(names)}; expected {len(names)}"
            )
        if not np.all(np.isfinite(initial)):
            raise FollowerConfigError(
                f"controller {name!r} initial positions {initial.tolist()} are not all finite"
            )
        if not tracking_time_constant_s >= 0.0:
            raise FollowerConfigError(
                f"tracking_time_constant_s {tracking_time_constant_s!r} must be >= 0 seconds"
            )
        if history_length < 1:
            raise FollowerConfigError(f"history_length {history_length!r} must be >= 1")

        self._name = str(name)
        self._joint_names = names
        self._index = {n: i for i, n in enumerate(names)}
        self._allow_partial = bool(allow_partial_joints)
        self._allow_nonzero_end = bool(allow_nonzero_velocity_at_end)
        self._tau = float(tracking_time_constant_s)
        self._log_rejections = bool(log_rejections)
        self._lock = threading.RLock()

        dof = len(names)
        self._cmd_pos = initial.copy()
        self._cmd_vel = np.zeros(dof)
        self._pos = initial.copy()
        self._vel = np.zeros(dof)
        self._last_update: float | None = None
        self._active: _Trajectory | None = None
        self._pending: _Trajectory | None = None

        self._history_length = int(history_length)
        self._init_measures()

    # ------------------------------------------------------------------ properties

    @property
    def name(self) -> str:
        """Controller name."""
        return self._name

    @property
    def joint_names(self) -> tuple[str, ...]:
        """The controller's joints, in command order."""
        return self._joint_names

    @property
    def positions(self) -> np.ndarray:
        """Followed joint positions at the last update (a copy)."""
        with self._lock:
            return self._pos.copy()

    @property
    def commanded_positions(self) -> np.ndarray:
        """Commanded joint positions at the last update (a copy)."""
        with self._lock:
            return self._cmd_pos.copy()

    # ------------------------------------------------------------------ commands

    def receive(
        self, command: TrajectoryCommand, now: float, *, t_obs: float | None = None
    ) -> Acceptance:
        """Validate a trajectory that arrived at ``now`` and, if valid, make it replace
        the running one from the next `update`.

        Args:
            command: The trajectory.
            now: Arrival time in seconds.
            t_obs: Observation time (s) the actions came from; overrides ``command.t_obs``.

        Returns:
            `Acceptance`; a rejection leaves the running trajectory untouched.
        """
        now = float(now)
        with self._lock:
            checked = self._validate(command, now)
            if isinstance(checked, Acceptance):
                self._rejected += 1
                code = str(checked.code)
                self._reject_counts[code] = self._reject_counts.get(code, 0) + 1
                self._last_rejection = checked.reason
                if self._log_rejections:
                    logger.warning("rejected a trajectory: %s", checked.reason)
                return checked
            checked.t_obs = t_obs if t_obs is not None else command.t_obs
            self._account(now)
            if self._measure_since is None:
                self._measure_since = now
                self._measured_until = now
            if self._pending is not None:
                self._superseded += 1
            self._pending = checked
            self._accepted += 1
            self._in_stall = False
            self._current_stall = 0.0
            return Acceptance(True)

    def update(self, now: float) -> FollowerSample:
        """Run one control cycle at ``now`` (s): adopt a new trajectory, sample, measure."""
        now = float(now)
        with self._lock:
            self._account(now)
            if self._pending is not None:
                self._adopt(self._pending, now)
                self._pending = None
            if self._active is not None:
                cmd_pos, cmd_vel = self._evaluate(self._active, now)
                self._cmd_pos, self._cmd_vel = cmd_pos, cmd_vel
            holding = self._active is None or now >= self._active.end_time()
            dt = 0.0 if self._last_update is None else max(0.0, now - self._last_update)
            if self._tau <= 0.0:
                self._pos = self._cmd_pos.copy()
                self._vel = self._cmd_vel.copy()
            else:
                alpha = 1.0 - math.exp(-dt / self._tau)
                self._pos = self._pos + alpha * (self._cmd_pos - self._pos)
                self._vel = (self._cmd_pos - self._pos) / self._tau
            self._last_update = now
            if (
                self._measure_since is not None
                and self._active is not None
                and self._active.t_obs is not None
            ):
                age = now - self._active.t_obs
                self._age_count += 1
                self._age_sum += age
                self._age_max = age if self._age_max is None else max(self._age_max, age)
                self._ages.append(age)
            self._history.append((now, self._cmd_pos.copy(), self._pos.copy()))
            return FollowerSample(
                t=now,
                positions=self._pos.copy(),
                velocities=self._vel.copy(),
                commanded_positions=self._cmd_pos.copy(),
                holding=holding,
            )

    def sample(self, now: float) -> np.ndarray:
        """Run one control cycle at ``now`` (s) and return the followed positions."""
        return self.update(now).positions

    # ------------------------------------------------------------------ measures

    def metrics(self) -> FollowerMetrics:
        """Return the measures up to the latest `receive` or `update`."""
        with self._lock:
            ratios = [b.ratio for b in self._boundaries if b.ratio is not None]
            ages = np.asarray(self._ages, dtype=np.float64)
            holding = self._active is not None and (
                self._last_update is not None and self._last_update >= self._active.end_time()
            )
            return FollowerMetrics(
                name=self._name,
                accepted=self._accepted,
                rejected=self._rejected,
                rejection_reasons=dict(self._reject_counts),
                last_rejection=self._last_rejection,
                switches=self._switches,
                superseded=self._superseded,
                measured_s=(
                    0.0
                    if self._measure_since is None
                    else self._measured_until - self._measure_since
                ),
                stall_time_s=self._stall_time,
                stall_events=self._stall_events,
                longest_stall_s=self._longest_stall,
                holding=bool(holding),
                boundary_step_max=max(ratios) if ratios else None,
                boundary_step_mean=float(np.mean(ratios)) if ratios else None,
                boundary_step_last=ratios[-1] if ratios else None,
                boundary_jump_max=max((b.jump for b in self._boundaries), default=0.0),
                action_age_samples=self._age_count,
                action_age_mean_s=self._age_sum / self._age_count if self._age_count else None,
                action_age_p50_s=float(np.percentile(ages, 50)) if ages.size else None,
                action_age_p99_s=float(np.percentile(ages, 99)) if ages.size else None,
                action_age_max_s=self._age_max,
            )

    def boundary_steps(self) -> list[BoundaryStep]:
        """Return the boundary step of every switch so far (bounded, oldest first)."""
        with self._lock:
            return list(self._boundaries)

    def history(self) -> FollowerHistory:
        """Return the recorded control cycles and switch times."""
        with self._lock:
            dof = len(self._joint_names)
            n = len(self._history)
            times = np.fromiter((h[0] for h in self._history), dtype=np.float64, count=n)
            commanded = np.stack([h[1] for h in self._history]) if n else np.zeros((0, dof))
            positions = np.stack([h[2] for h in self._history]) if n else np.zeros((0, dof))
            return FollowerHistory(
                joint_names=self._joint_names,
                times=times,
                commanded=commanded,
                positions=positions,
                switch_times=np.asarray(self._switch_times, dtype=np.float64),
            )

    def reset_metrics(self) -> None:
        """Clear measures, counters and history; measuring restarts at the next accepted
        trajectory. The running trajectory and joint state are kept."""
        with self._lock:
            self._init_measures()

    # ------------------------------------------------------------------ internals

    def _init_measures(self) -> None:
        self._accepted = 0
        self._rejected = 0
        self._reject_counts: dict[str, int] = {}
        self._last_rejection: str | None = None
        self._switches = 0
        self._superseded = 0
        self._measure_since: float | None = None
        self._measured_until = 0.0
        self._stall_time = 0.0
        self._stall_events = 0
        self._longest_stall = 0.0
        self._in_stall = False
        self._current_stall = 0.0
        self._boundaries: deque[BoundaryStep] = deque(maxlen=_MAX_BOUNDARY_RECORDS)
        self._step_scale = 0.0
        self._age_count = 0
        self._age_sum = 0.0
        self._age_max: float | None = None
        self._ages: deque[float] = deque(maxlen=_MAX_AGE_SAMPLES)
        self._history: deque[tuple[float, np.ndarray, np.ndarray]] = deque(
            maxlen=self._history_length
        )
        self._switch_times: deque[float] = deque(maxlen=_MAX_BOUNDARY_RECORDS)

    def _reject(self, code: str, reason: str) -> Acceptance:
        return Acceptance(False, code, f"controller {self._name!r}: {reason}")

    def _validate(self, command: TrajectoryCommand, now: float) -> _Trajectory | Acceptance:
        """Apply JTC's ``validate_trajectory_msg`` rules; return the trajectory or a rejection."""
        names = [str(n) for n in command.joint_names]
        expected = list(self._joint_names)
        if not names:
            return self._reject(
                "empty_joint_names", f"trajectory has no joint_names; expected {expected}"
            )
        for joint in names:
            if names.count(joint) > 1:
                return self._reject(
                    "duplicate_joint",
                    f"joint {joint!r} appears {names.count(joint)} times in joint_names; "
                    "expected each joint once",
                )
        for joint in names:
            if joint not in self._index:
                return self._reject(
                    "unknown_joint",
                    f"joint {joint!r} is not one of the controller's joints {expected}",
                )
        missing = [j for j in expected if j not in names]
        if missing and not self._allow_partial:
            return self._reject(
                "missing_joints",
                f"trajectory is missing joints {missing} of {expected} "
                "(allow_partial_joints is false)",
            )
        points = list(command.points)
        if not points:
            return self._reject("empty_points", "trajectory has no points; expected at least 1")

        n_joints = len(names)
        times = np.empty(len(points))
        positions = np.empty((len(points), n_joints))
        velocities = np.zeros((len(points), n_joints))
        has_velocity = np.zeros(len(points), dtype=bool)
        for i, raw in enumerate(points):
            point = TrajectoryPoint(*raw)
            pos = np.asarray(point.positions, dtype=np.float64).reshape(-1)
            if pos.size != n_joints:
                return self._reject(
                    "wrong_size",
                    f"point {i} has {pos.size} positions for {n_joints} joint_names; "
                    f"expected {n_joints}",
                )
            vel = None
            if point.velocities is not None and len(point.velocities) > 0:
                vel = np.asarray(point.velocities, dtype=np.float64).reshape(-1)
                if vel.size != n_joints:
                    return self._reject(
                        "wrong_size",
                        f"point {i} has {vel.size} velocities for {n_joints} joint_names; "
                        f"expected {n_joints} or none",
                    )
            tfs = float(point.time_from_start)
            if not math.isfinite(tfs):
                return self._reject(
                    "non_finite",
                    f"point {i} has time_from_start {tfs!r}; expected a finite number of seconds",
                )
            for label, values in (("position", pos), ("velocity", vel)):
                if values is None:
                    continue
                bad = np.flatnonzero(~np.isfinite(values))
                if bad.size:
                    j = int(bad[0])
                    return self._reject(
                        "non_finite",
                        f"point {i} has {label} {float(values[j])!r} for joint {names[j]!r}; "
                        "expected finite values",
                    )
            times[i] = tfs
            positions[i] = pos
            if vel is not None:
                velocities[i] = vel
                has_velocity[i] = True
        for i in range(1, len(points)):
            if times[i] <= times[i - 1]:
                return self._reject(
                    "non_increasing_time",
                    f"time_from_start is not strictly increasing: point {i} at "
                    f"{times[i]:.6f} s follows point {i - 1} at {times[i - 1]:.6f} s",
                )
        if not self._allow_nonzero_end and has_velocity[-1]:
            moving = np.flatnonzero(np.abs(velocities[-1]) > _VELOCITY_EPSILON)
            if moving.size:
                j = int(moving[0])
                return self._reject(
                    "nonzero_end_velocity",
                    f"last point has velocity {float(velocities[-1, j])!r} for joint {names[j]!r}; "
                    "expected 0 (allow_nonzero_velocity_at_end is false, the Jazzy default)",
                )
        stamp = float(command.stamp)
        if stamp != 0.0 and stamp + times[-1] < now:
            return self._reject(
                "ends_in_past",
                f"trajectory ends in the past: header.stamp {stamp:.6f} s + last "
                f"time_from_start {times[-1]:.6f} s = {stamp + times[-1]:.6f} s is before "
                f"now {now:.6f} s",
            )

        dof = len(self._joint_names)
        columns = [self._index[j] for j in names]
        full_pos = np.full((len(points), dof), np.nan)
        full_vel = np.zeros((len(points), dof))
        full_pos[:, columns] = positions
        full_vel[:, columns] = velocities
        return _Trajectory(
            stamp=stamp,
            times=times,
            positions=full_pos,
            velocities=full_vel,
            has_velocity=has_velocity,
            t_obs=None,
        )

    def _adopt(self, new: _Trajectory, now: float) -> None:
        """Make ``new`` the running trajectory at control cycle ``now``."""
        old = self._active
        if old is not None:
            before_pos, before_vel = self._evaluate(old, now)
        else:
            before_pos, before_vel = self._cmd_pos.copy(), self._cmd_vel.copy()
        # Joints missing from a partial goal hold their current command (JTC fill_partial_goal).
        missing = np.isnan(new.positions[0])
        if np.any(missing):
            new.positions[:, missing] = before_pos[missing]
        new.start = now if new.stamp == 0.0 else new.stamp
        new.before_time = now
        new.before_positions = before_pos
        new.before_velocities = before_vel
        self._active = new

        own_scale = (
            float(np.max(np.abs(np.diff(new.positions, axis=0)))) if len(new.times) > 1 else 0.0
        )
        earlier_scale = self._step_scale
        self._step_scale = max(self._step_scale, own_scale)
        if old is None:
            return
        self._switches += 1
        self._switch_times.append(now)
        ahead = np.flatnonzero(new.start + new.times >= now)
        target = new.positions[ahead[0]] if ahead.size else new.positions[-1]
        jump = float(np.max(np.abs(target - before_pos)))
        scale = own_scale if own_scale > 1e-12 else earlier_scale
        ratio = jump / scale if scale > 1e-12 else None
        self._boundaries.append(BoundaryStep(t=now, jump=jump, scale=scale, ratio=ratio))

    def _evaluate(self, traj: _Trajectory, t: float) -> tuple[np.ndarray, np.ndarray]:
        """Commanded positions and velocities of an adopted trajectory at ``t`` (JTC sample)."""
        assert traj.start is not None
        if t < traj.before_time:
            return traj.before_positions.copy(), traj.before_velocities.copy()
        first_time = traj.start + float(traj.times[0])
        if t < first_time:
            return _interpolate(
                traj.before_time,
                traj.before_positions,
                traj.before_velocities,
                first_time,
                traj.positions[0],
                traj.velocities[0],
                t,
                bool(traj.has_velocity[0]),
            )
        absolute = traj.start + traj.times
        i = int(np.searchsorted(absolute, t, side="right")) - 1
        if i >= len(absolute) - 1:
            return traj.positions[-1].copy(), traj.velocities[-1].copy()
        return _interpolate(
            float(absolute[i]),
            traj.positions[i],
            traj.velocities[i],
            float(absolute[i + 1]),
            traj.positions[i + 1],
            traj.velocities[i + 1],
            t,
            bool(traj.has_velocity[i] and traj.has_velocity[i + 1]),
        )

    def _account(self, now: float) -> None:
        """Add the stall time of [last measured time, now] for the governing trajectory."""
        if self._measure_since is None or now <= self._measured_until:
            return
        governing = self._pending if self._pending is not None else self._active
        end = governing.end_time() if governing is not None else -math.inf
        stall = now - max(self._measured_until, end)
        if stall > 0.0:
            if not self._in_stall:
                self._in_stall = True
                self._stall_events += 1
                self._current_stall = 0.0
            self._stall_time += stall
            self._current_stall += stall
            self._longest_stall = max(self._longest_stall, self._current_stall)
        self._measured_until = now
