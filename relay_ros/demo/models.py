"""What the demo can run: its models, request modes and each model's node configuration.

`load_model_config` reads ``config/<model>.yaml`` exactly as policy_node would (unset
parameters take the node defaults), so that the launch plan, the server command and
the run agree on joints, limits and outputs. `check_model` and `check_mode` are the
argument checks every other demo module uses.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from relay_ros.demo.errors import DemoArgumentError, DemoError
from relay_ros.models import MODEL_IDS
from relay_ros.node.node_config import NodeConfig, config_from_parameters
from relay_ros.node.param_spec import flatten_parameters
from relay_ros.paths import ConfigNotFoundError, config_dir, config_file

__all__ = ["REQUEST_MODES", "check_mode", "check_model", "load_model_config"]

#: ``request_mode`` values of policy_node.
REQUEST_MODES: tuple[str, ...] = ("early", "sync")


def check_model(model: str) -> str:
    """Return ``model`` if it is a registered model ID.

    Raises:
        DemoArgumentError: it is not (names the value and the choices).
    """
    if model not in MODEL_IDS:
        raise DemoArgumentError(f"model {model!r} is not one of {list(MODEL_IDS)}")
    return model


def check_mode(request_mode: str) -> str:
    """Return ``request_mode`` if it is one of `REQUEST_MODES`.

    Raises:
        DemoArgumentError: it is not (names the value and the choices).
    """
    if request_mode not in REQUEST_MODES:
        raise DemoArgumentError(
            f"request_mode {request_mode!r} is not one of {list(REQUEST_MODES)}"
        )
    return request_mode


def _read_ros_parameters(path: Path) -> dict[str, Any]:
    """The ``ros__parameters`` of a node parameter file (first node entry)."""
    with open(path, encoding="utf-8") as stream:
        data = yaml.safe_load(stream)
    if not isinstance(data, Mapping):
        raise DemoError(f"parameter file {str(path)!r} is not a mapping of node names")
    for entry in data.values():
        if isinstance(entry, Mapping) and isinstance(entry.get("ros__parameters"), Mapping):
            return flatten_parameters(entry["ros__parameters"])
    raise DemoError(f"parameter file {str(path)!r} has no 'ros__parameters' section")


def load_model_config(model: str, layout: str | None = None) -> NodeConfig:
    """The validated policy_node configuration of ``config/<model>.yaml`` (or, for an
    openpi layout, ``config/<layout>.yaml``).

    Unset parameters take their node defaults, exactly as policy_node would.

    Raises:
        DemoArgumentError: ``model`` is not a registered model ID, or no config pair
            ships for ``layout``.
        DemoError: the file has no ``ros__parameters`` section.
        relay_ros.node.param_spec.ParameterError: the file's values are invalid.
    """
    check_model(model)
    try:
        path = config_file(f"{layout or model}.yaml")
    except ConfigNotFoundError:
        raise DemoArgumentError(
            f"layout {layout!r} has no config/{layout}.yaml to run the demo with"
        ) from None
    given = _read_ros_parameters(path)
    return config_from_parameters(given, default_config_dir=config_dir)
