"""How a trajectory controller moves between the points the node publishes.

joint_trajectory_controller joins two points that both carry velocities with a
cubic Hermite segment (``interpolate_between_points``), and the segment from
its current state to the first point of a new trajectory likewise, starting
with the velocity it had. So what the robot is commanded between points
depends on the velocities published with them. This module holds both sides:

- :func:`finite_difference_velocities`: the velocities the node publishes,
  monotone (Fritsch-Butland, as SciPy's ``PchipInterpolator``): at each inner
  point the weighted harmonic mean of the two neighbouring secant slopes, 0
  where the motion stops or reverses; a forward difference on the first point
  and exactly 0 on the last (Jazzy refuses a non-zero last velocity). Monotone
  velocities make every segment between two points stay between their two
  positions, so a trajectory whose points are inside the position limits is
  inside them everywhere (central differences overshoot where a motion stops,
  e.g. a gripper closing onto its limit), and each velocity is at most the
  larger neighbouring secant, so a segment's peak speed is at most 1.5 times
  the fastest secant next to it.
- :func:`segment_extremes`: the exact largest speed, acceleration and position
  range of every cubic segment, what :func:`relay_ros.pipeline.gate.motion.check_motion`
  holds against the joint limits.
- :class:`ControllerTrajectory` (:func:`hermite_state`): a trajectory as the
  controller samples it, from the state it had at the stamp through the points with
  their velocities, the last point held after its end.

Plain NumPy; times in seconds, positions in rad or m.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = [
    "ControllerTrajectory",
    "SegmentExtremes",
    "TrajectoryError",
    "finite_difference_velocities",
    "hermite_state",
    "published_velocities",
    "segment_extremes",
]


class TrajectoryError(ValueError):
    """Invalid dimensions, times or positions for a trajectory."""


def finite_difference_velocities(
    positions: np.ndarray, times: np.ndarray, centred: bool | np.ndarray = False
) -> np.ndarray:
    """Velocities (N, J) per second for ``positions`` (N, J) at ``times`` (N,) seconds.

    Monotone: inside, ``0`` where the neighbouring secants ``d0``, ``d1`` differ in
    sign or one is 0, else ``(w0 + w1) / (w0 / d0 + w1 / d1)`` with
    ``w0 = 2 h1 + h0``, ``w1 = h1 + 2 h0`` (``h``: the two intervals; equal
    intervals give the harmonic mean ``2 d0 d1 / (d0 + d1)``); a forward difference
    on the first point; the last row exactly 0 (all 0 for a single point).

    ``centred`` (per column, or all): inside, the centred difference
    ``(d0 h1 + d1 h0) / (h0 + h1)`` (the slope of the parabola through the three
    points) instead: the speed the points imply. A monotone curve has to stop at every
    point where the motion turns, so a smooth turn between two points commanded at
    ``a`` rad/s^2 is run at up to 3.3 ``a`` on the controller's cubics; centred, at
    ``a``, overshooting the turning point by about ``a h^2 / 8`` (0.25 mrad at
    5 rad/s^2 and 50 Hz). For joints with an acceleration limit
    (:attr:`relay_ros.pipeline.gate.motion.MotionLimits.centred`); the motion check
    holds the exact extremes against the position range either way.

    Raises:
        TrajectoryError: Shapes that are not (N, J) and (N,) with N >= 1, or
            times that do not strictly increase.
    """
    pos = np.asarray(positions, dtype=np.float64)
    t = np.asarray(times, dtype=np.float64)
    if pos.ndim != 2 or t.shape != (pos.shape[0],) or pos.shape[0] == 0:
        raise TrajectoryError(
            f"positions shape {pos.shape} and times shape {t.shape} must be (N, J) and (N,), N >= 1"
        )
    n = pos.shape[0]
    velocities = np.zeros_like(pos)
    if n == 1:
        return velocities
    h = np.diff(t)
    if not (h > 0).all():
        raise TrajectoryError("times must be strictly increasing for finite differences")
    secants = np.diff(pos, axis=0) / h[:, None]  # (N-1, J)
    velocities[0] = secants[0]
    if n > 2:
        d0, d1 = secants[:-1], secants[1:]
        h0, h1 = h[:-1, None], h[1:, None]
        w0, w1 = 2.0 * h1 + h0, h1 + 2.0 * h0
        same = (d0 * d1) > 0.0
        with np.errstate(divide="ignore", invalid="ignore"):
            mean = (w0 + w1) / (w0 / d0 + w1 / d1)
        inner = np.where(same, mean, 0.0)
        wanted = np.broadcast_to(np.asarray(centred, dtype=bool), (pos.shape[1],))
        if wanted.any():
            inner[:, wanted] = ((d0 * h1 + d1 * h0) / (h0 + h1))[:, wanted]
        velocities[1:-1] = inner
    velocities[-1] = 0.0
    return velocities


def published_velocities(
    start: np.ndarray, positions: np.ndarray, times: np.ndarray, centred: bool | np.ndarray
) -> np.ndarray:
    """The velocities the node publishes with ``positions`` (N, J) at ``times`` (N,)
    for a controller that starts them from ``start`` (J,) at time 0: the monotone rule
    (:func:`finite_difference_velocities`); in ``centred`` columns the centred one,
    the first point's too, from the start (so the segment from where the controller
    is to the first point runs at the acceleration the points imply, not at what a
    forward difference makes of it)."""
    velocities = finite_difference_velocities(positions, times)
    wanted = np.broadcast_to(np.asarray(centred, dtype=bool), (velocities.shape[1],))
    if wanted.any():
        through = finite_difference_velocities(
            np.vstack((np.asarray(start, dtype=np.float64)[None, :], positions)),
            np.concatenate(([0.0], np.asarray(times, dtype=np.float64))),
            centred=True,
        )[1:]
        velocities[:, wanted] = through[:, wanted]
    return velocities


@dataclass(frozen=True, eq=False)
class SegmentExtremes:
    """The extremes of each cubic segment, arrays of shape (S, J).

    Attributes:
        speed: Largest ``|velocity|`` on the segment.
        acceleration: Largest ``|acceleration|`` on the segment.
        lowest: Lowest position on the segment.
        highest: Highest position on the segment.
    """

    speed: np.ndarray
    acceleration: np.ndarray
    lowest: np.ndarray
    highest: np.ndarray


def segment_extremes(
    p0: np.ndarray, v0: np.ndarray, p1: np.ndarray, v1: np.ndarray, duration: np.ndarray
) -> SegmentExtremes:
    """Extremes of the cubic Hermite segments from ``(p0, v0)`` to ``(p1, v1)``.

    ``p0, v0, p1, v1`` are (S, J); ``duration`` is (S,) seconds > 0. The segment is
    ``p(τ) = p0 + v0 τ + c2 τ² + c3 τ³`` on ``0 <= τ <= T``, as
    joint_trajectory_controller interpolates; its speed peaks at an end or where
    the acceleration ``2 c2 + 6 c3 τ`` is 0, its acceleration at an end, its
    position at an end or where the velocity is 0. Exact, not sampled.
    """
    p0 = np.asarray(p0, dtype=np.float64)
    p1 = np.asarray(p1, dtype=np.float64)
    v0 = np.asarray(v0, dtype=np.float64)
    v1 = np.asarray(v1, dtype=np.float64)
    T = np.asarray(duration, dtype=np.float64).reshape(-1, 1)
    delta = p1 - p0
    c2 = (3.0 * delta - (2.0 * v0 + v1) * T) / T**2
    c3 = (-2.0 * delta + (v0 + v1) * T) / T**3

    def velocity(tau: np.ndarray) -> np.ndarray:
        return v0 + 2.0 * c2 * tau + 3.0 * c3 * tau**2

    def position(tau: np.ndarray) -> np.ndarray:
        return p0 + v0 * tau + c2 * tau**2 + c3 * tau**3

    speed = np.maximum(np.abs(v0), np.abs(v1))
    with np.errstate(divide="ignore", invalid="ignore"):
        tau_peak = np.where(c3 != 0.0, -c2 / (3.0 * c3), -1.0)
    inside = (tau_peak > 0.0) & (tau_peak < T)
    speed = np.where(inside, np.maximum(speed, np.abs(velocity(np.clip(tau_peak, 0.0, T)))), speed)
    acceleration = np.maximum(np.abs(2.0 * c2), np.abs(2.0 * c2 + 6.0 * c3 * T))

    lowest = np.minimum(p0, p1)
    highest = np.maximum(p0, p1)
    # Velocity roots: 3 c3 τ² + 2 c2 τ + v0 = 0 (a linear equation when c3 = 0).
    a, b, c = 3.0 * c3, 2.0 * c2, v0
    with np.errstate(divide="ignore", invalid="ignore"):
        disc = b * b - 4.0 * a * c
        root = np.sqrt(np.maximum(disc, 0.0))
        quadratic = a != 0.0
        r1 = np.where(quadratic, (-b + root) / (2.0 * a), np.where(b != 0.0, -c / b, -1.0))
        r2 = np.where(quadratic, (-b - root) / (2.0 * a), -1.0)
    for r in (r1, r2):
        valid = (r > 0.0) & (r < T) & (~quadratic | (disc >= 0.0))
        value = position(np.where(valid, r, 0.0))
        lowest = np.where(valid, np.minimum(lowest, value), lowest)
        highest = np.where(valid, np.maximum(highest, value), highest)
    return SegmentExtremes(speed, acceleration, lowest, highest)


def hermite_state(
    times: np.ndarray, positions: np.ndarray, velocities: np.ndarray, t: np.ndarray | float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Position, velocity and acceleration at ``t`` of the cubic Hermite curve through
    ``positions`` (N, J) with ``velocities`` (N, J) at ``times`` (N,, increasing): how
    joint_trajectory_controller samples a trajectory whose points carry both.

    ``t`` is a time (the results are (J,)) or an array of K times ((K, J) each).
    Before the first point: the first point, its velocity, no acceleration; after the
    last: the last point at rest (the controller holds it).
    """
    times = np.asarray(times, dtype=np.float64)
    points = np.asarray(positions, dtype=np.float64)
    slopes = np.asarray(velocities, dtype=np.float64)
    at = np.atleast_1d(np.asarray(t, dtype=np.float64))
    n = len(times)
    j = np.clip(np.searchsorted(times, at, side="right") - 1, 0, max(0, n - 2))
    if n == 1:
        position = np.repeat(points[:1], len(at), axis=0)
        velocity = np.zeros_like(position)
        acceleration = np.zeros_like(position)
    else:
        span = (times[j + 1] - times[j])[:, None]
        tau = np.clip(at - times[j], 0.0, None)[:, None]
        p0, p1, v0, v1 = points[j], points[j + 1], slopes[j], slopes[j + 1]
        delta = p1 - p0
        c2 = (3.0 * delta - (2.0 * v0 + v1) * span) / span**2
        c3 = (-2.0 * delta + (v0 + v1) * span) / span**3
        position = p0 + v0 * tau + c2 * tau**2 + c3 * tau**3
        velocity = v0 + 2.0 * c2 * tau + 3.0 * c3 * tau**2
        acceleration = 2.0 * c2 + 6.0 * c3 * tau
        before = at <= times[0]
        position[before], velocity[before], acceleration[before] = points[0], slopes[0], 0.0
    after = at >= times[-1]
    position[after], velocity[after], acceleration[after] = points[-1], 0.0, 0.0
    if np.ndim(t) == 0:
        return position[0], velocity[0], acceleration[0]
    return position, velocity, acceleration


