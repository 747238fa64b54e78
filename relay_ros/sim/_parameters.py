"""Parameter overrides for the sim nodes, given as a dict or as rclpy Parameters."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rclpy.parameter import Parameter

__all__ = ["as_parameters"]


def as_parameters(overrides: Mapping[str, Any] | Sequence[Parameter] | None) -> list[Parameter]:
    """``{name: value}`` or a sequence of Parameters (or None) as a Parameter list."""
    if overrides is None:
        return []
    if isinstance(overrides, Mapping):
        return [Parameter(name, value=value) for name, value in overrides.items()]
    return list(overrides)
