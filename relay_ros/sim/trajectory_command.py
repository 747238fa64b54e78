"""A ``trajectory_msgs/JointTrajectory`` as plain data, and joint_trajectory_controller's
checks of it (``validate_trajectory_msg`` of Humble and Jazzy), without rclpy.

`check_command` applies the rules in the order of `REJECT_CODES` and returns the
`AcceptedTrajectory` in the controller's joint order, or a rejected `Acceptance`
that names the bad value: a non-zero stamp whose ``stamp + last time_from_start``
is already past, unknown, duplicate or missing joints (missing ones are filled
later with the current command when partial goals are allowed), empty joint names
or points, wrong array sizes, non-increasing ``time_from_start``, a non-zero
velocity on the last point (Jazzy default), and, as a simulator-only guard,
non-finite values. `relay_ros.sim.trajectory_follower` runs what it accepts.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from relay_ros.pipeline.trajectory import read_joint_trajectory

__all__ = [
    "REJECT_CODES",
    "Acceptance",
    "AcceptedTrajectory",
    "TrajectoryCommand",
    "TrajectoryPoint",
    "check_command",
]

#: Every rejection code `check_command` can return, in checking order.
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


@dataclass
class AcceptedTrajectory:
    """A trajectory that passed `check_command`, in controller joint order.

    The controller fills ``start`` and the "point before the trajectory" (JTC) when
    it adopts it.
    """

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


def check_command(
    command: TrajectoryCommand,
    now: float,
    *,
    controller: str,
    joint_index: Mapping[str, int],
    allow_partial_joints: bool,
    allow_nonzero_velocity_at_end: bool,
) -> AcceptedTrajectory | Acceptance:
    """Apply JTC's ``validate_trajectory_msg`` rules to a trajectory arriving at ``now``.

    Args:
        command: The trajectory.
        now: Arrival time in seconds.
        controller: Controller name, for the reasons.
        joint_index: The controller's joints and their column, in command order.
        allow_partial_joints: Accept a subset of the joints.
        allow_nonzero_velocity_at_end: Accept a non-zero last velocity.

    Returns:
        The trajectory in controller joint order (``t_obs`` unset), or a rejection.
    """

    def reject(code: str, reason: str) -> Acceptance:
        return Acceptance(False, code, f"controller {controller!r}: {reason}")

    names = [str(n) for n in command.joint_names]
    expected = list(joint_index)
    if not names:
        return reject("empty_joint_names", f"trajectory has no joint_names; expected {expected}")
    for joint in names:
        if names.count(joint) > 1:
            return reject(
                "duplicate_joint",
                f"joint {joint!r} appears {names.count(joint)} times in joint_names; "
                "expected each joint once",
            )
    for joint in names:
        if joint not in joint_index:
            return reject(
                "unknown_joint",
                f"joint {joint!r} is not one of the controller's joints {expected}",
            )
    missing = [j for j in expected if j not in names]
    if missing and not allow_partial_joints:
        return reject(
            "missing_joints",
            f"trajectory is missing joints {missing} of {expected} (allow_partial_joints is false)",
        )
    points = list(command.points)
    if not points:
        return reject("empty_points", "trajectory has no points; expected at least 1")

    n_joints = len(names)
    times = np.empty(len(points))
    positions = np.empty((len(points), n_joints))
    velocities = np.zeros((len(points), n_joints))
    has_velocity = np.zeros(len(points), dtype=bool)
    for i, raw in enumerate(points):
        point = TrajectoryPoint(*raw)
        pos = np.asarray(point.positions, dtype=np.float64).reshape(-1)
        if pos.size != n_joints:
            return reject(
                "wrong_size",
                f"point {i} has {pos.size} positions for {n_joints} joint_names; "
                f"expected {n_joints}",
            )
        vel = None
        if point.velocities is not None and len(point.velocities) > 0:
            vel = np.asarray(point.velocities, dtype=np.float64).reshape(-1)
            if vel.size != n_joints:
                return reject(
                    "wrong_size",
                    f"point {i} has {vel.size} velocities for {n_joints} joint_names; "
                    f"expected {n_joints} or none",
                )
        tfs = float(point.time_from_start)
        if not math.isfinite(tfs):
            return reject(
                "non_finite",
                f"point {i} has time_from_start {tfs!r}; expected a finite number of seconds",
            )
        for label, values in (("position", pos), ("velocity", vel)):
            if values is None:
                continue
            bad = np.flatnonzero(~np.isfinite(values))
            if bad.size:
                j = int(bad[0])
                return reject(
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
            return reject(
                "non_increasing_time",
                f"time_from_start is not strictly increasing: point {i} at "
                f"{times[i]:.6f} s follows point {i - 1} at {times[i - 1]:.6f} s",
            )
    if not allow_nonzero_velocity_at_end and has_velocity[-1]:
        moving = np.flatnonzero(np.abs(velocities[-1]) > _VELOCITY_EPSILON)
        if moving.size:
            j = int(moving[0])
            return reject(
                "nonzero_end_velocity",
                f"last point has velocity {float(velocities[-1, j])!r} for joint {names[j]!r}; "
                "expected 0 (allow_nonzero_velocity_at_end is false, the Jazzy default)",
            )
    stamp = float(command.stamp)
    if stamp != 0.0 and stamp + times[-1] < now:
        return reject(
            "ends_in_past",
            f"trajectory ends in the past: header.stamp {stamp:.6f} s + last "
            f"time_from_start {times[-1]:.6f} s = {stamp + times[-1]:.6f} s is before "
            f"now {now:.6f} s",
        )

    dof = len(joint_index)
    columns = [joint_index[j] for j in names]
    full_pos = np.full((len(points), dof), np.nan)
    full_vel = np.zeros((len(points), dof))
    full_pos[:, columns] = positions
    full_vel[:, columns] = velocities
    return AcceptedTrajectory(
        stamp=stamp,
        times=times,
        positions=full_pos,
        velocities=full_vel,
        has_velocity=has_velocity,
        t_obs=None,
    )
