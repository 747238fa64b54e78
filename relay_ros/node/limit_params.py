"""policy_node's joint-limit and robot-description parameters, and the names they replaced.

The limits follow ros2_control's ``joint_limits`` convention, so a robot's
existing ``joint_limits.yaml`` (ros2_control, MoveIt) reads the same here::

    joint_limits.joint1.has_position_limits: true
    joint_limits.joint1.min_position: -2.9
    joint_limits.joint1.max_position: 2.9
    joint_limits.joint1.has_velocity_limits: true
    joint_limits.joint1.max_velocity: 2.0

Every ``joint_limits.<joint>.<field>`` is a leaf, never also a namespace, so
``ros2 param dump`` can nest them (a parameter ``joint_limits.joint1`` next to
``joint_limits.joint1.max_velocity`` would break it, as ``outputs`` next to
``outputs.arm.topic`` did). They are declared only when given: an unset one
means "the URDF's", and a declared parameter without a value would be dumped as
``null``, which a params file cannot load back. How the URDF's limits and these
combine: :mod:`relay_ros.pipeline.joint_limits`.

:func:`check_given_names` refuses the names of earlier releases (``outputs:
[...]``, ``joint_limits.<joint>: [lower, upper]``) with the lines to write instead,
and the ros2_control limits this node cannot honour.

Plain Python, no rclpy.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from relay_ros.node.param_spec import ParameterError, ParamSpec, is_list
from relay_ros.pipeline.joint_limits import (
    LIMIT_FIELDS,
    JointLimit,
    LimitParams,
    resolve_available_limits,
)
from relay_ros.pipeline.settings import LIVE_SETTINGS
from relay_ros.pipeline.urdf_limits import RobotDescription, UrdfError, load_urdf_file, parse_urdf

__all__ = [
    "LIMITS_PREFIX",
    "ROBOT_DESCRIPTION_PARAMETERS",
    "check_given_names",
    "limit_name",
    "limit_parameter_specs",
    "limit_params_from_values",
    "resolve_limits",
    "robot_description_from",
    "with_limit_change",
    "with_robot",
    "with_robot_text",
]

LIMITS_PREFIX = "joint_limits."

_FIELD_DESCRIPTIONS = {
    "has_position_limits": "true: min_position and max_position replace the URDF's position "
    "limits; false: no position limits (as a continuous joint). Unset: the URDF's.",
    "min_position": "Lowest position (rad or m); applies with has_position_limits: true.",
    "max_position": "Highest position (rad or m); applies with has_position_limits: true.",
    "has_velocity_limits": "true: max_velocity replaces the URDF's <limit velocity>. Unset: "
    "the URDF's. Every commanded joint needs a velocity limit from one or the other.",
    "max_velocity": "Largest speed (rad/s or m/s) anywhere on a published trajectory; "
    "applies with has_velocity_limits: true.",
    "has_acceleration_limits": "true: max_acceleration applies (a URDF has none). Unset or "
    "false: no acceleration limit.",
    "max_acceleration": "Largest acceleration (rad/s^2 or m/s^2) anywhere on a published "
    "trajectory; applies with has_acceleration_limits: true.",
}

#: ros2_control limit flags this node cannot honour: given true, they are refused.
_UNSUPPORTED_FLAGS = {
    "has_jerk_limits": "jerk",
    "has_deceleration_limits": "deceleration",
}

ROBOT_DESCRIPTION_PARAMETERS: tuple[ParamSpec, ...] = (
    ParamSpec(
        "robot_description",
        "string",
        "",
        "The robot's URDF as XML text (what robot_state_publisher takes); its joint limits "
        "bind the commanded joints, joint_limits.<joint>.* override them per joint. Empty: "
        "robot_description_file.",
    ),
    ParamSpec(
        "robot_description_file",
        "string",
        "",
        "Path of the robot's URDF file (expanded: 'xacro robot.urdf.xacro > robot.urdf'), "
        "used like robot_description. Empty: robot_description_topic.",
    ),
    ParamSpec(
        "robot_description_topic",
        "string",
        "robot_description",
        "std_msgs/String topic of the URDF, transient-local as robot_state_publisher "
        "publishes it (relative: follows the node's namespace); read when robot_description "
        "and robot_description_file are empty. Until it comes, joints whose limits only the "
        "URDF gives are not commanded. Empty: no topic; joint_limits.<joint>.* give every "
        "limit.",
        convert=lambda spec, value: value.strip(),
    ),
)


def limit_parameter_specs(joints: Sequence[str]) -> tuple[ParamSpec, ...]:
    """The live ``joint_limits.<joint>.<field>`` parameters of each joint, declared when given."""
    return tuple(
        ParamSpec(
            f"{LIMITS_PREFIX}{joint}.{field}",
            kind,
            None,
            _FIELD_DESCRIPTIONS[field],
            # Live when the core takes its joint limits live (pipeline.settings).
            live="joint_limits" in LIVE_SETTINGS,
            only_if_given=True,
        )
        for joint in joints
        for field, kind in LIMIT_FIELDS
    )


def limit_name(name: str) -> tuple[str, str] | None:
    """``(joint, field)`` of a ``joint_limits.<joint>.<field>`` name, else None."""
    if not name.startswith(LIMITS_PREFIX):
        return None
    joint, dot, field = name[len(LIMITS_PREFIX) :].rpartition(".")
    if not dot or not joint or field not in dict(LIMIT_FIELDS):
        return None
    return joint, field


def limit_params_from_values(
    values: Mapping[str, Any], joints: Sequence[str]
) -> dict[str, LimitParams]:
    """Each joint's :class:`LimitParams` from raw parameter values (unset = None).

    Raises:
        ParameterError: A value of the wrong type (names the parameter).
    """
    result = {}
    for joint in joints:
        given = {}
        for spec in limit_parameter_specs([joint]):
            value = values.get(spec.name)
            if value is not None:
                _, field = spec.name.rsplit(".", 1)
                given[field] = spec.check(value)
        result[joint] = LimitParams(**given)
    return result


def with_limit_change(params: LimitParams, field: str, value: Any) -> LimitParams:
    """``params`` with ``field`` set to ``value`` (a live ``ros2 param set``)."""
    return dataclasses.replace(params, **{field: value})


def robot_description_from(text: str, path: str) -> RobotDescription | None:
    """The URDF given by the ``robot_description`` text or ``robot_description_file``.

    Raises:
        ParameterError: Both are given, or the URDF cannot be read (names the file,
            the joint and the attribute).
    """
    if text and path:
        raise ParameterError(
            "parameters 'robot_description' and 'robot_description_file' are both set; "
            "give the URDF one way"
        )
    try:
        if text:
            return parse_urdf(text, "parameter 'robot_description'")
        if path:
            return load_urdf_file(path)
    except UrdfError as exc:
        raise ParameterError(str(exc)) from None
    return None


def resolve_limits(
    joints: Sequence[str],
    params: Mapping[str, LimitParams],
    robot: RobotDescription | None,
    *,
    waiting_on: str | None,
) -> tuple[dict[str, JointLimit], str | None]:
    """The limits of ``joints`` from ``robot`` and ``params``, and why some joint has
    none yet: ``(limits, limits_problem)``.

    ``waiting_on``: the topic a URDF may still come on (no URDF parameter or file was
    given); joints without limits are then not an error but wait for it (they are
    not commanded until then).

    Raises:
        ParameterError: Bad ``joint_limits.*`` values, a joint the URDF says cannot be
            commanded, or (``waiting_on`` None) a joint with no limit from any source.
    """
    resolved = resolve_available_limits(joints, params, robot)
    if resolved.errors is not None or (resolved.missing is not None and waiting_on is None):
        raise ParameterError(str(resolved.problem))
    if resolved.missing is None:
        return resolved.limits, None
    return resolved.limits, (
        f"{resolved.missing}; the URDF on topic '{waiting_on}' has not come (yet)"
    )


def with_robot(config: Any, robot: RobotDescription | None, problem: str | None = None) -> Any:
    """``config`` (a NodeConfig) with the URDF ``robot`` from the ``robot_description``
    topic: every commanded joint's limits resolved again over it (``joint_limits.*``
    still override per joint). Never raises: a joint the URDF leaves without limits, or
    that it says cannot be commanded, is named in ``limits_problem`` (not commanded);
    ``problem`` (a URDF that could not be read) is added to it."""
    joints = config.commanded_joints
    if robot is None:
        limits, reason = {}, problem
    else:
        resolved = resolve_available_limits(joints, config.limit_params, robot)
        limits, reason = resolved.limits, resolved.problem
    return dataclasses.replace(config, robot=robot, joint_limits=limits, limits_problem=reason)


def with_robot_text(config: Any, text: str, topic: str) -> tuple[Any, str]:
    """``config`` with the URDF ``text`` received on ``topic`` (:func:`with_robot`), and
    the sentence to log: which limits it gave, or why a joint is not commanded."""
    source = f"topic '{topic}'"
    try:
        robot = parse_urdf(text, source)
    except UrdfError as exc:
        changed = with_robot(config, None, f"the URDF on {source} cannot be read: {exc}")
        return changed, f"cannot command: {changed.limits_problem}"
    changed = with_robot(config, robot)
    if changed.limits_problem is not None:
        return changed, f"cannot command: {changed.limits_problem}"
    named = describe_limits(changed.joint_limits)
    return changed, f"joint limits with the URDF of robot '{robot.name}' on {source}: {named}"


def describe_limits(limits: Mapping[str, Any]) -> str:
    """``joint (min..max, vmax/s; source)`` for each joint: which limits are in force and
    where each came from (parameters override the URDF joint by joint)."""
    return ", ".join(
        f"{joint} ({limit.min_position:g}..{limit.max_position:g}, {limit.max_velocity:g}/s; "
        f"{limit.source})"
        for joint, limit in limits.items()
    )


def _format(value: Any) -> str:
    return repr(float(value)) if isinstance(value, (int, float)) else repr(value)


def check_given_names(given: Mapping[str, Any]) -> None:
    """Refuse the parameter names of earlier releases and limits this node cannot honour.

    ``given`` is what the params file and overrides set (name -> value).

    Raises:
        ParameterError: ``outputs: [...]`` (now ``output_names``), old-style
            ``joint_limits.<joint>: [lower, upper]``, or ``has_jerk_limits`` /
            ``has_deceleration_limits`` set true; the message says what to write.
    """
    problems = []
    if "outputs" in given:
        names = given["outputs"]
        listed = list(names) if is_list(names) else names
        problems.append(
            f"parameter 'outputs' is now 'output_names' (a list named like the outputs.<name>.* "
            f"namespace breaks 'ros2 param dump'): write output_names: {listed!r}"
        )
    old = []
    for name, value in given.items():
        if not name.startswith(LIMITS_PREFIX):
            continue
        rest = name[len(LIMITS_PREFIX) :]
        field = rest.rpartition(".")[2]
        if field in _UNSUPPORTED_FLAGS and value is True:
            problems.append(
                f"parameter '{name}' is true, but policy_node checks no "
                f"{_UNSUPPORTED_FLAGS[field]} limits (only position, velocity and "
                "acceleration); set it false or remove it, and bound the motion with "
                "has_acceleration_limits/max_acceleration"
            )
        elif is_list(value) and limit_name(name) is None:
            old.append((rest, value))
    for joint, value in old:
        prefix = f"{LIMITS_PREFIX}{joint}."
        if len(value) == 2:
            lines = (
                f"{prefix}has_position_limits: true, {prefix}min_position: {_format(value[0])}, "
                f"{prefix}max_position: {_format(value[1])}"
            )
        else:
            lines = f"{prefix}has_position_limits: true with min_position and max_position"
        problems.append(
            f"parameter '{LIMITS_PREFIX}{joint}' = {list(value)!r} is the old [lower, upper] "
            f"form; write {lines} (ros2_control's names; the velocity limit comes from the "
            f"URDF or {prefix}has_velocity_limits: true with {prefix}max_velocity)"
        )
    if problems:
        raise ParameterError("; ".join(problems) + "; see docs/node.md")
