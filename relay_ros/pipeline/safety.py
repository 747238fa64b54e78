"""Safety checks between a policy reply and the robot.

Nothing reaches a trajectory controller unless it passes these checks: an action
chunk must have the expected shape and only finite values, its positions must be
inside the configured joint limits (clamped or refused, see ``LimitsMode``), its
first point must not jump more than ``max_joint_step`` from the measured state,
and the camera frames and joint states the observation came from must be fresh.
The trajectory a controller will follow is checked segment by segment in
:mod:`~relay_ros.pipeline.gate.motion`, which shares :class:`Refusal` and
:class:`SafetyError`.

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

from relay_ros.pipeline.joint_limits import JointLimit

__all__ = [
    "LIMITS_MODES",
    "JointLimits",
    "LimitsMode",
    "Refusal",
    "SafetyError",
    "SafetyResult",
    "check_chunk",
    "check_first_step",
    "check_fresh",
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
