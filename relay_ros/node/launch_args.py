"""Launch arguments of ``policy.launch.py`` and how they become node parameters.

``launch`` and ``launch_ros`` exist only on a real ROS 2 install, so the launch
files stay thin: they declare :data:`POLICY_LAUNCH_ARGUMENTS` and hand the values
to :func:`policy_node_parameters` and :func:`policy_node_namespace`, which are plain
Python and tested here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from relay_ros.models import MODEL_IDS
from relay_ros.node.param_spec import ParameterError
from relay_ros.paths import config_dir

__all__ = [
    "POLICY_LAUNCH_ARGUMENTS",
    "LaunchArgument",
    "parse_bool",
    "policy_node_namespace",
    "policy_node_parameters",
    "resolve_file",
]


@dataclass(frozen=True)
class LaunchArgument:
    """A launch argument: name, default (as launch passes it, a string), description."""

    name: str
    default: str
    description: str


POLICY_LAUNCH_ARGUMENTS: tuple[LaunchArgument, ...] = (
    LaunchArgument("model", "pi05", "Policy model ID: pi05, pi0 or groot."),
    LaunchArgument(
        "params_file",
        "",
        "Node parameter YAML (relative: from the current directory, else the package's "
        "config/). Empty: the package's config/<model>.yaml.",
    ),
    LaunchArgument(
        "camera_map",
        "",
        "Camera map YAML (model camera key -> topic; relative: from the current directory, "
        "else the package's config/). Empty: the params file's camera_map, else "
        "config/<model>_cameras.yaml.",
    ),
    LaunchArgument("prompt", "", "Task instruction. Empty: the params file's prompt."),
    LaunchArgument(
        "policy_url",
        "",
        "Policy server URL ('{model}' is filled in). Empty: WALLE_URL from the environment.",
    ),
    LaunchArgument(
        "dry_run", "false", "true: publish only on ~/preview, never to the controllers."
    ),
    LaunchArgument(
        "robot_description_file",
        "",
        "The robot's URDF (relative: from the current directory, else the package's "
        "config/) for its joint limits; the params file's joint_limits.<joint>.* still "
        "override it per joint (the shipped config/<model>.yaml sets every joint's). "
        "Empty: the params file's, else the URDF on the robot_description topic "
        "(robot_state_publisher's).",
    ),
    LaunchArgument(
        "autostart",
        "",
        "true: configure and activate the node at start; false: it starts unconfigured, "
        "for 'ros2 lifecycle set /policy_node configure', then 'activate'. Empty: the params "
        "file's autostart (default true).",
    ),
    LaunchArgument(
        "namespace",
        "",
        "Namespace of the node, e.g. robot1: its relative topics (joint_states, the shipped "
        "controller and camera topics, robot_description) and its name move under it "
        "(/robot1/policy_node). Empty: none.",
    ),
)


def parse_bool(name: str, text: str) -> bool:
    """Launch passes strings; accept the spellings ROS users type."""
    value = str(text).strip().lower()
    if value in ("true", "1", "yes", "on"):
        return True
    if value in ("false", "0", "no", "off", ""):
        return False
    raise ParameterError(f"launch argument '{name}' is {text!r}; expected true or false")


#: One token of a ROS name: a letter or underscore, then letters, digits, underscores.
_NAME_TOKEN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def policy_node_namespace(arguments: Mapping[str, str]) -> str:
    """The ``namespace=`` of the policy_node launch action: the ``namespace`` argument
    without trailing slashes ("" for none), checked as a ROS namespace (absolute
    ``/robot1`` or relative ``robot1``, tokens of letters, digits and underscores).

    Raises:
        ParameterError: not a valid namespace (the message names the bad token).
    """
    text = str(arguments.get("namespace") or "").strip()
    namespace = text.rstrip("/") if text != "/" else ""
    tokens = namespace.lstrip("/").split("/") if namespace.strip("/") else []
    for token in tokens:
        if not _NAME_TOKEN.fullmatch(token):
            raise ParameterError(
                f"launch argument 'namespace' is {text!r}; {token!r} is not a ROS name token "
                "(a letter or '_', then letters, digits or '_'), e.g. namespace:=robot1"
            )
    return namespace


def resolve_file(argument: str, text: str, directory: Path) -> Path:
    """The absolute path of a file named by a launch argument.

    ``~`` is expanded; an absolute path is used as it is. A relative path is looked
    up first in the current directory (where ``ros2 launch`` runs), then in the
    package's ``config/`` (``directory``), so ``camera_map:=my_cameras.yaml`` finds
    a file next to you and ``params_file:=groot.yaml`` the shipped one.

    Raises:
        ParameterError: No such file (the message lists where it looked).
    """
    path = Path(text).expanduser()
    candidates = [path] if path.is_absolute() else [Path.cwd() / path, directory / path]
    for candidate in candidates:
        if candidate.is_file():
            return candidate.absolute()
    looked = " or ".join(repr(str(c)) for c in candidates)
    raise ParameterError(f"launch argument '{argument}': no file {looked}")


def policy_node_parameters(
    arguments: Mapping[str, str], *, default_config_dir: Path | None = None
) -> list[Any]:
    """The ``parameters=`` list for the policy_node launch action.

    Returns the params file path first, then a dict of overrides for the
    arguments that were given (empty strings mean "keep the file's value"), so
    command-line arguments win over the file as ROS users expect. ``params_file``
    and ``camera_map`` are passed on as absolute paths (:func:`resolve_file`).
    """
    unknown = sorted(set(arguments) - {arg.name for arg in POLICY_LAUNCH_ARGUMENTS})
    if unknown:
        known = [arg.name for arg in POLICY_LAUNCH_ARGUMENTS]
        raise ParameterError(f"unknown launch arguments {unknown}; expected some of {known}")
    model = str(arguments.get("model") or "pi05").strip()
    if model not in MODEL_IDS:
        raise ParameterError(
            f"launch argument 'model' is {model!r}; expected one of {list(MODEL_IDS)}"
        )

    directory = default_config_dir or config_dir()
    params_file = str(arguments.get("params_file") or "").strip()
    if params_file:
        path = resolve_file("params_file", params_file, directory)
    else:
        path = directory / f"{model}.yaml"  # the shipped one, never a file in the cwd
        if not path.is_file():
            raise ParameterError(f"params_file {str(path)!r} does not exist")

    overrides: dict[str, Any] = {"model": model}
    for name in ("prompt", "policy_url"):
        value = str(arguments.get(name) or "")
        if value:
            overrides[name] = value
    camera_map = str(arguments.get("camera_map") or "").strip()
    if camera_map:
        overrides["camera_map"] = str(resolve_file("camera_map", camera_map, directory))
    urdf = str(arguments.get("robot_description_file") or "").strip()
    if urdf:
        overrides["robot_description_file"] = str(
            resolve_file("robot_description_file", urdf, directory)
        )
    overrides["dry_run"] = parse_bool("dry_run", arguments.get("dry_run", "false"))
    autostart = str(arguments.get("autostart") or "").strip()
    if autostart:
        overrides["autostart"] = parse_bool("autostart", autostart)
    return [str(path), overrides]
