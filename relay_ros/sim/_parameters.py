"""Parameter helpers of the sim nodes: overrides as rclpy Parameters, renamed names refused."""

from __future__ import annotations

import array
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from rcl_interfaces.msg import ParameterDescriptor
from rclpy.node import Node
from rclpy.parameter import Parameter

from relay_ros.node.node_main import type_words

__all__ = ["as_parameters", "declare_if_given", "parameter_types", "refuse_renamed"]


def as_parameters(overrides: Mapping[str, Any] | Sequence[Parameter] | None) -> list[Parameter]:
    """``{name: value}`` or a sequence of Parameters (or None) as a Parameter list."""
    if overrides is None:
        return []
    if isinstance(overrides, Mapping):
        return [Parameter(name, value=value) for name, value in overrides.items()]
    return list(overrides)


def refuse_renamed(node: Node, old: str, new: str, error: type[Exception]) -> None:
    """Raise ``error`` when ``node`` is given the list parameter ``old``, renamed ``new``.

    ``old`` named both a string list and the namespace of the per-item parameters
    (``cameras: [base]`` beside ``cameras.base.topic``), which ``ros2 param dump``
    cannot nest; a file of an earlier release must not be half read.
    """
    given = getattr(node, "_parameter_overrides", {}).get(old)
    if given is None:
        return
    value = given.value
    listed = value.tolist() if isinstance(value, array.array) else value
    raise error(
        f"parameter '{old}' is now '{new}' (a list named like the {old}.<name>.* namespace "
        f"breaks 'ros2 param dump'): write {new}: {listed!r}"
    )


def declare_if_given(node: Node, name: str, kind: Parameter.Type, description: str) -> Any:
    """Declare the per-item parameter ``name`` of type ``kind`` only if it is given; its value.

    Unset, it stays undeclared (None here: the node's default applies): a declared
    parameter without a value makes rclpy's get_parameters service answer nothing,
    so ``ros2 param dump`` would print no parameter of the node at all.
    """
    if name not in getattr(node, "_parameter_overrides", {}):
        return None
    return node.declare_parameter(name, kind, ParameterDescriptor(description=description)).value


def parameter_types(
    node_parameters: Mapping[str, tuple[Any, str]],
    prefix: str,
    item_parameters: Mapping[str, tuple[Parameter.Type, str]],
) -> Callable[[str], str | None]:
    """What each parameter of a sim node takes, in words, from its two tables.

    ``node_parameters``: name -> (default, description); ``item_parameters``:
    suffix -> (type, description) of the ``<prefix>.<name>.<suffix>`` parameters.
    """

    def expected(name: str) -> str | None:
        if name in node_parameters:
            return type_words(Parameter.Type.from_parameter_value(node_parameters[name][0]))
        head, _, rest = name.partition(".")
        suffix = rest.rpartition(".")[2]
        if head == prefix and "." in rest and suffix in item_parameters:
            return type_words(item_parameters[suffix][0])
        return None

    return expected
