"""The limits each commanded joint runs under: the URDF's, overridden per joint by parameters.

Sources, as ROS users expect them (ros2_control's ``joint_limits`` package and
MoveIt's ``joint_limits.yaml`` work the same way):

1. the robot's URDF (:mod:`relay_ros.pipeline.urdf_limits`): position limits of
   revolute and prismatic joints, none for continuous joints, and every joint's
   velocity limit;
2. the parameters ``joint_limits.<joint>.*`` (:class:`LimitParams`, ros2_control's
   names): ``has_position_limits`` with ``min_position``/``max_position``,
   ``has_velocity_limits`` with ``max_velocity``, ``has_acceleration_limits`` with
   ``max_acceleration``. A ``has_*`` flag that is given decides: ``true`` with its
   values replaces the URDF's, ``false`` removes that kind of limit. A value given
   without its ``has_*: true`` is refused: ros2_control would ignore it without a
   word, and a limit that silently does not apply is worse than none.

:func:`resolve_joint_limits` combines them into one :class:`JointLimit` per
commanded joint and refuses (:class:`JointLimitsError`, one sentence per joint)
a joint that has no velocity limit from either source, no position limits unless
it is continuous (or the parameters say ``has_position_limits: false``), a joint
that mimics another one (it follows its leader and is never commanded itself),
and a joint the URDF says is fixed, floating or planar. A leader's limits are
narrowed so that each joint that mimics it stays inside its own URDF limits too.

Plain Python, no rclpy.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from relay_ros.pipeline.urdf_limits import COMMANDABLE_TYPES, RobotDescription

__all__ = [
    "LIMIT_FIELDS",
    "JointLimit",
    "JointLimitsError",
    "LimitParams",
    "ResolvedLimits",
    "resolve_available_limits",
    "resolve_joint_limits",
]

#: ``joint_limits.<joint>.<field>`` names and their ROS types, ros2_control's convention.
LIMIT_FIELDS: tuple[tuple[str, str], ...] = (
    ("has_position_limits", "bool"),
    ("min_position", "double"),
    ("max_position", "double"),
    ("has_velocity_limits", "bool"),
    ("max_velocity", "double"),
    ("has_acceleration_limits", "bool"),
    ("max_acceleration", "double"),
)


class JointLimitsError(ValueError):
    """Some commanded joint has no usable limits; the message names each one and why."""


@dataclass(frozen=True)
class LimitParams:
    """The ``joint_limits.<joint>.*`` parameters given for one joint (None: not given)."""

    has_position_limits: bool | None = None
    min_position: float | None = None
    max_position: float | None = None
    has_velocity_limits: bool | None = None
    max_velocity: float | None = None
    has_acceleration_limits: bool | None = None
    max_acceleration: float | None = None

    def given(self) -> dict[str, object]:
        """The fields that were given, by name."""
        return {
            name: getattr(self, name) for name, _ in LIMIT_FIELDS if getattr(self, name) is not None
        }


@dataclass(frozen=True)
class JointLimit:
    """The limits one commanded joint runs under.

    Attributes:
        min_position: Lowest position (rad or m); ``-inf`` without position limits.
        max_position: Highest position; ``inf`` without position limits.
        max_velocity: Largest speed (rad/s or m/s), finite and > 0.
        max_acceleration: Largest acceleration (rad/s² or m/s²); ``inf`` when none is set.
        source: Where each limit came from, for messages, e.g. ``"position and
            velocity from URDF file 'ur5e.urdf'"``.
    """

    min_position: float
    max_position: float
    max_velocity: float
    max_acceleration: float = math.inf
    source: str = field(default="parameters", compare=False)

    def __post_init__(self) -> None:
        if math.isnan(self.min_position) or math.isnan(self.max_position):
            raise JointLimitsError(
                f"position limits ({self.min_position}, {self.max_position}) contain NaN"
            )
        if not self.min_position < self.max_position:
            raise JointLimitsError(
                f"position limits need min < max, got ({self.min_position}, {self.max_position})"
            )
        if not (math.isfinite(self.max_velocity) and self.max_velocity > 0):
            raise JointLimitsError(
                f"max_velocity {self.max_velocity!r} must be a finite number > 0"
            )
        if not self.max_acceleration > 0:
            raise JointLimitsError(f"max_acceleration {self.max_acceleration!r} must be > 0")

    @property
    def has_position_limits(self) -> bool:
        """False for a continuous joint (or ``has_position_limits: false``)."""
        return math.isfinite(self.min_position) or math.isfinite(self.max_position)

    @property
    def has_acceleration_limits(self) -> bool:
        return math.isfinite(self.max_acceleration)


def _given_without_flag(joint: str, params: LimitParams) -> list[str]:
    """Sentences for values given without their ``has_*: true`` flag."""
    problems = []
    for flag, values in (
        ("has_position_limits", ("min_position", "max_position")),
        ("has_velocity_limits", ("max_velocity",)),
        ("has_acceleration_limits", ("max_acceleration",)),
    ):
        given = [name for name in values if getattr(params, name) is not None]
        if given and getattr(params, flag) is not True:
            state = "false" if getattr(params, flag) is False else "not set"
            listed = " and ".join(f"joint_limits.{joint}.{name}" for name in given)
            problems.append(
                f"{listed} {'is' if len(given) == 1 else 'are'} given but "
                f"joint_limits.{joint}.{flag} is {state}; set {flag}: true to apply "
                f"{'it' if len(given) == 1 else 'them'} (ros2_control's convention) or "
                "remove the value"
            )
    return problems


def _position(
    joint: str, params: LimitParams, robot: RobotDescription | None
) -> tuple[float, float, str]:
    if params.has_position_limits is True:
        lo, hi = params.min_position, params.max_position
        missing = [n for n, v in (("min_position", lo), ("max_position", hi)) if v is None]
        if missing:
            raise JointLimitsError(
                f"joint_limits.{joint}.has_position_limits is true but "
                f"{' and '.join(f'joint_limits.{joint}.{n}' for n in missing)} "
                f"{'is' if len(missing) == 1 else 'are'} not given"
            )
        assert lo is not None and hi is not None
        if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
            raise JointLimitsError(
                f"joint_limits.{joint}.min_position {lo!r} and max_position {hi!r} must be "
                "finite with min_position < max_position"
            )
        return lo, hi, "parameters"
    if params.has_position_limits is False:
        return -math.inf, math.inf, f"joint_limits.{joint}.has_position_limits: false"
    urdf = robot.joints.get(joint) if robot is not None else None
    if urdf is None:
        raise _no_limit(joint, "position", robot)
    if urdf.type == "continuous":
        return -math.inf, math.inf, f"a continuous joint in {robot.source}"  # type: ignore[union-attr]
    assert urdf.lower is not None and urdf.upper is not None
    if not urdf.lower < urdf.upper:
        raise JointLimitsError(
            f"joint '{joint}' has no range of motion in {robot.source}: lower = upper = "  # type: ignore[union-attr]
            f"{urdf.lower!r}; set joint_limits.{joint}.has_position_limits: true with "
            "min_position and max_position"
        )
    return urdf.lower, urdf.upper, robot.source  # type: ignore[union-attr]


def _flagged_value(joint: str, flag: str, field: str, value: float | None) -> float:
    """The value of ``field`` given with ``flag: true``: present, finite and > 0."""
    if value is None:
        raise JointLimitsError(
            f"joint_limits.{joint}.{flag} is true but joint_limits.{joint}.{field} is not given"
        )
    if not (math.isfinite(value) and value > 0):
        raise JointLimitsError(
            f"joint_limits.{joint}.{field} is {value!r}; expected a finite number > 0"
        )
    return value


def _velocity(joint: str, params: LimitParams, robot: RobotDescription | None) -> tuple[float, str]:
    if params.has_velocity_limits is True:
        value = _flagged_value(joint, "has_velocity_limits", "max_velocity", params.max_velocity)
        return value, "parameters"
    if params.has_velocity_limits is False:
        raise JointLimitsError(
            f"joint '{joint}' has no velocity limit: joint_limits.{joint}.has_velocity_limits "
            "is false; policy_node commands a joint only within a velocity limit (set "
            f"has_velocity_limits: true and max_velocity)"
        )
    urdf = robot.joints.get(joint) if robot is not None else None
    if urdf is None or urdf.velocity is None:
        raise _no_limit(joint, "velocity", robot)
    if not urdf.velocity > 0:
        raise JointLimitsError(
            f"joint '{joint}' has <limit velocity=\"{urdf.velocity!r}\"> in {robot.source}; "  # type: ignore[union-attr]
            f"a commanded joint needs a velocity limit > 0 (set "
            f"joint_limits.{joint}.has_velocity_limits: true and max_velocity)"
        )
    return urdf.velocity, robot.source  # type: ignore[union-attr]


def _acceleration(joint: str, params: LimitParams) -> float:
    if params.has_acceleration_limits is not True:
        return math.inf
    return _flagged_value(
        joint, "has_acceleration_limits", "max_acceleration", params.max_acceleration
    )


class _NoLimit(JointLimitsError):
    """One joint has no limit of one kind from any source (grouped with others alike)."""

    def __init__(self, joint: str, kind: str, where: str) -> None:
        self.joint, self.kind, self.where = joint, kind, where
        super().__init__(_no_limit_sentence([joint], kind, where))


class _Missing(JointLimitsError):
    """The limits one joint is missing (one :class:`_NoLimit` per kind)."""

    def __init__(self, items: list[_NoLimit]) -> None:
        self.items = items
        super().__init__("; ".join(str(item) for item in items))


def _no_limit(joint: str, kind: str, robot: RobotDescription | None) -> _NoLimit:
    if robot is None:
        where = "no robot description was given"
    elif joint not in robot.joints:
        where = f"{robot.source} has no such joint"
    else:
        where = f"{robot.source} gives no <limit velocity>"
    return _NoLimit(joint, kind, where)


def _no_limit_sentence(joints: Sequence[str], kind: str, where: str) -> str:
    if len(joints) == 1:
        prefix = f"joint_limits.{joints[0]}."
        who = f"joint '{joints[0]}' has"
    else:
        prefix = "joint_limits.<joint>."
        who = f"joints {list(joints)} have"
    fields = (
        f"{prefix}has_position_limits: true with {prefix}min_position and {prefix}max_position"
        if kind == "position"
        else f"{prefix}has_velocity_limits: true with {prefix}max_velocity"
    )
    each = "" if len(joints) == 1 else " for each"
    return f"{who} no {kind} limit: {where} and no parameter sets one; give {fields}{each}"


def _with_followers(
    joint: str, limit: tuple[float, float, float], robot: RobotDescription | None
) -> tuple[tuple[float, float, float], list[str]]:
    """``(lo, hi, vmax)`` of ``joint`` narrowed so every joint that mimics it stays
    inside its own URDF limits; and the names of the followers that narrowed it."""
    lo, hi, vmax = limit
    narrowed: list[str] = []
    if robot is None:
        return limit, narrowed
    for follower, multiplier, offset in robot.followers(joint):
        if multiplier == 0.0:
            continue
        changed = False
        if follower.lower is not None and follower.upper is not None:
            a = (follower.lower - offset) / multiplier
            b = (follower.upper - offset) / multiplier
            f_lo, f_hi = min(a, b), max(a, b)
            if f_lo > lo:
                lo, changed = f_lo, True
            if f_hi < hi:
                hi, changed = f_hi, True
        if follower.velocity is not None and follower.velocity > 0:
            f_v = follower.velocity / abs(multiplier)
            if f_v < vmax:
                vmax, changed = f_v, True
        if changed:
            narrowed.append(follower.name)
    if not lo < hi:
        raise JointLimitsError(
            f"joint '{joint}' has no range of motion left once the joints that mimic it "
            f"({', '.join(narrowed)}) stay inside their limits in {robot.source}"
        )
    return (lo, hi, vmax), narrowed


def _resolve_one(joint: str, params: LimitParams, robot: RobotDescription | None) -> JointLimit:
    problems = _given_without_flag(joint, params)
    if problems:
        raise JointLimitsError("; ".join(problems))
    urdf = robot.joints.get(joint) if robot is not None else None
    if urdf is not None and robot is not None:
        if urdf.mimic is not None:
            leader = robot.leader_of(joint)
            raise JointLimitsError(
                f"joint '{joint}' mimics '{urdf.mimic.joint}' in {robot.source} (multiplier "
                f"{urdf.mimic.multiplier:g}, offset {urdf.mimic.offset:g}): it follows "
                f"'{leader}' and is never commanded itself; command '{leader}' and remove "
                f"'{joint}' from the outputs' joints"
            )
        if urdf.type not in COMMANDABLE_TYPES:
            raise JointLimitsError(
                f"joint '{joint}' is a {urdf.type} joint in {robot.source}; only "
                f"{', '.join(COMMANDABLE_TYPES)} joints can be commanded"
            )
    missing: list[_NoLimit] = []
    try:
        lo, hi, position_source = _position(joint, params, robot)
    except _NoLimit as exc:
        missing.append(exc)
    try:
        vmax, velocity_source = _velocity(joint, params, robot)
    except _NoLimit as exc:
        missing.append(exc)
    if missing:
        raise _Missing(missing)
    amax = _acceleration(joint, params)
    (lo, hi, vmax), narrowed = _with_followers(joint, (lo, hi, vmax), robot)
    if not math.isfinite(lo):
        source = f"no position limits ({position_source}), velocity from {velocity_source}"
    elif position_source == velocity_source:
        source = f"position and velocity from {position_source}"
    else:
        source = f"position from {position_source}, velocity from {velocity_source}"
    if math.isfinite(amax):
        source += ", acceleration from parameters"
    if narrowed:
        source += f", narrowed to keep mimic joints {narrowed} inside their limits"
    return JointLimit(lo, hi, vmax, amax, source)


@dataclass(frozen=True)
class ResolvedLimits:
    """The limits found for some joints, and why the others have none.

    Attributes:
        limits: Joint -> its limits, for every joint that has them.
        missing: One sentence naming the joints with no position or velocity limit
            from any source (and what to set), or None.
        errors: The other problems in one sentence (bad parameters, a mimic, fixed
            or floating joint), or None.
    """

    limits: dict[str, JointLimit]
    missing: str | None = None
    errors: str | None = None

    @property
    def problem(self) -> str | None:
        """Why some joint cannot be commanded, in one sentence, or None."""
        parts = [part for part in (self.errors, self.missing) if part]
        return "; ".join(parts) if parts else None


def resolve_available_limits(
    joints: Sequence[str],
    params: Mapping[str, LimitParams],
    robot: RobotDescription | None,
) -> ResolvedLimits:
    """The limits of each joint in ``joints`` that has them, from ``robot`` (or None)
    and ``params``, and the sentences for the others (never raises for a joint)."""
    result: dict[str, JointLimit] = {}
    errors: list[str] = []
    missing: dict[tuple[str, str], list[str]] = {}
    for joint in joints:
        try:
            result[joint] = _resolve_one(joint, params.get(joint, LimitParams()), robot)
        except _Missing as exc:
            for item in exc.items:
                missing.setdefault((item.kind, item.where), []).append(item.joint)
        except JointLimitsError as exc:
            errors.append(str(exc))
    missing_text = "; ".join(_no_limit_sentence(names, *key) for key, names in missing.items())
    return ResolvedLimits(result, missing_text or None, "; ".join(errors) or None)


def resolve_joint_limits(
    joints: Sequence[str],
    params: Mapping[str, LimitParams],
    robot: RobotDescription | None,
) -> dict[str, JointLimit]:
    """The limits of each joint in ``joints`` from ``robot`` (or None) and ``params``.

    Raises:
        JointLimitsError: One sentence per joint without usable limits, joined by
            newlines-free ``"; "`` so the whole list fits one log line.
    """
    resolved = resolve_available_limits(joints, params, robot)
    if resolved.problem is not None:
        raise JointLimitsError(resolved.problem)
    return resolved.limits
