"""policy_node's parameters on the ROS side: declaration with descriptors, and live changes.

The table lives in :mod:`relay_ros.node.params`, every rule in
:mod:`relay_ros.node.node_config` (plain Python);
this module only translates them for rclpy:

- :func:`descriptor` turns a :class:`~relay_ros.node.param_spec.ParamSpec` into a
  ``ParameterDescriptor``: description, read-only flag (parameters read at start
  only, so ``ros2 param set`` refuses them with a reason), the numeric range
  (``IntegerRange`` / ``FloatingPointRange``) and the allowed values in words;
- :func:`declare_parameters` declares every parameter on a node (those not declared
  yet: a node configured again after a cleanup reads the values it has) and returns
  the validated :class:`~relay_ros.node.node_config.NodeConfig`;
  :func:`declare_parameter` one of them (``autostart``, read before configure);
- :class:`LiveParameters` is the on-set-parameters callback: a change to a live
  parameter is validated with the rules used at start and handed to the node's
  ``apply`` function before the set call returns; anything else is refused with
  the sentence the validator wrote.
"""

from __future__ import annotations

import array
from collections.abc import Callable
from typing import Any

from rcl_interfaces.msg import (
    FloatingPointRange,
    IntegerRange,
    ParameterDescriptor,
    SetParametersResult,
)
from rclpy.exceptions import (
    InvalidParameterTypeException,
    InvalidParameterValueException,
    ParameterUninitializedException,
)
from rclpy.node import Node
from rclpy.parameter import Parameter

from relay_ros.node.limit_params import LIMITS_PREFIX, check_given_names
from relay_ros.node.node_config import NodeConfig, build_config, collect_values, validate_change
from relay_ros.node.param_spec import ParameterError, ParamSpec
from relay_ros.node.params import spec_for

__all__ = ["LiveParameters", "declare_parameter", "declare_parameters", "descriptor"]

_PARAM_TYPES = {
    "string": Parameter.Type.STRING,
    "int": Parameter.Type.INTEGER,
    "double": Parameter.Type.DOUBLE,
    "bool": Parameter.Type.BOOL,
    "string_array": Parameter.Type.STRING_ARRAY,
    "int_array": Parameter.Type.INTEGER_ARRAY,
    "double_array": Parameter.Type.DOUBLE_ARRAY,
}


#: Parameters rclpy itself may declare later (QoS overrides of publishers).
_RCLPY_PREFIXES = ("qos_overrides.",)


def descriptor(spec: ParamSpec) -> ParameterDescriptor:
    """The ROS descriptor of one parameter row."""
    constraints = []
    if spec.choices:
        constraints.append(f"one of {list(spec.choices)}")
    constraints.append(
        "live: takes effect at once" if spec.live else "read-only: read at start only"
    )
    result = ParameterDescriptor(
        description=spec.description,
        additional_constraints="; ".join(constraints),
        read_only=spec.read_only,
        dynamic_typing=spec.type == "string_or_double",
    )
    low, high = spec.minimum, spec.maximum  # both set: spec.has_range
    if low is not None and high is not None and spec.type == "int":
        result.integer_range = [IntegerRange(from_value=int(low), to_value=int(high), step=0)]
    elif low is not None and high is not None and spec.type == "double":
        result.floating_point_range = [
            FloatingPointRange(from_value=float(low), to_value=float(high), step=0.0)
        ]
    return result


def _overrides(node: Node) -> dict[str, Parameter]:
    """What the params files and ``-p`` / ``parameter_overrides`` give the node."""
    return dict(getattr(node, "_parameter_overrides", {}))


def _declare(node: Node, spec: ParamSpec) -> Any:
    """Declare ``spec`` on ``node``; its value (None if unset and required, or not
    given for an ``only_if_given`` row, which is then not declared)."""
    if node.has_parameter(spec.name):
        pass  # declared at an earlier configure (or autostart): read its value again
    elif spec.only_if_given and spec.name not in _overrides(node):
        return None
    else:
        _declare_new(node, spec)
    try:
        value = node.get_parameter(spec.name).value
    except ParameterUninitializedException:
        return None
    return _plain(value)


