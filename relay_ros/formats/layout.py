"""Observation layouts as data: an openpi environment's keys, shapes and actions in YAML.

A stock openpi server (``serve_policy`` around a checkpoint) expects the
observation of its environment: DROID's ``observation/exterior_image_1_left``, ALOHA's
``images.cam_high`` channel-first, and so on (openpi's
``src/openpi/policies/*_policy.py``). A :class:`Layout` says all of it:

- ``cameras``: camera name (the camera map's key) -> observation key, and whether
  the server needs it;
- ``image``: ``layout`` (``HWC`` or ``CHW``), ``size`` [height, width], ``dtype``
  (``uint8``, or ``float32`` in [0, 1]) and whether ``jpeg`` bytes are allowed;
- ``state``: the parts, in order, each an observation key, a ``width`` (how many of
  the node's ``state_joints`` it takes, in order; optionally their names in
  ``joints``), a ``dtype`` and a ``space`` (``joint_position`` unless said);
- ``actions``: ``horizon``, ``control_hz`` and the parts of the reply's columns,
  each with its action space and, for joint velocities, ``step_scale`` and ``clip``
  (:mod:`relay_ros.formats.action_space`).

An observation key is a string (one key, which may contain ``/`` as openpi's
``observation/joint_position`` does) or a list of strings (a path through nested
maps: ``[images, cam_high]`` is ``obs["images"]["cam_high"]``).

The shipped layouts are ``config/layouts/<name>.yaml``; :func:`load_layout` takes such
a name or the path of a user's own file.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from relay_ros.formats.action_space import ActionPart
from relay_ros.formats.base import FormatError
from relay_ros.paths import config_dir
from relay_ros.yaml_files import YamlFileError, load_yaml_file

__all__ = [
    "IMAGE_DTYPES",
    "IMAGE_LAYOUTS",
    "STATE_DTYPES",
    "CameraSlot",
    "KeyPath",
    "Layout",
    "LayoutError",
    "StatePart",
    "layout_names",
    "load_layout",
]

#: A key of the observation map: one key, or a path through nested maps.
KeyPath = tuple[str, ...]

IMAGE_LAYOUTS: tuple[str, ...] = ("HWC", "CHW")
IMAGE_DTYPES: tuple[str, ...] = ("uint8", "float32")
STATE_DTYPES: tuple[str, ...] = ("float32", "float64")
_LAYOUTS_DIR = "layouts"


class LayoutError(FormatError):
    """A layout file that cannot be read or does not say what is needed."""


@dataclass(frozen=True)
class CameraSlot:
    """One camera of a layout: its name (the camera map's key), where it goes, and
    whether the server needs it."""

    name: str
    key: KeyPath
    required: bool = True


@dataclass(frozen=True)
class StatePart:
    """One state entry: ``width`` of the node's state joints under ``key``."""

    key: KeyPath
    width: int
    dtype: str = "float32"
    joints: tuple[str, ...] | None = None
    space: str = "joint_position"


@dataclass(frozen=True)
class Layout:
    """An observation layout (see the module docstring)."""

    name: str
    cameras: tuple[CameraSlot, ...]
    image_layout: str
    image_size: tuple[int, int]
    image_dtype: str
    jpeg: bool
    state: tuple[StatePart, ...]
    action_horizon: int
    control_hz: float
    actions: tuple[ActionPart, ...]
    description: str = ""
    source: str = ""

    @property
    def state_width(self) -> int:
        """Number of state values (the node's ``state_joints``)."""
        return sum(part.width for part in self.state)

    @property
    def action_width(self) -> int:
        """Width of the reply's actions."""
        return sum(part.width for part in self.actions)

    @property
    def camera_names(self) -> tuple[str, ...]:
        """The camera map's keys."""
        return tuple(camera.name for camera in self.cameras)


def layout_names() -> tuple[str, ...]:
    """The shipped layouts (``config/layouts/*.yaml``), sorted."""
    folder = config_dir() / _LAYOUTS_DIR
    return tuple(sorted(p.stem for p in folder.glob("*.yaml")))


def _is_path(spec: str) -> bool:
    return spec.endswith((".yaml", ".yml")) or os.sep in spec or "/" in spec


def load_layout(spec: str | os.PathLike[str]) -> Layout:
    """The layout named ``spec`` (a shipped one) or in the YAML file ``spec``.

    Raises:
        LayoutError: an unknown name, an unreadable file, or a field that is missing
            or malformed (the message names the file and the field).
    """
    text = os.fspath(spec)
    if _is_path(text):
        path = Path(text).expanduser()
    else:
        names = layout_names()
        if text not in names:
            raise LayoutError(
                f"layout {text!r} is not one of the shipped layouts {list(names)}; "
                "give a layout YAML file's path for your own"
            )
        path = config_dir() / _LAYOUTS_DIR / f"{text}.yaml"
    try:
        data = load_yaml_file(path, what="layout")
    except YamlFileError as exc:
        raise LayoutError(str(exc)) from None
    return parse_layout(data, source=f"layout {str(path)!r}", default_name=path.stem)


class _Fields:
    """Reads the fields of one YAML map, each error naming the file and the field."""

    def __init__(self, data: Any, where: str) -> None:
        if not isinstance(data, Mapping):
            raise LayoutError(f"{where} is {type(data).__name__}; expected a map")
        self.data, self.where = data, where

    def error(self, field: str, problem: str) -> LayoutError:
        return LayoutError(f"{self.where}: {field} {problem}")

    def get(self, field: str, default: Any = None, *, required: bool = False) -> Any:
        if field not in self.data or self.data[field] is None:
            if required:
                raise self.error(field, "is missing")
            return default
        return self.data[field]

    def positive_int(self, field: str, default: int | None = None) -> int:
        value = self.get(field, default, required=default is None)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise self.error(field, f"is {value!r}; expected an integer >= 1")
        return value

    def choice(self, field: str, choices: Sequence[str], default: str) -> str:
        value = self.get(field, default)
        if value not in choices:
            raise self.error(field, f"is {value!r}; expected one of {list(choices)}")
        return str(value)

    def key(self, field: str = "key") -> KeyPath:
        value = self.get(field, required=True)
        parts = (value,) if isinstance(value, str) else value
        if (
            isinstance(parts, (str, bytes))
            or not isinstance(parts, Sequence)
            or not parts
            or not all(isinstance(p, str) and p for p in parts)
        ):
            raise self.error(
                field, f"is {value!r}; expected a key string or a list of keys (a nested path)"
            )
        return tuple(parts)

    def unknown(self, allowed: Sequence[str]) -> None:
        extra = [k for k in self.data if k not in allowed]
        if extra:
            raise self.error(repr(extra[0]), f"is not a field; expected fields {list(allowed)}")


def parse_layout(data: Any, *, source: str, default_name: str) -> Layout:
    """A :class:`Layout` from parsed YAML (``source`` names it in errors)."""
    top = _Fields(data, source)
    top.unknown(("layout", "description", "source", "cameras", "image", "state", "actions"))
    name = str(top.get("layout", default_name))
    cameras_data = top.get("cameras", required=True)
    if not isinstance(cameras_data, Mapping) or not cameras_data:
        raise top.error("cameras", "must be a non-empty map of camera name -> {key: ...}")
    cameras = []
    for camera, entry in cameras_data.items():
        fields = _Fields(
            {"key": entry} if isinstance(entry, (str, list)) else entry,
            f"{source}: camera {camera!r}",
        )
        fields.unknown(("key", "required"))
        required = fields.get("required", True)
        if not isinstance(required, bool):
            raise fields.error("required", f"is {required!r}; expected true or false")
        cameras.append(CameraSlot(str(camera), fields.key(), required))
    image = _Fields(top.get("image", required=True), f"{source}: image")
    image.unknown(("layout", "size", "dtype", "jpeg"))
    size = image.get("size", required=True)
    if (
        not isinstance(size, list)
        or len(size) != 2
        or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in size)
    ):
        raise image.error("size", f"is {size!r}; expected [height, width]")
    jpeg = image.get("jpeg", False)
    if not isinstance(jpeg, bool):
        raise image.error("jpeg", f"is {jpeg!r}; expected true or false")
    image_layout = image.choice("layout", IMAGE_LAYOUTS, "HWC")
    image_dtype = image.choice("dtype", IMAGE_DTYPES, "uint8")
    state_data = top.get("state", required=True)
    if not isinstance(state_data, list) or not state_data:
        raise top.error("state", "must be a non-empty list of {key, width}")
    state = []
    for i, entry in enumerate(state_data):
        part = _Fields(entry, f"{source}: state[{i}]")
        part.unknown(("key", "width", "dtype", "joints", "space"))
        width = part.positive_int("width")
        joints = part.get("joints")
        if joints is not None and (
            not isinstance(joints, list)
            or len(joints) != width
            or not all(isinstance(j, str) and j for j in joints)
        ):
            raise part.error("joints", f"is {joints!r}; expected {width} joint names")
        state.append(
            StatePart(
                part.key(),
                width,
                part.choice("dtype", STATE_DTYPES, "float32"),
                None if joints is None else tuple(joints),
                str(part.get("space", "joint_position")),
            )
        )
    actions = _Fields(top.get("actions", required=True), f"{source}: actions")
    actions.unknown(("horizon", "control_hz", "parts"))
    control_hz = actions.get("control_hz", required=True)
    if isinstance(control_hz, bool) or not isinstance(control_hz, (int, float)) or control_hz <= 0:
        raise actions.error("control_hz", f"is {control_hz!r}; expected a rate in Hz > 0")
    parts_data = actions.get("parts", required=True)
    if not isinstance(parts_data, list) or not parts_data:
        raise actions.error("parts", "must be a non-empty list of {name, width, space}")
    parts, start = [], 0
    for i, entry in enumerate(parts_data):
        part = _Fields(entry, f"{source}: actions.parts[{i}]")
        part.unknown(("name", "width", "space", "step_scale", "clip"))
        width = part.positive_int("width")
        numbers: dict[str, float | None] = {}
        for field in ("step_scale", "clip"):
            value = part.get(field)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0
            ):
                raise part.error(field, f"is {value!r}; expected a number > 0")
            numbers[field] = None if value is None else float(value)
        parts.append(
            ActionPart(
                str(part.get("name", f"part{i}")),
                start,
                width,
                str(part.get("space", "joint_position")),
                step_scale=numbers["step_scale"],
                clip=numbers["clip"],
            )
        )
        start += width
    return Layout(
        name=name,
        cameras=tuple(cameras),
        image_layout=image_layout,
        image_size=(size[0], size[1]),
        image_dtype=image_dtype,
        jpeg=jpeg,
        state=tuple(state),
        action_horizon=actions.positive_int("horizon"),
        control_hz=float(control_hz),
        actions=tuple(parts),
        description=str(top.get("description", "")),
        source=str(top.get("source", "")),
    )
