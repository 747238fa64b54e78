"""Safety checks between a policy reply and the robot.

Nothing reaches a trajectory controller unless it passes these checks: an action
chunk must have the expected shape and only finite values, its positions must be
inside the configured joint limits (clamped or refused, see ``LimitsMode``), its
first point must not jump more than ``max_joint_step`` from the measured state,
the trajectory the controller will follow must stay within each joint's position,
velocity and acceleration limits on every segment, from where the controller is
to the last point (:func:`check_motion`), and the camera frames and joint states
the observation came from must be fresh.

Each failed check returns a :class:`Refusal` whose ``reason`` is one human
sentence naming the input, the value and the limit, written for the log and for
``/diagnostics``. Programming errors (mismatched argument sizes, bad options)
raise :class:`SafetyError` instead.

Default limits mode is ``"refuse"``: positions outside the limits usually mean a
wrong joint order, wrong units or a model that does not fit the robot, and
silently clamping would drive the arm into its limit. ``"clamp"`` is opt-in for
models known to overshoot slightly near the limits.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from relay_ros.pipeline.interpolation import finite_difference_velocities, segment_extremes
from relay_ros.pipeline.joint_limits import JointLimit

__all__ = [
    "LIMITS_MODES",
    "JointLimits",
    "LimitsMode",
    "MotionLimits",
    "MotionResult",
    "Refusal",
    "SafetyError",
    "SafetyResult",
    "check_chunk",
    "check_first_step",
    "check_fresh",
    "check_motion",
]

LimitsMode = Literal["clamp", "refuse"]
LIMITS_MODES: tuple[str, ...] = ("refuse", "clamp")


class SafetyError(ValueError):
    """Invalid limits, options or argument sizes given to a safety check."""


@dataclass(frozen=True)
class Refusal:
    """Why something must not be executed.

    ``reason`` is a full sentence for logs and diagnostics; ``kind`` is a short
    stable tag for counting: ``"shape"``, ``"non_finite"``, ``"limits"``,
    ``"velocity"``, ``"acceleration"``, ``"jump"``, ``"stale"`` (or ``"other"``).
    """

    reason: str
    kind: str = "other"


@dataclass(frozen=True, eq=False)
class JointLimits:
    """Position limits per action dimension (radians or metres, like the actions).

    ``names[d]`` is the joint driven by dimension ``d`` or ``None`` (not
    commanded, e.g. π0 padding); such dimensions are unbounded (``-inf``/``inf``).
    Build it with :meth:`from_mapping`.
    """

    names: tuple[str | None, ...]
    lower: np.ndarray
    upper: np.ndarray

    def __post_init__(self) -> None:
        lower = np.array(self.lower, dtype=np.float64).reshape(-1)
        upper = np.array(self.upper, dtype=np.float64).reshape(-1)
        n = len(self.names)
        if lower.shape != (n,) or upper.shape != (n,):
            raise SafetyError(
                f"joint limits have {lower.size} lower and {upper.size} upper values, "
                f"expected {n} (one per dimension)"
            )
        for d in range(n):
            lo, hi = lower[d], upper[d]
            if np.isnan(lo) or np.isnan(hi):
                raise SafetyError(f"limits of {_label(self.names, d)} contain NaN: ({lo}, {hi})")
            if not lo < hi:
                raise SafetyError(
                    f"limits of {_label(self.names, d)} must have lower < upper, got ({lo}, {hi})"
                )
        lower.setflags(write=False)
        upper.setflags(write=False)
        object.__setattr__(self, "names", tuple(self.names))
        object.__setattr__(self, "lower", lower)
        object.__setattr__(self, "upper", upper)

    @property
    def size(self) -> int:
        """Number of action dimensions D."""
        return len(self.names)

    @classmethod
    def unbounded(cls, dim_names: Sequence[str | None]) -> JointLimits:
        """Limits that only name the dimensions and bound nothing."""
        n = len(dim_names)
        return cls(tuple(dim_names), np.full(n, -np.inf), np.full(n, np.inf))

    @classmethod
    def from_mapping(
        cls,
        limits: Mapping[str, Sequence[float] | JointLimit],
        dim_names: Sequence[str | None],
    ) -> JointLimits:
        """Build per-dimension limits from ``joint name -> (lower, upper)`` or
        ``joint name -> JointLimit`` (whose position limits may be infinite: a
        continuous joint).

        ``dim_names[d]`` is the joint that action dimension ``d`` drives, or
        ``None``. Joints without an entry in ``limits`` are unbounded. A limit for
        a joint that no dimension drives is an error (usually a typo), as is a
        pair that is not two finite numbers with lower < upper.
        """
        names = tuple(dim_names)
        known = [name for name in names if name is not None]
        lower = np.full(len(names), -np.inf)
        upper = np.full(len(names), np.inf)
        for joint, pair in limits.items():
            if joint not in known:
                raise SafetyError(
                    f"joint_limits has an entry for {joint!r}, which is not a commanded joint; "
                    f"commanded joints: {known}"
                )
            if isinstance(pair, JointLimit):
                for d, name in enumerate(names):
                    if name == joint:
                        lower[d] = pair.min_position
                        upper[d] = pair.max_position
                continue
            try:
                lo, hi = (float(v) for v in pair)
            except (TypeError, ValueError):
                raise SafetyError(
                    f"joint_limits[{joint!r}] = {pair!r} must be two numbers [lower, upper]"
                ) from None
            if not (math.isfinite(lo) and math.isfinite(hi)):
                raise SafetyError(
                    f"joint_limits[{joint!r}] = {pair!r} must be finite numbers [lower, upper]"
                )
            if not lo < hi:
                raise SafetyError(f"joint_limits[{joint!r}] = {pair!r} must have lower < upper")
            for d, name in enumerate(names):
                if name == joint:
                    lower[d] = lo
                    upper[d] = hi
        return cls(names, lower, upper)


@dataclass(frozen=True, eq=False)
class SafetyResult:
    """Outcome of :func:`check_chunk`.

    Exactly one of ``chunk`` (the safe, possibly clamped, float64 copy) and
    ``refusal`` is set. ``clamped`` counts the values changed in clamp mode and
    ``note`` describes the largest clamp in one sentence (``None`` if nothing
    was clamped).
    """

    chunk: np.ndarray | None
    refusal: Refusal | None
    clamped: int = 0
    note: str | None = None

    @property
    def ok(self) -> bool:
        """``True`` when the chunk may be executed."""
        return self.refusal is None


def _label(names: Sequence[str | None], d: int) -> str:
    name = names[d] if d < len(names) else None
    return f"joint {name!r} (dim {d})" if name is not None else f"dim {d}"


def _fmt(value: float) -> str:
    return f"{value:.4f}"


def check_chunk(
    chunk: np.ndarray,
    limits: JointLimits,
    *,
    mode: LimitsMode = "refuse",
    horizon: int | None = None,
) -> SafetyResult:
    """Check an action chunk of shape (H, D) before it is scheduled.

    Refuses a chunk that is not a 2-D numeric array with ``D == limits.size``
    columns (and ``H == horizon`` rows when given), or that has any NaN/Inf.
    Positions outside ``limits`` are refused (``mode="refuse"``, the default) or
    clamped into the limits (``mode="clamp"``). The returned chunk is a new
    float64 array; the input is never modified.
    """
    if mode not in LIMITS_MODES:
        raise SafetyError(f"limits mode {mode!r} is not one of {list(LIMITS_MODES)}")
    arr = np.asarray(chunk)
    expected = f"({horizon if horizon is not None else 'H'}, {limits.size})"
    if arr.ndim != 2:
        return SafetyResult(
            None,
            Refusal(
                f"action chunk has shape {tuple(arr.shape)}, expected {expected} "
                "(horizon, action dimensions)",
                "shape",
            ),
        )
    if arr.shape[1] != limits.size or (horizon is not None and arr.shape[0] != horizon):
        return SafetyResult(
            None,
            Refusal(f"action chunk has shape {tuple(arr.shape)}, expected {expected}", "shape"),
        )
    if arr.shape[0] == 0:
        return SafetyResult(None, Refusal("action chunk has no actions (0 rows)", "shape"))
    if not (np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)):
        return SafetyResult(
            None,
            Refusal(f"action chunk has dtype {arr.dtype}, expected a real number type", "shape"),
        )
    values = arr.astype(np.float64, copy=True)
    bad = ~np.isfinite(values)
    if bad.any():
        i, d = (int(v) for v in np.argwhere(bad)[0])
        count = int(bad.sum())
        more = f" ({count - 1} more non-finite values)" if count > 1 else ""
        return SafetyResult(
            None,
            Refusal(
                f"action chunk has a non-finite value {values[i, d]} at step {i}, "
                f"{_label(limits.names, d)}{more}; refusing the whole chunk",
                "non_finite",
            ),
        )
    below = limits.lower - values  # > 0 where under the lower limit
    above = values - limits.upper  # > 0 where over the upper limit
    excess = np.maximum(below, above)
    outside = excess > 0.0
    if not outside.any():
        return SafetyResult(values, None)
    i, d = (int(v) for v in np.unravel_index(int(np.argmax(excess)), excess.shape))
    count = int(outside.sum())
    if above[i, d] > 0.0:
        where = f"above its upper limit {_fmt(limits.upper[d])}"
    else:
        where = f"below its lower limit {_fmt(limits.lower[d])}"
    worst = f"{_label(limits.names, d)} is {_fmt(values[i, d])} at step {i}, {where}"
    more = f" ({count - 1} more values outside the limits)" if count > 1 else ""
    if mode == "refuse":
        return SafetyResult(
            None, Refusal(f"{worst}{more}; refusing the chunk (limits_mode=refuse)", "limits")
        )
    clamped = np.clip(values, limits.lower, limits.upper)
    note = f"clamped {count} value(s) into joint limits; largest: {worst}"
    return SafetyResult(clamped, None, clamped=count, note=note)


def check_first_step(
    current_state: np.ndarray,
    first_point: np.ndarray,
    max_joint_step: float | Sequence[float] | np.ndarray,
    joint_names: Sequence[str],
) -> Refusal | None:
    """Refuse a trajectory whose first point is too far from the measured state.

    ``current_state`` and ``first_point`` are positions of the joints
    ``joint_names`` (same order). ``max_joint_step`` is one bound for all joints
    or one per joint, > 0; ``inf`` disables the check. The largest violation is
    reported. A non-finite measured state is also refused, because the jump
    cannot be judged.
    """
    state = np.asarray(current_state, dtype=np.float64).reshape(-1)
    point = np.asarray(first_point, dtype=np.float64).reshape(-1)
    names = list(joint_names)
    if state.shape != point.shape or state.size != len(names):
        raise SafetyError(
            f"check_first_step got {state.size} state values, {point.size} point values "
            f"and {len(names)} joint names; expected the same number of each"
        )
    limit = np.broadcast_to(np.asarray(max_joint_step, dtype=np.float64), state.shape)
    if limit.shape != state.shape or np.isnan(limit).any() or (limit <= 0).any():
        raise SafetyError(
            f"max_joint_step {max_joint_step!r} must be a number > 0 or one per joint "
            f"({len(names)} joints)"
        )
    bad_state = ~np.isfinite(state)
    if bad_state.any():
        j = int(np.argmax(bad_state))
        return Refusal(
            f"current state of joint {names[j]!r} is {state[j]}, cannot check the first step",
            "jump",
        )
    bad_point = ~np.isfinite(point)
    if bad_point.any():
        j = int(np.argmax(bad_point))
        return Refusal(
            f"first point of joint {names[j]!r} is {point[j]}; refusing the trajectory",
            "non_finite",
        )
    step = np.abs(point - state)
    over = step - limit
    if not (over > 0.0).any():
        return None
    j = int(np.argmax(over))
    return Refusal(
        f"first point moves joint {names[j]!r} by {_fmt(step[j])} "
        f"(from {_fmt(state[j])} to {_fmt(point[j])}), more than max_joint_step "
        f"{_fmt(limit[j])}; refusing the trajectory",
        "jump",
    )


@dataclass(frozen=True, eq=False)
class MotionLimits:
    """Each trajectory column's limits: position range, largest speed and acceleration.

    ``lower``/``upper`` may be infinite (a continuous joint); ``max_velocity`` is
    finite and > 0; ``max_acceleration`` is ``inf`` where none is set. Build it with
    :meth:`from_joint_limits`.
    """

    names: tuple[str, ...]
    lower: np.ndarray
    upper: np.ndarray
    max_velocity: np.ndarray
    max_acceleration: np.ndarray

    def __post_init__(self) -> None:
        n = len(self.names)
        arrays = {}
        for label in ("lower", "upper", "max_velocity", "max_acceleration"):
            value = np.array(getattr(self, label), dtype=np.float64).reshape(-1)
            if value.shape != (n,) or np.isnan(value).any():
                raise SafetyError(f"motion limits: {label} must be {n} numbers, got {value}")
            value.setflags(write=False)
            arrays[label] = value
        if not (np.isfinite(arrays["max_velocity"]).all() and (arrays["max_velocity"] > 0).all()):
            raise SafetyError(f"motion limits: max_velocity {arrays['max_velocity']} must be > 0")
        if not (arrays["max_acceleration"] > 0).all():
            raise SafetyError(
                f"motion limits: max_acceleration {arrays['max_acceleration']} must be > 0"
            )
        object.__setattr__(self, "names", tuple(self.names))
        for label, value in arrays.items():
            object.__setattr__(self, label, value)

    @classmethod
    def from_joint_limits(
        cls, limits: Mapping[str, JointLimit], joints: Sequence[str]
    ) -> MotionLimits:
        """The limits of ``joints`` (the trajectory's columns, in order).

        Raises:
            SafetyError: A joint without an entry in ``limits``.
        """
        missing = [joint for joint in joints if joint not in limits]
        if missing:
            raise SafetyError(
                f"no joint limits for joints {missing}; every commanded joint needs them"
            )
        chosen = [limits[joint] for joint in joints]
        return cls(
            tuple(joints),
            np.array([limit.min_position for limit in chosen]),
            np.array([limit.max_position for limit in chosen]),
            np.array([limit.max_velocity for limit in chosen]),
            np.array([limit.max_acceleration for limit in chosen]),
        )


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
    velocities = np.vstack((start_velocity[None, :], finite_difference_velocities(positions, tfs)))
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
                f"{_segment_label(s, times)}, from {_fmt(points[s, j])} to "
                f"{_fmt(points[s + 1, j])}; its velocity limit is "
                f"{_fmt(limits.max_velocity[j])}/s",
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
                f"{_fmt(limits.max_acceleration[j])}/s^2",
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
            where = (
                f"reach {_fmt(ext.highest[s, j])}, above its upper limit {_fmt(limits.upper[j])}"
            )
        else:
            where = f"reach {_fmt(ext.lowest[s, j])}, below its lower limit {_fmt(limits.lower[j])}"
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
    then holds the last point. Every segment, the one from ``start`` to the first
    point and the tail the controller runs when no next chunk comes in time
    included, must stay within each joint's position range, velocity limit and
    acceleration limit: checked exactly on the cubic, not only at the points
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
            positive and increasing (programming errors: run :func:`check_chunk` first).
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
                f"{_fmt(lag[s, j])} (joint {limits.names[j]!r}, point {s})"
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


def check_fresh(
    stamps: Mapping[str, float | None],
    now: float,
    timeout_s: float,
) -> Refusal | None:
    """Refuse when an input is missing or older than ``timeout_s`` seconds.

    ``stamps`` maps an input name (e.g. ``"camera 'base_0_rgb'"`` or
    ``"joint states"``) to the time in seconds of its last message on the node
    clock, or ``None`` if nothing arrived yet. Stamps in the future count as
    fresh. All stale inputs are named, oldest first.
    """
    timeout = float(timeout_s)
    if math.isnan(timeout) or timeout <= 0:
        raise SafetyError(f"sensor timeout {timeout_s!r} s must be a number > 0")
    missing = [name for name, stamp in stamps.items() if stamp is None]
    if missing:
        names = ", ".join(repr(name) for name in missing)
        return Refusal(f"no message received yet on {names}", "stale")
    ages = [(float(now) - float(stamp), name) for name, stamp in stamps.items()]  # type: ignore[arg-type]
    stale = sorted(((age, name) for age, name in ages if age > timeout), reverse=True)
    if not stale:
        return None
    parts = ", ".join(f"{name!r} is {age:.3f} s old" for age, name in stale)
    noun = "input" if len(stale) == 1 else "inputs"
    return Refusal(f"stale {noun}: {parts} (sensor_timeout_s = {timeout:.3f} s)", "stale")