def _declare_new(node: Node, spec: ParamSpec) -> None:
    """Declare ``spec`` with its descriptor; a given value rclpy refuses is named the
    way the validator names it."""
    initial = _PARAM_TYPES[spec.type] if spec.default is None else spec.default
    try:
        node.declare_parameter(spec.name, initial, descriptor(spec))
    except (InvalidParameterTypeException, InvalidParameterValueException) as exc:
        # rclpy refused the value from the params file or an override (wrong type or out
        # of range): say it the way the validator says it, with what is expected.
        overrides = _overrides(node)
        given = overrides[spec.name].value if spec.name in overrides else None
        if given is not None:
            spec.check(given)  # raises ParameterError with the sentence
        raise ParameterError(f"parameter '{spec.name}': {exc}") from None


def declare_parameter(node: Node, name: str) -> Any:
    """Declare the table's parameter ``name`` on ``node`` (unless declared already) and
    return its value, checked by its row's validator (the node reads ``autostart``
    this way before it is configured).

    Raises:
        ParameterError: the value is invalid (the message names it).
        KeyError: ``name`` is not a row of the table.
    """
    spec = spec_for(name)
    if spec is None:
        raise KeyError(f"{name!r} is not a policy_node parameter")
    value = _declare(node, spec)
    return spec.check(spec.default if value is None else value)


def declare_parameters(node: Node) -> NodeConfig:
    """Declare every policy_node parameter on ``node`` and validate their values.

    A parameter given to the node (params file, ``-p``, overrides) that it does
    not declare would be ignored without a word: each one is named in a warning
    (not an error: a ``/**`` section may hold other nodes' parameters).

    Raises:
        ParameterError: A value is missing or invalid, or a name of an earlier
            release is given (the message names it and what to write instead).
    """
    overrides = _overrides(node)
    check_given_names({name: _plain(p.value) for name, p in overrides.items()})
    config = build_config(collect_values(lambda spec: _declare(node, spec)))
    unknown = sorted(
        name
        for name in overrides
        if not node.has_parameter(name) and not name.startswith(_RCLPY_PREFIXES)
    )
    limits = [name for name in unknown if name.startswith(LIMITS_PREFIX)]
    others = [name for name in unknown if name not in limits]
    if others:
        node.get_logger().warning(
            f"ignoring parameters {others}: not policy_node parameters (a typo? an output "
            "not in 'output_names'?); see docs/node.md"
        )
    if limits:
        node.get_logger().warning(
            f"ignoring parameters {limits}: policy_node reads has_position_limits, "
            "min_position, max_position, has_velocity_limits, max_velocity, "
            "has_acceleration_limits and max_acceleration of the commanded joints only"
        )
    return config


def _plain(value: Any) -> Any:
    """A parameter value as plain Python (rclpy gives numeric arrays as array.array)."""
    return value.tolist() if isinstance(value, array.array) else value


class LiveParameters:
    """The node's on-set-parameters callback for the live parameters.

    ``apply(new_config)`` makes the change take effect; it runs inside the set
    call, so when ``ros2 param set`` answers, the node already works with the
    new value. It may raise ``ValueError`` (e.g. ``execute_horizon`` larger than
    the server's ``action_horizon``) to refuse the change; the message is the
    reason ``ros2 param set`` prints.

    Parameters that are not policy_node's (``use_sim_time``, ``qos_overrides.*``)
    are left to rclpy.
    """

    def __init__(
        self,
        node: Node,
        config: NodeConfig,
        apply: Callable[[NodeConfig], None],
    ) -> None:
        self._node = node
        self._config = config
        self._apply = apply
        node.add_on_set_parameters_callback(self._on_set)

    def close(self) -> None:
        """Stop handling changes (the node was cleaned up: nothing applies them now)."""
        self._node.remove_on_set_parameters_callback(self._on_set)

    @property
    def config(self) -> NodeConfig:
        """The configuration with every accepted change applied."""
        return self._config

    @config.setter
    def config(self, config: NodeConfig) -> None:
        """A change that came another way (the URDF on ``robot_description``), applied."""
        self._config = config

    def _on_set(self, parameters: list[Parameter]) -> SetParametersResult:
        config = self._config
        changed = []
        try:
            for parameter in parameters:
                if spec_for(parameter.name) is None:
                    continue  # not ours (use_sim_time, qos_overrides.*): rclpy's business
                value = _plain(parameter.value)
                config = validate_change(config, parameter.name, value)
                changed.append(f"{parameter.name}={value!r}")
            if config != self._config:
                self._apply(config)
        except ValueError as exc:
            reason = str(exc)
            self._node.get_logger().warning(f"parameter change refused: {reason}")
            return SetParametersResult(successful=False, reason=reason)
        self._config = config
        if changed:
            self._node.get_logger().info(f"parameters changed: {', '.join(changed)}")
        return SetParametersResult(successful=True)
