"""Build the points of one controller's JointTrajectory from a :class:`Publication`.

joint_trajectory_controller interpolates cubically when points carry positions
and velocities, rejects non-increasing ``time_from_start`` and (Jazzy default) a
non-zero velocity on the last point. This module selects a controller's action
dimensions, computes finite-difference velocities and converts float seconds to
exact ``(sec, nanosec)`` integers, without rclpy; the node copies the result into
``trajectory_msgs`` messages.

Velocity choice (:func:`~relay_ros.pipeline.interpolation.finite_difference_velocities`):
monotone finite differences, the weighted harmonic mean of the two neighbouring
secant slopes inside (0 where the motion stops or reverses) and a forward
difference on the first point, so the controller's cubic segments never overshoot
the published positions (a trajectory inside the position limits at its points is
inside them everywhere). The last velocity is exactly zero so the controller
accepts the message and, if no next chunk arrives, stops at the last point.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from relay_ros.pipeline.interpolation import TrajectoryError, finite_difference_velocities
from relay_ros.pipeline.publication import Publication

__all__ = [
    "T_OBS_PREFIX",
    "JointTrajectoryData",
    "TrajectoryError",
    "TrajectoryPoints",
    "build_points",
    "format_t_obs",
    "finite_difference_velocities",
    "parse_t_obs",
    "read_joint_trajectory",
    "seconds_to_sec_nanosec",
    "times_to_sec_nanosec",
]

_NS_PER_S = 1_000_000_000


#: Prefix of ``header.frame_id`` that carries a chunk's observation time
#: (``t_obs=<seconds>``). joint_trajectory_controller ignores ``frame_id``; the
#: simulated arm and ``relay-ros replay`` read it to measure action age.
T_OBS_PREFIX = "t_obs="


def format_t_obs(t_obs: float) -> str:
    """The ``header.frame_id`` text that tags a trajectory with its observation time (s)."""
    return f"{T_OBS_PREFIX}{float(t_obs)!r}"


def parse_t_obs(frame_id: str) -> float | None:
    """The observation time (s) in a ``t_obs=<float>`` frame_id, or None if untagged."""
    if not frame_id.startswith(T_OBS_PREFIX):
        return None
    try:
        value = float(frame_id[len(T_OBS_PREFIX) :])
    except ValueError:
        return None
    return value if math.isfinite(value) else None


@dataclass(frozen=True, eq=False)
class TrajectoryPoints:
    """Points for one controller; arrays are read-only.

    Attributes:
        positions: (N, J) joint positions (the controller's joint order).
        velocities: (N, J) finite-difference velocities per second; last row 0.
        time_from_start: (N,) float seconds, strictly increasing.
        stamp: header.stamp of the publication, float seconds.
    """

    positions: np.ndarray
    velocities: np.ndarray
    time_from_start: np.ndarray
    stamp: float

    @property
    def time_from_start_sec_nanosec(self) -> list[tuple[int, int]]:
        """``time_from_start`` as exact, strictly increasing ``(sec, nanosec)`` pairs."""
        return times_to_sec_nanosec(self.time_from_start)

    @property
    def stamp_sec_nanosec(self) -> tuple[int, int]:
        """``stamp`` as ``(sec, nanosec)``."""
        return seconds_to_sec_nanosec(self.stamp)


def seconds_to_sec_nanosec(seconds: float) -> tuple[int, int]:
    """Split float seconds (>= 0) into ``(sec, nanosec)`` with 0 <= nanosec < 1e9.

    ``sec = floor(seconds)`` and the fraction (exact in binary floating point) is
    rounded to the nearest nanosecond, carrying into ``sec`` at 1e9. The mapping
    is monotonic: larger seconds never give a smaller pair.
    """
    value = float(seconds)
    if not math.isfinite(value) or value < 0.0:
        raise TrajectoryError(f"time {seconds!r} s must be a finite number >= 0")
    sec = math.floor(value)
    nanosec = round((value - sec) * _NS_PER_S)
    if nanosec >= _NS_PER_S:
        sec += 1
        nanosec -= _NS_PER_S
    return int(sec), int(nanosec)


def times_to_sec_nanosec(times: Sequence[float] | np.ndarray) -> list[tuple[int, int]]:
    """Convert increasing times in seconds to ``(sec, nanosec)`` pairs and check
    that they stay strictly increasing after rounding to nanoseconds."""
    pairs = [seconds_to_sec_nanosec(float(t)) for t in np.asarray(times, dtype=np.float64)]
    for j in range(1, len(pairs)):
        if pairs[j] <= pairs[j - 1]:
            raise TrajectoryError(
                f"time_from_start[{j}] {pairs[j]} is not after time_from_start[{j - 1}] "
                f"{pairs[j - 1]} (sec, nanosec); times must be strictly increasing"
            )
    return pairs


def build_points(publication: Publication, dims: Sequence[int]) -> TrajectoryPoints:
    """The points of one controller: columns ``dims`` of ``publication.positions``
    (one per controller joint, in the controller's joint order; a dimension may
    drive several joints), with velocities (the publication's, else the monotone rule)
    and ``time_from_start``."""
    positions = np.asarray(publication.positions, dtype=np.float64)
    width = positions.shape[1]
    columns = list(dims)
    if not columns:
        raise TrajectoryError("dims is empty; a controller needs at least one action dimension")
    for d in columns:
        if isinstance(d, bool) or not isinstance(d, (int, np.integer)) or not 0 <= d < width:
            raise TrajectoryError(
                f"action dimension {d!r} is out of range; the publication has dimensions "
                f"0..{width - 1}"
            )
    selected = positions[:, columns].copy()
    if not np.isfinite(selected).all():
        raise TrajectoryError("publication positions contain NaN or Inf")
    tfs = np.array(publication.time_from_start, dtype=np.float64)
    if tfs.size and tfs[0] < 0:
        raise TrajectoryError(f"time_from_start[0] {tfs[0]} s is negative")
    if publication.velocities is None:
        velocities = finite_difference_velocities(selected, tfs)
    else:
        velocities = np.asarray(publication.velocities, dtype=np.float64)[:, columns].copy()
    for array in (selected, velocities, tfs):
        array.setflags(write=False)
    return TrajectoryPoints(selected, velocities, tfs, float(publication.stamp))


@dataclass(frozen=True, eq=False)
class JointTrajectoryData:
    """A ``trajectory_msgs/JointTrajectory`` as plain data (see :func:`read_joint_trajectory`).

    Per-point values are kept as sent (a malformed message stays malformed, so a
    follower can reject it); :meth:`position_array` gives the (N, J) array.

    Attributes:
        stamp: ``header.stamp`` in seconds.
        t_obs: Observation time of a ``t_obs=<s>`` tagged message, else None.
        joint_names: The message's joint names.
        time_from_start: (N,) seconds of each point after ``stamp``.
        positions: Per point, its positions.
        velocities: Per point, its velocities (empty when the point has none).
    """

    stamp: float
    t_obs: float | None
    joint_names: tuple[str, ...]
    time_from_start: np.ndarray
    positions: tuple[tuple[float, ...], ...]
    velocities: tuple[tuple[float, ...], ...]

    @property
    def times(self) -> np.ndarray:
        """(N,) absolute time of each point: ``stamp + time_from_start``."""
        return self.stamp + self.time_from_start

    def position_array(self) -> np.ndarray:
        """(N, J) float64 positions, J = ``len(joint_names)``.

        Raises:
            TrajectoryError: A point with another number of positions.
        """
        width = len(self.joint_names)
        for i, row in enumerate(self.positions):
            if len(row) != width:
                raise TrajectoryError(f"point {i} has {len(row)} positions for {width} joint_names")
        return np.array(self.positions, dtype=np.float64).reshape(len(self.positions), width)


def _seconds(value: object) -> float:
    return int(value.sec) + int(value.nanosec) * 1e-9  # type: ignore[attr-defined]


def read_joint_trajectory(msg: object) -> JointTrajectoryData:
    """Read a JointTrajectory message (rclpy or rosbags; duck-typed, no ROS import).

    The one place a trajectory message is turned back into numbers: the simulated
    arm, the demo and ``relay-ros replay`` all use it.
    """
    points = list(msg.points)  # type: ignore[attr-defined]
    header = msg.header  # type: ignore[attr-defined]
    return JointTrajectoryData(
        stamp=_seconds(header.stamp),
        t_obs=parse_t_obs(str(header.frame_id)),
        joint_names=tuple(str(n) for n in msg.joint_names),  # type: ignore[attr-defined]
        time_from_start=np.array([_seconds(p.time_from_start) for p in points], dtype=np.float64),
        positions=tuple(tuple(float(v) for v in p.positions) for p in points),
        velocities=tuple(tuple(float(v) for v in p.velocities) for p in points),
    )
