"""The joints of a URDF (``robot_description``) and their limits, read with the standard library.

A ROS robot carries its joint limits in its URDF: robot_state_publisher
publishes it on ``robot_description`` and ros2_control, MoveIt and the
trajectory controllers read their limits from it. :func:`parse_urdf` reads what
the policy node needs from each ``<joint>`` of the ``<robot>``, as ros2_control's
``joint_limits_urdf.hpp`` reads it:

- ``type``: ``revolute`` and ``prismatic`` joints have position limits
  (``<limit lower upper>``, 0 when absent, as the URDF specification says);
  ``continuous`` joints have none; ``fixed``, ``floating`` and ``planar`` joints
  cannot be commanded as one position;
- ``<limit velocity>``: the largest speed (rad/s or m/s);
- ``<safety_controller soft_lower_limit soft_upper_limit>``: when present, the
  position range is narrowed to the soft limits (MoveIt does the same), so the
  node never commands past where the robot's own safety controller pushes back;
- ``<mimic joint multiplier offset>``: the joint follows another one
  (``q = multiplier * q_leader + offset``) and is never commanded itself.

Why not a URDF library: the maintained Python ones (yourdfpy, urchin) load
meshes and bring trimesh, lxml and more, which a ROS install would have to get
through pip; ``urdf_parser_py`` (rosdep key ``urdfdom_py``) exists on PyPI only
as a 2021 release and prints its warnings to stderr. The limits are a small,
stable part of the format, and the standard library's parser gives errors that
name the file, the joint and the attribute. The text is bounded
(:data:`MAX_URDF_BYTES`) before it is parsed, and expat (Python >= 3.7.1) refuses
entity-expansion bombs.

Plain Python, no rclpy.
"""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "COMMANDABLE_TYPES",
    "JOINT_TYPES",
    "MAX_URDF_BYTES",
    "Mimic",
    "RobotDescription",
    "UrdfError",
    "UrdfJoint",
    "load_urdf_file",
    "parse_urdf",
]

#: Largest robot description read (bytes). Real ones are 10 KB to 2 MB; meshes are
#: referenced, not included.
MAX_URDF_BYTES = 16 * 1024 * 1024

#: Joint types of the URDF specification.
JOINT_TYPES = ("revolute", "continuous", "prismatic", "fixed", "floating", "planar")
#: Joint types with one position a trajectory controller can command.
COMMANDABLE_TYPES = ("revolute", "continuous", "prismatic")

_XACRO_NS = "{http://www.ros.org/wiki/xacro}"


class UrdfError(ValueError):
    """The robot description is not a URDF the node can read (the message says where)."""


@dataclass(frozen=True)
class Mimic:
    """``<mimic>``: the joint's position is ``multiplier * q(joint) + offset``."""

    joint: str
    multiplier: float = 1.0
    offset: float = 0.0


@dataclass(frozen=True)
class UrdfJoint:
    """One ``<joint>`` of the URDF, as far as limits go.

    Attributes:
        name: The joint's name.
        type: One of :data:`JOINT_TYPES`.
        lower: Lowest position (rad or m) of a revolute or prismatic joint, the soft
            limit when a ``<safety_controller>`` gives a higher one; None otherwise.
        upper: Highest position, likewise.
        velocity: ``<limit velocity>`` (rad/s or m/s), None without a ``<limit>``
            or without that attribute.
        mimic: The joint it follows, or None.
        soft_limited: The position range was narrowed by ``<safety_controller>``.
    """

    name: str
    type: str
    lower: float | None
    upper: float | None
    velocity: float | None
    mimic: Mimic | None = None
    soft_limited: bool = False


@dataclass(frozen=True)
class RobotDescription:
    """The joints of one URDF.

    Attributes:
        name: The ``<robot name>``.
        source: Where it came from, for messages (e.g. ``"URDF file 'ur5e.urdf'"``).
        joints: Every joint by name, in document order.
    """

    name: str
    source: str
    joints: Mapping[str, UrdfJoint]

    def followers(self, leader: str) -> list[tuple[UrdfJoint, float, float]]:
        """Every joint that moves with ``leader`` through ``<mimic>`` (directly or
        through other mimic joints), with its total ``(multiplier, offset)``:
        ``q = multiplier * q_leader + offset``."""
        result = []
        for joint in self.joints.values():
            if joint.mimic is None:
                continue
            multiplier, offset, root = self._chain(joint)
            if root == leader:
                result.append((joint, multiplier, offset))
        return result

    def leader_of(self, name: str) -> str | None:
        """The joint that ``name`` follows at the end of its mimic chain, or None."""
        joint = self.joints.get(name)
        if joint is None or joint.mimic is None:
            return None
        return self._chain(joint)[2]

    def _chain(self, joint: UrdfJoint) -> tuple[float, float, str]:
        multiplier, offset = 1.0, 0.0
        current = joint
        while current.mimic is not None:  # parse_urdf refused cycles and unknown joints
            mimic = current.mimic
            multiplier, offset = multiplier * mimic.multiplier, offset + multiplier * mimic.offset
            current = self.joints[mimic.joint]
        return multiplier, offset, current.name


def _number(element: ET.Element, attribute: str, where: str, default: float | None) -> float | None:
    text = element.get(attribute)
    if text is None:
        return default
    try:
        value = float(text)
    except ValueError:
        raise UrdfError(f"{where}: <{element.tag} {attribute}={text!r}> is not a number") from None
    if not math.isfinite(value):
        raise UrdfError(f"{where}: <{element.tag} {attribute}={text!r}> is not a finite number")
    return value


