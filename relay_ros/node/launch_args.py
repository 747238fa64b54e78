"""Launch arguments of ``policy.launch.py`` (and ``demo.launch.py``'s node ones) and
how they become node parameters.

``launch`` and ``launch_ros`` exist only on a real ROS 2 install, so the launch
files stay thin: ``policy.launch.py`` declares :data:`POLICY_LAUNCH_ARGUMENTS` and
hands the values to :func:`policy_node_parameters` and :func:`policy_node_namespace`;
``demo.launch.py``'s ``lora`` is read with :func:`lora_argument` too
(``relay_ros.demo.launch_plan``). All of it is plain Python and tested here.
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
    "layout_argument",
    "lora_argument",
    "parse_bool",
    "policy_node_namespace",
    "policy_node_parameters",
    "record_dir_argument",
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
    LaunchArgument(
        "layout",
        "",
        "Observation layout of a stock openpi server: a shipped name (droid, aloha, libero) "
        "or a layout YAML file (relative: from the current directory, else the package's "
        "config/layouts/). Without params_file a shipped name runs the package's "
        "config/<layout>.yaml (its joints, outputs and camera map). Empty: the params "
        "file's layout.",
    ),
    LaunchArgument(
        "lora",
        "",
        "LoRA adapter the server runs for this node (one of the server's lora_adapters). "
        "Empty: the params file's lora (the base model unless it names one).",
    ),
    LaunchArgument(
        "record_dir",
        "",
        "Record every episode into this LeRobot dataset directory (created if missing, "
        "appended to when it holds episodes of the same layout; relative: from the current "
        "directory). Empty: the params file's record_dir (no recording unless it names one).",
    ),
)

#: Where the shipped layouts are, under the package's config/.
_LAYOUTS_DIR = "layouts"


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


def _is_path(text: str) -> bool:
    """A layout given as a file (as the node's ``layout`` parameter tells them apart)."""
    return "/" in text or text.endswith((".yaml", ".yml"))


def layout_argument(arguments: Mapping[str, str], directory: Path) -> str:
    """The ``layout`` argument: ``""`` (none given), a shipped layout's name (one of
    ``directory/layouts/*.yaml``), or a layout file's absolute path (:func:`resolve_file`,
    looked up in the current directory, then ``directory/layouts``).

    Raises:
        ParameterError: an unknown name (the message lists the shipped ones), or no
            such file.
    """
    text = str(arguments.get("layout") or "").strip()
    if not text:
        return ""
    folder = directory / _LAYOUTS_DIR
    if _is_path(text):
        return str(resolve_file("layout", text, folder))
    names = sorted(p.stem for p in folder.glob("*.yaml"))
    if text not in names:
        raise ParameterError(
            f"launch argument 'layout' is {text!r}; expected a shipped layout {names} or a "
            "layout YAML file, e.g. layout:=droid or layout:=my_layout.yaml"
        )
    return text


def lora_argument(arguments: Mapping[str, str]) -> str:
    """The ``lora`` argument, ``""`` when not given.

    Raises:
        ParameterError: spaces around the name or a control character in it (an
            adapter name is matched exactly against the server's ``lora_adapters``).
    """
    text = str(arguments.get("lora") or "")
    if text != text.strip() or any(ch in text for ch in "\r\n\t"):
        raise ParameterError(
            f"launch argument 'lora' is {text!r}; expected an adapter name as the server "
            "lists it in lora_adapters, e.g. lora:=so100_towels"
        )
    return text


def record_dir_argument(arguments: Mapping[str, str]) -> str:
    """The ``record_dir`` argument as an absolute path (``~`` expanded, relative to the
    current directory, where ``ros2 launch`` runs), ``""`` when not given. The
    directory need not exist: the node creates it (and refuses one that holds
    something else, at configure)."""
    text = str(arguments.get("record_dir") or "").strip()
    return str(Path(text).expanduser().absolute()) if text else ""


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
    command-line arguments win over the file as ROS users expect. ``params_file``,
    ``camera_map``, a ``layout`` file and ``record_dir`` are passed on as absolute paths
    (:func:`resolve_file`, :func:`layout_argument`, :func:`record_dir_argument`).
    Without ``params_file``, a shipped ``layout`` runs the package's
    ``config/<layout>.yaml``, else ``config/<model>.yaml``.
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
    layout = layout_argument(arguments, directory)
    params_file = str(arguments.get("params_file") or "").strip()
    if params_file:
        path = resolve_file("params_file", params_file, directory)
    else:
        # The shipped one, never a file in the cwd: the layout's pair, else the model's.
        shipped = directory / f"{layout}.yaml" if layout and not _is_path(layout) else None
        path = shipped if shipped is not None and shipped.is_file() else directory / f"{model}.yaml"
        if not path.is_file():
            raise ParameterError(f"params_file {str(path)!r} does not exist")

    overrides: dict[str, Any] = {"model": model}
    if layout:
        overrides["layout"] = layout
    lora = lora_argument(arguments)
    if lora:
        overrides["lora"] = lora
    record_dir = record_dir_argument(arguments)
    if record_dir:
        overrides["record_dir"] = record_dir
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