@dataclass(frozen=True, eq=False)
class ControllerTrajectory:
    """A trajectory as joint_trajectory_controller samples it (:func:`hermite_state`).

    Attributes:
        times: (M,) increasing seconds: the stamp, then each point's time.
        positions: (M, J) the state at the stamp, then the points.
        velocities: (M, J) the velocity at the stamp, then the points' (the node's
            published velocities).
    """

    times: np.ndarray
    positions: np.ndarray
    velocities: np.ndarray

    def __post_init__(self) -> None:
        times = np.array(self.times, dtype=np.float64).reshape(-1)
        positions = np.array(self.positions, dtype=np.float64)
        velocities = np.array(self.velocities, dtype=np.float64)
        if (
            positions.ndim != 2
            or positions.shape[0] != times.shape[0]
            or velocities.shape != positions.shape
            or times.size == 0
        ):
            raise TrajectoryError(
                f"a controller trajectory needs (M,), (M, J), (M, J) arrays with M >= 1, got "
                f"{times.shape}, {positions.shape}, {velocities.shape}"
            )
        if (np.diff(times) <= 0.0).any():
            raise TrajectoryError("a controller trajectory's times must strictly increase")
        for name, value in (("times", times), ("positions", positions), ("velocities", velocities)):
            value.setflags(write=False)
            object.__setattr__(self, name, value)

    @classmethod
    def published(
        cls,
        stamp: float,
        start: np.ndarray,
        start_velocity: np.ndarray,
        positions: np.ndarray,
        time_from_start: np.ndarray,
        velocities: np.ndarray | None = None,
    ) -> ControllerTrajectory:
        """A trajectory published at ``stamp`` that the controller starts from ``start``
        moving at ``start_velocity``: ``positions`` (N, J) at ``stamp +
        time_from_start`` with the published ``velocities`` (default: the monotone
        rule, :func:`finite_difference_velocities`)."""
        points = np.asarray(positions, dtype=np.float64)
        tfs = np.asarray(time_from_start, dtype=np.float64)
        if velocities is None:
            velocities = finite_difference_velocities(points, tfs)
        return cls(
            np.concatenate(([float(stamp)], float(stamp) + tfs)),
            np.vstack((np.asarray(start, dtype=np.float64)[None, :], points)),
            np.vstack(
                (
                    np.asarray(start_velocity, dtype=np.float64)[None, :],
                    np.asarray(velocities, dtype=np.float64),
                )
            ),
        )

    @classmethod
    def standing(cls, at: float, position: np.ndarray) -> ControllerTrajectory:
        """A controller that stands at ``position`` from ``at`` on."""
        point = np.asarray(position, dtype=np.float64).reshape(1, -1)
        return cls(np.array([float(at)]), point, np.zeros_like(point))

    @property
    def end_time(self) -> float:
        """The last point's time (s); the controller stands at it after."""
        return float(self.times[-1])

    def shifted(self, offset: np.ndarray) -> ControllerTrajectory:
        """The same motion moved by ``offset`` (J,) in position."""
        return ControllerTrajectory(
            self.times, self.positions + np.asarray(offset, dtype=np.float64), self.velocities
        )

    def state(self, t: np.ndarray | float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Position, velocity and acceleration at ``t`` (a time: (J,) each; K times:
        (K, J) each), as the controller samples them (:func:`hermite_state`)."""
        return hermite_state(self.times, self.positions, self.velocities, t)
