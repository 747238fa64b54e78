"""Launch arguments of ``policy.launch.py`` and how they become node parameters.

``launch`` and ``launch_ros`` exist only on a real ROS 2 install, so the launch
files stay thin: they declare :data:`POLICY_LAUNCH_ARGUMENTS` and hand the values
to :func:`policy_node_parameters`, which is plain Python and tested here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from relay_ros.node.params import MODELS, ParameterError
from relay_ros.paths import config_dir

__all__ = [
    "POLICY_LAUNCH_ARGUMENTS",
    "LaunchArgument",
    "parse_bool",
    "policy_node_parameters",
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
        "Node parameter YAML. Empty: the package's config/<model>.yaml.",
    ),
    LaunchArgument(
        "camera_map",
        "",
        "Camera map YAML (model camera key -> topic). Empty: the params file's camera_map, "
        "else config/<model>_cameras.yaml.",
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
)


def parse_bool(name: str, text: str) -> bool:
    """Launch passes strings; accept the spellings ROS users type."""
    value = str(text).strip().lower()
    if value in ("true", "1", "yes", "on"):
        return True
    if value in ("false", "0", "no", "off", ""):
        return False
    raise ParameterError(f"launch argument '{name}' is {text!r}; expected true or false")


def policy_node_parameters(
    arguments: Mapping[str, str], *, default_config_dir: Path | None = None
) -> list[Any]:
    """The ``parameters=`` list for the policy_node launch action.

    Returns the params file path first, then a dict of overrides for the
    arguments that were given (empty strings mean "keep the file's value"), so
    command-line arguments win over the file as ROS users expect.
    """
    unknown = sorted(set(arguments) - {arg.name for arg in POLICY_LAUNCH_ARGUMENTS})
    if unknown:
        known = [arg.name for arg in POLICY_LAUNCH_ARGUMENTS]
        raise ParameterError(f"unknown launch arguments {unknown}; expected some of {known}")
    model = str(arguments.get("model") or "pi05").strip()
    if model not in MODELS:
        raise ParameterError(
            f"launch argument 'model' is {model!r}; expected one of {list(MODELS)}"
        )

    params_file = str(arguments.get("params_file") or "").strip()
    if params_file:
        path = Path(params_file).expanduser()
    else:
        path = (default_config_dir or config_dir()) / f"{model}.yaml"
    if not path.is_file():
        raise ParameterError(f"params_file {str(path)!r} does not exist")

    overrides: dict[str, Any] = {"model": model}
    for name in ("camera_map", "prompt", "policy_url"):
        value = str(arguments.get(name) or "")
        if value:
            overrides[name] = str(Path(value).expanduser()) if name == "camera_map" else value
    if "camera_map" in overrides and not Path(overrides["camera_map"]).is_file():
        raise ParameterError(f"camera_map {overrides['camera_map']!r} does not exist")
    overrides["dry_run"] = parse_bool("dry_run", arguments.get("dry_run", "false"))
    return [str(path), overrides]