def _joint(element: ET.Element, source: str) -> UrdfJoint:
    name = element.get("name")
    if not name:
        raise UrdfError(f"{source}: a <joint> has no name attribute")
    where = f"{source}, joint '{name}'"
    kind = element.get("type")
    if kind not in JOINT_TYPES:
        raise UrdfError(f"{where}: type {kind!r} is not one of {list(JOINT_TYPES)}")
    limit = element.find("limit")
    lower = upper = velocity = None
    if limit is not None:
        velocity = _number(limit, "velocity", where, None)
    if kind in ("revolute", "prismatic"):
        if limit is None:
            raise UrdfError(
                f"{where}: a {kind} joint needs a <limit lower=... upper=... velocity=...> element"
            )
        lower = _number(limit, "lower", where, 0.0)
        upper = _number(limit, "upper", where, 0.0)
        assert lower is not None and upper is not None
        if lower > upper:
            raise UrdfError(f"{where}: <limit lower={lower!r}> is above upper={upper!r}")
    soft = False
    safety = element.find("safety_controller")
    if safety is not None and lower is not None and upper is not None:
        soft_lower = _number(safety, "soft_lower_limit", where, None)
        soft_upper = _number(safety, "soft_upper_limit", where, None)
        if soft_lower is not None and soft_lower > lower:
            lower, soft = soft_lower, True
        if soft_upper is not None and soft_upper < upper:
            upper, soft = soft_upper, True
        if lower > upper:
            raise UrdfError(
                f"{where}: the <safety_controller> soft limits leave no range "
                f"({lower!r} > {upper!r})"
            )
    mimic = None
    mimic_element = element.find("mimic")
    if mimic_element is not None:
        leader = mimic_element.get("joint")
        if not leader:
            raise UrdfError(f"{where}: <mimic> has no joint attribute")
        multiplier = _number(mimic_element, "multiplier", where, 1.0)
        offset = _number(mimic_element, "offset", where, 0.0)
        assert multiplier is not None and offset is not None
        mimic = Mimic(leader, multiplier, offset)
    return UrdfJoint(name, kind, lower, upper, velocity, mimic, soft)


def parse_urdf(text: str | bytes, source: str = "robot_description") -> RobotDescription:
    """The joints of the URDF ``text``; ``source`` names it in error messages.

    Only the ``<joint>`` elements directly under ``<robot>`` count (a
    ``<ros2_control>`` block has ``<joint>`` elements of its own).

    Raises:
        UrdfError: Too large, not XML, not a ``<robot>``, still xacro, or a joint
            with a missing name, an unknown type, a number that is not one, a
            ``<mimic>`` of a joint that does not exist or a mimic cycle; the
            message names the source, the joint and the attribute.
    """
    size = len(text.encode("utf-8")) if isinstance(text, str) else len(text)
    if size > MAX_URDF_BYTES:
        raise UrdfError(
            f"{source} is {size} bytes, more than the {MAX_URDF_BYTES} bytes a robot "
            "description may have"
        )
    if not (text.strip() if isinstance(text, str) else text.strip()):
        raise UrdfError(f"{source} is empty; expected a URDF <robot> document")
    try:
        root = ET.fromstring(text)
    except ET.ParseError as exc:
        raise UrdfError(f"{source} is not valid XML: {exc}") from None
    if root.tag != "robot":
        raise UrdfError(f"{source}: the document element is <{root.tag}>, expected <robot>")
    if any(element.tag.startswith(_XACRO_NS) for element in root.iter()):
        raise UrdfError(
            f"{source} is a xacro file, not a URDF; expand it first, e.g. "
            "'xacro robot.urdf.xacro > robot.urdf'"
        )
    joints: dict[str, UrdfJoint] = {}
    for element in root.findall("joint"):
        joint = _joint(element, source)
        if joint.name in joints:
            raise UrdfError(f"{source}: joint '{joint.name}' is defined twice")
        joints[joint.name] = joint
    for joint in joints.values():
        seen = [joint.name]
        current = joint
        while current.mimic is not None:
            leader = current.mimic.joint
            if leader not in joints:
                raise UrdfError(
                    f"{source}, joint '{current.name}': <mimic joint='{leader}'> names no "
                    "joint of this robot"
                )
            if leader in seen:
                raise UrdfError(f"{source}: mimic joints form a cycle: {' -> '.join(seen)}")
            seen.append(leader)
            current = joints[leader]
    return RobotDescription(root.get("name") or "", source, joints)


def load_urdf_file(path: str | Path) -> RobotDescription:
    """:func:`parse_urdf` of a file (UTF-8 or declared in its XML header).

    Raises:
        UrdfError: The file cannot be read, or what :func:`parse_urdf` raises.
    """
    file = Path(path).expanduser()
    label = f"URDF file '{file}'"
    if file.name.endswith(".xacro"):
        raise UrdfError(
            f"{label} is a xacro file, not a URDF; expand it first, e.g. "
            f"'xacro {file.name} > {file.name[: -len('.xacro')] or 'robot'}'"
            + ("" if file.name.endswith(".urdf.xacro") else ".urdf")
        )
    try:
        size = file.stat().st_size
        if size > MAX_URDF_BYTES:
            raise UrdfError(
                f"{label} is {size} bytes, more than the {MAX_URDF_BYTES} bytes a robot "
                "description may have"
            )
        data = file.read_bytes()
    except OSError as exc:
        raise UrdfError(f"{label} cannot be read: {exc.strerror or exc}") from None
    return parse_urdf(data, label)
