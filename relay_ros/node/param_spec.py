"""One node parameter as a table row: :class:`ParamSpec`, its type check and validator.

The rows themselves are in :mod:`relay_ros.node.params` (the fixed parameters and
the per-output ones) and :mod:`relay_ros.node.limit_params` (joint limits and the
robot description). Plain Python, no rclpy.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeGuard

__all__ = ["TYPES", "ParamSpec", "ParameterError", "check_type", "flatten_parameters", "is_list"]

#: Parameter types, as ROS names them (``string_or_double``: dynamically typed).
TYPES = (
    "string",
    "int",
    "double",
    "bool",
    "string_array",
    "int_array",
    "double_array",
    "string_or_double",
)


class ParameterError(ValueError):
    """A node parameter is missing or has a value the node cannot use."""


def _type_error(name: str, value: Any, expected: str) -> ParameterError:
    return ParameterError(
        f"parameter '{name}' is {value!r} ({type(value).__name__}); expected {expected}"
    )


def is_list(value: Any) -> TypeGuard[Sequence[Any]]:
    """A list, tuple or array.array (what rclpy returns for numeric arrays)."""
    return isinstance(value, Sequence) and not isinstance(value, (str, bytes))


def check_type(name: str, kind: str, value: Any) -> Any:
    """``value`` if it has ROS type ``kind`` (no conversions: ROS makes none either)."""
    if kind == "bool":
        if not isinstance(value, bool):
            raise _type_error(name, value, "true or false")
    elif kind == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            raise _type_error(name, value, "an integer")
    elif kind == "double":
        if not isinstance(value, float):
            hint = f", e.g. {float(value)!r}" if isinstance(value, int) else ""
            raise _type_error(name, value, f"a double (with a decimal point{hint})")
    elif kind == "string":
        if not isinstance(value, str):
            raise _type_error(name, value, "a string")
    elif kind == "string_or_double":
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise _type_error(name, value, "a string or a number")
    else:
        item = {"string_array": str, "int_array": int, "double_array": float}[kind]
        if not is_list(value) or any(isinstance(v, bool) or not isinstance(v, item) for v in value):
            label = {str: "strings", int: "integers", float: "doubles"}[item]
            raise _type_error(name, value, f"a list of {label}")
        return list(value)
    return value


@dataclass(frozen=True)
class ParamSpec:
    """One ROS parameter and its validator.

    Attributes:
        name: Parameter name (the NodeConfig field of the same name, for the scalars).
        type: One of :data:`TYPES`.
        default: Value when unset; ``None``: no default (declared by type only).
        required: A value must be given (only for rows without a default).
        description: One or two sentences, shown by ``ros2 param describe`` and docs/node.md.
        live: ``True``: a ``ros2 param set`` takes effect at once. ``False``: read-only,
            the value is read at start only.
        minimum: Smallest allowed number (inclusive), also the descriptor's range.
        maximum: Largest allowed number (inclusive), also the descriptor's range.
        choices: The allowed strings, if only some are.
        convert: Turns the checked value into the NodeConfig field value (e.g. -1 ->
            None); may raise :class:`ParameterError` for rules a range cannot say.
        only_if_given: Declared only when a value is given (params file, ``-p``):
            "not given" means something (the URDF's limit applies, all of a GR00T
            group), and a declared parameter without a value would be dumped by
            ``ros2 param dump`` as ``null``, which a params file cannot load back.
    """

    name: str
    type: str
    default: Any
    description: str
    required: bool = False
    live: bool = False
    minimum: float | None = None
    maximum: float | None = None
    choices: Sequence[str] = ()
    convert: Callable[[ParamSpec, Any], Any] | None = None
    only_if_given: bool = False

    def __post_init__(self) -> None:
        if self.type not in TYPES:
            raise ValueError(f"ParamSpec '{self.name}': type {self.type!r} is not one of {TYPES}")

    @property
    def read_only(self) -> bool:
        """Read at start only: ROS refuses a ``ros2 param set`` for it."""
        return not self.live

    @property
    def has_range(self) -> bool:
        return self.minimum is not None and self.maximum is not None

    def expected(self) -> str:
        """What a valid value looks like, in words (for error messages and the docs)."""
        if self.choices:
            return f"one of {list(self.choices)}"
        if self.has_range:
            kind = "an integer" if self.type == "int" else "a number"
            return f"{kind} from {self.minimum!r} to {self.maximum!r}"
        return {
            "string": "a string",
            "bool": "true or false",
            "string_array": "a list of strings",
            "int_array": "a list of integers",
            "double_array": "a list of doubles",
            "string_or_double": "a string or a number",
        }.get(self.type, "a value")

    def check(self, value: Any) -> Any:
        """The NodeConfig value for ``value``, or :class:`ParameterError` naming what is wrong."""
        value = check_type(self.name, self.type, value)
        if self.choices and value not in self.choices:
            raise ParameterError(
                f"parameter '{self.name}' is {value!r}; expected {self.expected()}"
            )
        if self.has_range and self.type in ("int", "double"):
            assert self.minimum is not None and self.maximum is not None
            if not (math.isfinite(value) and self.minimum <= value <= self.maximum):
                raise ParameterError(
                    f"parameter '{self.name}' is {value!r}; expected {self.expected()}"
                )
        return value if self.convert is None else self.convert(self, value)


def flatten_parameters(params: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """The dotted parameter names rcl gives a nested ``ros__parameters`` mapping.

    ``{joint_limits: {joint1: {max_velocity: 2.0}}}`` becomes
    ``{"joint_limits.joint1.max_velocity": 2.0}``.
    """
    out: dict[str, Any] = {}
    for key, value in params.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flatten_parameters(value, f"{name}."))
        else:
            out[name] = value
    return out
