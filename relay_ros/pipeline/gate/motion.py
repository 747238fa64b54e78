"""The motion check: the trajectory a controller will follow stays within its joints' limits.

A chunk that passed :func:`~relay_ros.pipeline.safety.check_chunk` can still be
unsafe once a controller interpolates it: a cubic segment overshoots between
points, or the jump from where the controller is now to the first point needs more
than the joint's velocity or acceleration limit. :func:`check_motion` checks every
segment, from the controller's current position and velocity to the last point,
for position range, velocity and acceleration (with
:func:`~relay_ros.pipeline.interpolation.segment_extremes`), and either accepts the
trajectory, slows and clips it (``limits_mode`` clamp) or refuses it with a
:class:`~relay_ros.pipeline.safety.Refusal` naming the joint, the segment, the value
and the limit. Chunks and holds pass the same check.

**The default acceleration bound.** A URDF has no acceleration limits and ros2_control's
``joint_limits`` has them only where ``has_acceleration_limits`` is set. Without one, the
trajectory's own points are still bounded: from one point to the next a joint's speed
may change by at most its velocity limit, i.e. the second differences of the points stay
within ``max_velocity / dt`` (:attr:`MotionLimits.action_acceleration`; ``dt`` the action
period). A policy that chatters (±0.015 rad alternating every 20 ms point: a 3 rad/s swing,
450 rad/s² on the controller's cubic) is refused, while a policy's starts, stops, turns
and the chunk switches pass: the reference policies' chunks (flow and visual, every
model, every smoothing of ``bench/motion.py``) change speed by at most 0.84 of the
velocity limit per point (docs/node.md). Where an acceleration limit is set, it bounds
every cubic segment the controller runs, from its current state to the last point.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from relay_ros.pipeline.interpolation import published_velocities, segment_extremes
from relay_ros.pipeline.joint_limits import JointLimit
from relay_ros.pipeline.safety import LIMITS_MODES, LimitsMode, Refusal, SafetyError

__all__ = ["MotionLimits", "MotionResult", "check_motion"]


@dataclass(frozen=True, eq=False)
class MotionLimits:
    """Each trajectory column's limits: position range, largest speed and acceleration.

    ``lower``/``upper`` may be infinite (a continuous joint); ``max_velocity`` is
    finite and > 0; ``max_acceleration`` is ``inf`` where none is set.
    ``action_acceleration`` bounds the second differences of the points (module
    docstring) and the stop of a hold: ``max_acceleration`` where set, else the
    default ``max_velocity / dt`` (``inf`` when built without ``dt``). Build it
    with :meth:`from_joint_limits`.
    """

    names: tuple[str, ...]
    lower: np.ndarray
    upper: np.ndarray
    max_velocity: np.ndarray
    max_acceleration: np.ndarray
    action_acceleration: np.ndarray | None = None

    def __post_init__(self) -> None:
        n = len(self.names)
        if self.action_acceleration is None:
            object.__setattr__(self, "action_acceleration", self.max_acceleration)
        arrays = {}
        for label in ("lower", "upper", "max_velocity", "max_acceleration", "action_acceleration"):
            value = np.array(getattr(self, label), dtype=np.float64).reshape(-1)
            if value.shape != (n,) or np.isnan(value).any():
                raise SafetyError(f"motion limits: {label} must be {n} numbers, got {value}")
            value.setflags(write=False)
            arrays[label] = value
        if not (np.isfinite(arrays["max_velocity"]).all() and (arrays["max_velocity"] > 0).all()):
            raise SafetyError(f"motion limits: max_velocity {arrays['max_velocity']} must be > 0")
        for label in ("max_acceleration", "action_acceleration"):
            if not (arrays[label] > 0).all():
                raise SafetyError(f"motion limits: {label} {arrays[label]} must be > 0")
        object.__setattr__(self, "names", tuple(self.names))
        for label, value in arrays.items():
            object.__setattr__(self, label, value)

    @classmethod
    def from_joint_limits(
        cls, limits: Mapping[str, JointLimit], joints: Sequence[str], *, dt: float | None = None
    ) -> MotionLimits:
        """The limits of ``joints`` (the trajectory's columns, in order); ``dt``, the
        action period in seconds, gives joints without an acceleration limit the
        default bound ``max_velocity / dt`` on the points' second differences.

        Raises:
            SafetyError: A joint without an entry in ``limits``, or ``dt`` <= 0.
        """
        if dt is not None and not (math.isfinite(dt) and dt > 0.0):
            raise SafetyError(f"motion limits: dt {dt!r} must be a finite number of seconds > 0")
        missing = [joint for joint in joints if joint not in limits]
        if missing:
            raise SafetyError(
                f"no joint limits for joints {missing}; every commanded joint needs them"
            )
        chosen = [limits[joint] for joint in joints]
        max_velocity = np.array([limit.max_velocity for limit in chosen])
        max_acceleration = np.array([limit.max_acceleration for limit in chosen])
        default = max_velocity / dt if dt is not None else np.full(len(chosen), math.inf)
        return cls(
            tuple(joints),
            np.array([limit.min_position for limit in chosen]),
            np.array([limit.max_position for limit in chosen]),
            max_velocity,
            max_acceleration,
            np.where(np.isfinite(max_acceleration), max_acceleration, default),
        )

    @property
    def centred(self) -> np.ndarray:
        """Columns whose published velocities follow the centred rule (joints with an
        acceleration limit: :func:`~relay_ros.pipeline.interpolation.published_velocities`)."""
        return np.isfinite(self.max_acceleration)

    @property
    def stop_acceleration(self) -> np.ndarray:
        """The largest acceleration a hold may command on its stop (per column)."""
        assert self.action_acceleration is not None
        return self.action_acceleration


@dataclass(frozen=True, eq=False)
class MotionResult:
    """Outcome of :func:`check_motion`.

    Exactly one of ``positions`` (what may be published: the input, or in clamp
    mode its slowed and clipped copy) and ``refusal`` is set. ``note`` says what
    clamping changed, in one sentence (None if nothing). ``peak_speed_ratio`` is
    the largest speed on the returned trajectory over its joint's velocity limit
    (<= 1 when accepted).
    """

    positions: np.ndarray | None
    refusal: Refusal | None
    note: str | None = None
    peak_speed_ratio: float = 0.0

    @property
    def ok(self) -> bool:
        """``True`` when the trajectory may be published."""
        return self.refusal is None


#: Relative slack on the velocity and acceleration limits (float rounding only).
_LIMIT_SLACK = 1e-9
#: Fractions of the velocity limit tried, in order, when clamp mode slows a trajectory:
#: monotone cubic segments peak at up to 1.5x their fastest secant, so the last one
#: always meets the velocity limit between points.
_CLAMP_BUDGETS = (1.0, 0.85, 0.7, 2.0 / 3.0)


@dataclass(frozen=True)
class _Violation:
    ratio: float  # how far over (1 = at the limit)
    kind: str  # "velocity", "acceleration", "limits"
    segment: int
    joint: int
    text: str


def _segment_label(segment: int, times: np.ndarray) -> str:
    if segment == 0:
        return f"from where the controller is to the first point (in {times[1]:.3f} s)"
    return (
        f"between points {segment - 1} and {segment} "
        f"(t = {times[segment]:.3f} to {times[segment + 1]:.3f} s)"
    )


def _violations(
    start: np.ndarray,
    start_velocity: np.ndarray,
    positions: np.ndarray,
    tfs: np.ndarray,
    limits: MotionLimits,
) -> tuple[list[_Violation], float]:
    """Every segment's worst violation per kind, and the peak speed ratio."""
    points = np.vstack((start[None, :], positions))
    times = np.concatenate(([0.0], tfs))
    published = published_velocities(start, positions, tfs, limits.centred)
    velocities = np.vstack((start_velocity[None, :], published))
    ext = segment_extremes(points[:-1], velocities[:-1], points[1:], velocities[1:], np.diff(times))
    names = limits.names
    found: list[_Violation] = []
    speed_ratio = ext.speed / limits.max_velocity
    peak = float(speed_ratio.max()) if speed_ratio.size else 0.0
    if peak > 1.0 + _LIMIT_SLACK:
        s, j = (int(v) for v in np.unravel_index(int(np.argmax(speed_ratio)), speed_ratio.shape))
        found.append(
            _Violation(
                peak,
                "velocity",
                s,
                j,
                f"joint {names[j]!r} would move at {ext.speed[s, j]:.3f}/s "
                f"{_segment_label(s, times)}, from {points[s, j]:.4f} to "
                f"{points[s + 1, j]:.4f}; its velocity limit is "
                f"{limits.max_velocity[j]:.4f}/s",
            )
        )
    accel_ratio = ext.acceleration / limits.max_acceleration
    if accel_ratio.size and float(accel_ratio.max()) > 1.0 + _LIMIT_SLACK:
        s, j = (int(v) for v in np.unravel_index(int(np.argmax(accel_ratio)), accel_ratio.shape))
        found.append(
            _Violation(
                float(accel_ratio[s, j]),
                "acceleration",
                s,
                j,
                f"joint {names[j]!r} would accelerate at {ext.acceleration[s, j]:.3f}/s^2 "
                f"{_segment_label(s, times)}; its acceleration limit is "
                f"{limits.max_acceleration[j]:.4f}/s^2",
            )
        )
    # The points' own second differences: the default bound where no acceleration
    # limit is set (module docstring); implied by the cubic check where one is.
    action = limits.action_acceleration
    assert action is not None
    if positions.shape[0] >= 3 and np.isfinite(action).any():
        secants = np.diff(positions, axis=0) / np.diff(tfs)[:, None]
        spans = 0.5 * (tfs[2:] - tfs[:-2])
        change = np.abs(np.diff(secants, axis=0)) / spans[:, None]
        ratio = change / action
        if float(ratio.max()) > 1.0 + _LIMIT_SLACK:
            i, j = (int(v) for v in np.unravel_index(int(np.argmax(ratio)), ratio.shape))
            if np.isfinite(limits.max_acceleration[j]):
                bound = f"its acceleration limit {action[j]:.4f}/s^2"
            else:
                bound = (
                    f"the default bound {action[j]:.1f}/s^2 (its velocity limit "
                    f"{limits.max_velocity[j]:.4f}/s per action period; no acceleration "
                    "limit is set)"
                )
            found.append(
                _Violation(
                    float(ratio[i, j]),
                    "acceleration",
                    i + 2,
                    j,
                    f"joint {names[j]!r} would change speed from {secants[i, j]:.3f}/s to "
                    f"{secants[i + 1, j]:.3f}/s at point {i + 1} (t = {tfs[i + 1]:.3f} s): "
                    f"{change[i, j]:.1f}/s^2 between its points, more than {bound}",
                )
            )
    # The first segment starts where the controller is, which may be outside a range
    # (a gripper measured a hair past its limit): from there it may only move inwards.
    lower = np.broadcast_to(limits.lower, ext.lowest.shape).copy()
    upper = np.broadcast_to(limits.upper, ext.highest.shape).copy()
    lower[0] = np.minimum(lower[0], start)
    upper[0] = np.maximum(upper[0], start)
    below = lower - ext.lowest
    above = ext.highest - upper
    over = np.maximum(below, above)
    if over.size and float(over.max()) > 1e-9:
        s, j = (int(v) for v in np.unravel_index(int(np.argmax(over)), over.shape))
        if above[s, j] >= below[s, j]:
            where = f"reach {ext.highest[s, j]:.4f}, above its upper limit {limits.upper[j]:.4f}"
        else:
            where = f"reach {ext.lowest[s, j]:.4f}, below its lower limit {limits.lower[j]:.4f}"
        found.append(
            _Violation(
                math.inf,
                "limits",
                s,
                j,
                f"joint {names[j]!r} would {where} {_segment_label(s, times)}",
            )
        )
    return found, peak


def _slowed(
    start: np.ndarray, positions: np.ndarray, tfs: np.ndarray, speed: np.ndarray
) -> np.ndarray:
    """``positions`` followed from ``start`` at most at ``speed`` per joint (a rate limiter)."""
    out = np.empty_like(positions)
    previous, t_previous = start, 0.0
    for i in range(positions.shape[0]):
        step = speed * (tfs[i] - t_previous)
        previous = previous + np.clip(positions[i] - previous, -step, step)
        out[i] = previous
        t_previous = tfs[i]
    return out


def check_motion(
    start: np.ndarray,
    positions: np.ndarray,
    time_from_start: np.ndarray,
    limits: MotionLimits,
    *,
    start_velocity: np.ndarray | None = None,
    mode: LimitsMode = "refuse",
) -> MotionResult:
    """Check the whole trajectory a controller will follow for ``positions``.

    The controller is at ``start`` (J,) with ``start_velocity`` (J,; default 0) at
    the trajectory's stamp; it follows cubic segments to ``positions`` (N, J) at
    ``time_from_start`` (N,) seconds after the stamp, with the velocities the node
    publishes (:func:`~relay_ros.pipeline.interpolation.finite_difference_velocities`),
    (:func:`~relay_ros.pipeline.interpolation.published_velocities`: centred for
    joints with an acceleration limit), then holds the last point. Every segment,
    the one from ``start`` to the first point and the tail the controller runs when
    no next chunk comes in time included, must stay within each joint's position
    range, velocity limit and acceleration limit: checked exactly on the cubic, not
    only at the points
    (the published velocities are the segments' end speeds, so they are covered).

    ``mode="refuse"`` (default) refuses any violation. ``mode="clamp"`` clips the
    positions into the position limits and slows each joint where it would move
    too fast (each point moves towards its target at most at a fraction of the
    velocity limit, so the trajectory lags the chunk until it catches up; the
    timeline stays as it was), and says so in ``note``; an acceleration limit, or
    a first segment that the controller's current velocity makes overshoot, that
    slowing cannot meet is refused in either mode.

    Raises:
        SafetyError: Mismatched shapes, non-finite values or times that are not
            positive and increasing (programming errors: run
            :func:`~relay_ros.pipeline.safety.check_chunk` first).
    """
    if mode not in LIMITS_MODES:
        raise SafetyError(f"limits mode {mode!r} is not one of {list(LIMITS_MODES)}")
    pos = np.asarray(positions, dtype=np.float64)
    tfs = np.asarray(time_from_start, dtype=np.float64).reshape(-1)
    joints = len(limits.names)
    first = np.asarray(start, dtype=np.float64).reshape(-1)
    velocity0 = (
        np.zeros(joints)
        if start_velocity is None
        else np.asarray(start_velocity, dtype=np.float64).reshape(-1)
    )
    if pos.ndim != 2 or pos.shape[1] != joints or tfs.shape != (pos.shape[0],) or not pos.size:
        raise SafetyError(
            f"check_motion got positions {pos.shape} and times {tfs.shape} for {joints} joints; "
            "expected (N, J) and (N,) with N >= 1"
        )
    if first.shape != (joints,) or velocity0.shape != (joints,):
        raise SafetyError(
            f"check_motion got a start of {first.size} and a start velocity of {velocity0.size} "
            f"values for {joints} joints"
        )
    arrays_finite = all(np.isfinite(a).all() for a in (pos, tfs, first, velocity0))
    if not arrays_finite or tfs[0] <= 0.0 or (np.diff(tfs) <= 0.0).any():
        raise SafetyError(
            "check_motion needs finite values and times after the stamp that strictly increase"
        )
    found, peak = _violations(first, velocity0, pos, tfs, limits)
    if not found:
        return MotionResult(pos.copy(), None, None, peak)
    worst = max(found, key=lambda v: (v.ratio, v.kind == "limits"))
    more = ""
    if len(found) > 1:
        more = " (also " + "; ".join(v.text for v in found if v is not worst) + ")"
    if mode == "refuse":
        return MotionResult(
            None,
            Refusal(f"{worst.text}{more}; refusing the chunk (limits_mode=refuse)", worst.kind),
        )
    clipped = np.clip(pos, limits.lower, limits.upper)
    for fraction in _CLAMP_BUDGETS:
        slowed = _slowed(first, clipped, tfs, limits.max_velocity * fraction)
        remaining, peak = _violations(first, velocity0, slowed, tfs, limits)
        if not remaining:
            lag = np.abs(slowed - pos)
            s, j = (int(v) for v in np.unravel_index(int(np.argmax(lag)), lag.shape))
            note = (
                f"clamped the trajectory into the joint limits: {worst.text}; joints slowed to "
                f"at most {fraction:.0%} of their velocity limits, lagging the chunk by up to "
                f"{lag[s, j]:.4f} (joint {limits.names[j]!r}, point {s})"
            )
            return MotionResult(slowed, None, note, peak)
    last = max(remaining, key=lambda v: v.ratio)
    return MotionResult(
        None,
        Refusal(
            f"{worst.text}{more}; clamping cannot meet the limits ({last.text}); refusing the "
            "chunk (limits_mode=clamp)",
            last.kind,
        ),
    )
