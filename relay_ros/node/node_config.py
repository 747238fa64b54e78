"""NodeConfig: policy_node's validated parameters, built from raw values and changed live.

:func:`collect_values` asks for every parameter of the table
(:mod:`relay_ros.node.params`) in declaration order, the per-output and per-joint
ones included; :func:`build_config` runs each row's validator and then the rules
that tie parameters together (outputs against the model, joint limits from the
URDF and the parameters, the image encoding). Who uses it:

- the node declares the parameters and gets its values through
  :func:`collect_values` (:mod:`relay_ros.node.ros_params`);
- replay and the demo read a params file and call :func:`config_from_parameters`;
- a live ``ros2 param set`` is checked by :func:`validate_change` with the rules
  used at start.

Plain Python (no rclpy): every mistake a robot team can make in a YAML file or a
``ros2 param set`` gets a sentence naming the parameter, the bad value and what
was expected.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from relay_ros.formats import FormatError, format_for
from relay_ros.models import get_model
from relay_ros.node.limit_params import (
    LIMITS_PREFIX,
    check_given_names,
    limit_name,
    limit_parameter_specs,
    limit_params_from_values,
    resolve_limits,
    robot_description_from,
    with_limit_change,
)
from relay_ros.node.param_spec import ParameterError, ParamSpec, is_list
from relay_ros.node.params import (
    LIVE_PARAMETERS,
    PARAMETERS,
    check_names,
    check_topic,
    output_parameter_specs,
    spec_for,
    unique_names,
)
from relay_ros.paths import config_dir
from relay_ros.pipeline.image_encoding import ImageEncodingError, check_image_encoding
from relay_ros.pipeline.joint_limits import (
    JointLimit,
    JointLimitsError,
    LimitParams,
    resolve_joint_limits,
)
from relay_ros.pipeline.outputs import OutputsError, load_outputs
from relay_ros.pipeline.ramp_in import DEFAULT_RAMP_IN_S
from relay_ros.pipeline.server_spec import ServerSpec
from relay_ros.pipeline.urdf_limits import RobotDescription

__all__ = [
    "NodeConfig",
    "OutputSpec",
    "build_config",
    "check_layout",
    "collect_values",
    "config_from_parameters",
    "validate_change",
]

_BY_NAME = {spec.name: spec for spec in PARAMETERS}


@dataclass(frozen=True)
class OutputSpec:
    """One output controller as configured (validated against metadata later)."""

    name: str
    topic: str
    joints: tuple[str, ...]
    dims: tuple[int, ...] | None
    action_key: str | None

    def as_mapping(self) -> dict[str, Any]:
        """The dict form :func:`relay_ros.pipeline.outputs.load_outputs` takes."""
        entry: dict[str, Any] = {"topic": self.topic, "joints": list(self.joints)}
        if self.dims is not None:
            entry["dims"] = list(self.dims)
        if self.action_key:
            entry["action_key"] = self.action_key
        return entry


@dataclass(frozen=True)
class NodeConfig:
    """Validated policy_node settings. Values that need the server metadata stay optional.

    ``joint_limits`` are the limits each commanded joint runs under, from the URDF
    (``robot``) and the ``joint_limits.<joint>.*`` parameters (``limit_params``,
    kept to apply a live change on top of the same URDF).
    """

    model: str
    layout: str
    policy_url: str | None
    camera_map: Path
    prompt: str
    seed: int | None
    lora: str
    lora_scale: float
    joint_states_topic: str
    state_joints: tuple[str, ...]
    outputs: tuple[OutputSpec, ...]
    joint_limits: Mapping[str, JointLimit]
    limits_mode: str
    control_hz: float | None
    execute_horizon: int | None
    request_lead_s: float | None
    request_mode: str
    smoothing: str
    blend_steps: int
    dry_run: bool
    max_joint_step: float
    sensor_timeout_s: float
    retry_delay_s: float
    request_timeout_s: float | None
    tick_hz: float
    reconnect_max_backoff_s: float
    autostart: bool = True
    deadman_topic: str = ""
    deadman_timeout_s: float = 0.5
    ramp_in_s: float = DEFAULT_RAMP_IN_S
    image_encoding: str = "raw"
    jpeg_quality: int = 90
    thread_priority: int = 0
    interpolate_from_desired_state: bool = True
    max_tracking_error: float = 0.25
    robot_description: str = ""
    robot_description_file: str = ""
    limit_params: Mapping[str, LimitParams] = dataclasses.field(default_factory=dict)
    robot: RobotDescription | None = None
    robot_description_topic: str = ""
    #: Why some commanded joint has no limits (waiting for the URDF topic); None: all have.
    limits_problem: str | None = None
    # Recording (relay_ros.node.episode_recording); record_dir None: off.
    record_dir: Path | None = None
    record_fps: int = 15
    record_video_codec: str = "libsvtav1"
    record_queue_frames: int = 30
    record_robot_type: str = ""

    @property
    def commanded_joints(self) -> tuple[str, ...]:
        """Every joint some output drives, in output order."""
        return tuple(joint for output in self.outputs for joint in output.joints)


def collect_values(lookup: Callable[[ParamSpec], Any]) -> dict[str, Any]:
    """Raw value of every node parameter (name -> value, unset = None), asked of ``lookup``.

    ``lookup`` gets each :class:`ParamSpec` once, in declaration order: first
    :data:`PARAMETERS`, then ``outputs.<name>.*`` for every name in ``output_names``,
    then ``joint_limits.<joint>.*`` for every joint those outputs drive (their
    names depend on the values before). policy_node's lookup declares the
    parameter (the ``only_if_given`` ones only when given) and reads it;
    :func:`config_from_parameters` reads a mapping.
    """
    values = {spec.name: lookup(spec) for spec in PARAMETERS}
    outputs = values.get("output_names")
    output_names = [str(n) for n in outputs] if is_list(outputs) else []
    for name in output_names:
        for spec in output_parameter_specs(name):
            values[spec.name] = lookup(spec)
    commanded: list[str] = []
    for name in output_names:
        joints = values.get(f"outputs.{name}.joints")
        if is_list(joints):
            commanded.extend(str(j) for j in joints)
    for spec in limit_parameter_specs(list(dict.fromkeys(commanded))):
        values[spec.name] = lookup(spec)
    return values


def config_from_parameters(
    given: Mapping[str, Any],
    *,
    default_config_dir: Callable[[], Path] = config_dir,
) -> NodeConfig:
    """The NodeConfig for parameters given as a mapping (e.g. a params file plus overrides).

    Resolved like policy_node resolves them: declared defaults, then ``given``;
    names of earlier releases are refused (:func:`check_given_names`).
    """
    check_given_names(given)
    values = collect_values(lambda spec: given.get(spec.name, spec.default))
    return build_config(values, default_config_dir=default_config_dir)


def _check(values: Mapping[str, Any], spec: ParamSpec) -> Any:
    value = values.get(spec.name)
    if value is None:
        if spec.required:
            raise ParameterError(f"parameter '{spec.name}' is required ({spec.description})")
        value = spec.default
    return spec.check(value)


def _output(values: Mapping[str, Any], name: str, model: str, layout: str) -> OutputSpec:
    prefix = f"outputs.{name}."
    topic_spec, joints_spec, dims_spec, key_spec = output_parameter_specs(name)
    topic = topic_spec.check(values.get(topic_spec.name) or "")
    if not topic:
        raise ParameterError(f"output '{name}' needs parameter '{prefix}topic'")
    check_topic(topic_spec, topic)
    joints = check_names(joints_spec, joints_spec.check(values.get(joints_spec.name) or []))
    raw_dims = values.get(dims_spec.name)
    dims = tuple(dims_spec.check(raw_dims)) if raw_dims else None
    action_key = key_spec.check(values.get(key_spec.name) or "") or None
    try:
        where = f"model {model}" + (f" with layout {layout!r}" if layout else "")
        format_for(model, layout).check_output_params(name, dims, action_key, where)
    except FormatError as exc:
        raise ParameterError(str(exc)) from None
    return OutputSpec(name, topic, joints, dims, action_key)


def _check_format(model: str, layout: str) -> None:
    """Refuse a layout that cannot be read, or whose actions (or state) the node
    cannot execute on joint trajectory controllers (LIBERO's end-effector deltas)."""
    try:
        fmt = format_for(model, layout)
    except FormatError as exc:
        raise ParameterError(f"parameter 'layout': {exc}") from None
    problem = fmt.unsupported_action_space()
    if problem is not None:
        raise ParameterError(f"parameter 'layout' is {layout!r}: {problem}")


def _camera_map(given: str, model: str, layout: str, default_dir: Callable[[], Path]) -> Path:
    """The camera map file: given, else the package's ``<layout>_cameras.yaml`` for a
    shipped layout or ``<model>_cameras.yaml``."""
    if given:
        return Path(given).expanduser()
    if layout and ("/" in layout or layout.endswith((".yaml", ".yml"))):
        raise ParameterError(
            f"parameter 'camera_map' is empty; a layout file ({layout!r}) needs a camera map "
            "naming its cameras"
        )
    return default_dir() / f"{layout or model}_cameras.yaml"


def check_layout(
    model: str, layout: str, state_joints: Sequence[str], outputs: Sequence[OutputSpec]
) -> None:
    """What needs no server: every commanded joint is a state joint, and (for a wire
    format whose metadata is known without a server: the π0 family, openpi layouts;
    not GR00T, whose groups come from the server's embodiment) the state and the
    outputs' action dimensions fit it, checked by the same code that checks them
    against a connected server's metadata (which is checked again on connect).

    Raises:
        ParameterError: the first mistake, naming the parameter, the value and what
            was expected.
    """
    known = set(state_joints)
    for output in outputs:
        for joint in output.joints:
            if joint not in known:
                raise ParameterError(
                    f"parameter 'outputs.{output.name}.joints' lists joint {joint!r}, which is "
                    f"not in state_joints {list(state_joints)}: every commanded joint must be "
                    "one of state_joints, named as in the joint states (a typo?)"
                )
    fmt = format_for(model, layout)
    if fmt.needs_embodiment:
        return  # GR00T's groups come from its server's embodiment
    info = get_model(model)
    metadata = fmt.metadata_fields(info, None)
    if "action_dim" not in metadata:
        return
    spec = ServerSpec.from_metadata(metadata, model=model, layout=layout)
    try:
        load_outputs({o.name: o.as_mapping() for o in outputs}, spec)
        # Only the state here: the camera map is checked when it is read.
        fmt.check_state_joints(state_joints, spec)
    except (OutputsError, FormatError) as exc:
        raise ParameterError(
            f"the configuration does not fit model {model} (action_dim "
            f"{metadata['action_dim']}, as its servers announce): {exc}"
        ) from None


def _resolve(
    joints: Sequence[str], params: Mapping[str, LimitParams], robot: RobotDescription | None
) -> dict[str, JointLimit]:
    try:
        return resolve_joint_limits(joints, params, robot)
    except JointLimitsError as exc:
        raise ParameterError(str(exc)) from None


def build_config(
    values: Mapping[str, Any],
    *,
    default_config_dir: Callable[[], Path] = config_dir,
) -> NodeConfig:
    """Validate raw parameter values (name -> value, unset = None) into a NodeConfig.

    ``values`` holds the :data:`PARAMETERS`, the ``outputs.<name>.*`` parameters of
    every listed output and ``joint_limits.<joint>.*`` of every commanded joint
    (what :func:`collect_values` returns). Each value passes its row's validator;
    then the rules that tie parameters together (outputs, limits, model) apply:
    every commanded joint needs position (unless continuous) and velocity limits
    from the URDF or the parameters (:mod:`relay_ros.pipeline.joint_limits`).
    """
    fields = {spec.name: _check(values, spec) for spec in PARAMETERS}
    model, layout = fields["model"], fields["layout"]
    _check_format(model, layout)
    outputs = tuple(_output(values, name, model, layout) for name in fields.pop("output_names"))
    commanded = [joint for output in outputs for joint in output.joints]
    unique_names("outputs.*.joints", commanded)
    robot = robot_description_from(fields["robot_description"], fields["robot_description_file"])
    limit_params = limit_params_from_values(values, commanded)
    fields["camera_map"] = _camera_map(fields["camera_map"], model, layout, default_config_dir)
    check_layout(model, layout, fields["state_joints"], outputs)
    try:
        check_image_encoding(model, fields["image_encoding"], fields["jpeg_quality"], layout)
    except ImageEncodingError as exc:
        raise ParameterError(f"parameter {exc}") from None
    fields["outputs"] = outputs
    topic = fields["robot_description_topic"] if robot is None else None
    fields["joint_limits"], fields["limits_problem"] = resolve_limits(
        commanded, limit_params, robot, waiting_on=topic or None
    )
    fields["limit_params"] = limit_params
    fields["robot"] = robot
    return NodeConfig(**fields)


def validate_change(config: NodeConfig, name: str, value: Any) -> NodeConfig:
    """``config`` with parameter ``name`` set to ``value`` while the node runs.

    The value passes the same validator as at start. Only the parameters in
    :data:`LIVE_PARAMETERS` and ``joint_limits.<joint>.*`` change live; the others
    are read at start. A limit change is combined with the URDF as at start, so a
    joint can never be left without limits. Whether the running node can use the
    value (e.g. an ``execute_horizon`` within the server's ``action_horizon``) is
    checked by the node when it applies the new configuration.

    Raises:
        ParameterError: ``name`` is not live (or unknown) or ``value`` is invalid;
            the message names the parameter, the value and what is expected.
    """
    parts = limit_name(name)
    if parts is not None:
        joint, field = parts
        if joint not in config.commanded_joints:
            raise ParameterError(
                f"parameter '{name}': no output drives joint {joint!r}; limits are set for "
                f"{list(config.commanded_joints)}"
            )
        spec = spec_for(name)
        assert spec is not None
        params = dict(config.limit_params)
        params[joint] = with_limit_change(
            params.get(joint, LimitParams()), field, spec.check(value)
        )
        _resolve([joint], params, config.robot)  # this joint must keep usable limits
        waiting = config.robot_description_topic if config.robot is None else ""
        limits, problem = resolve_limits(
            config.commanded_joints, params, config.robot, waiting_on=waiting or None
        )
        return dataclasses.replace(
            config, joint_limits=limits, limit_params=params, limits_problem=problem
        )
    if name.startswith(LIMITS_PREFIX):
        raise ParameterError(
            f"parameter '{name}' is not a joint limit; expected "
            f"{LIMITS_PREFIX}<joint>.<field> with a field of ros2_control's convention "
            "(has_position_limits, min_position, max_position, has_velocity_limits, "
            "max_velocity, has_acceleration_limits, max_acceleration)"
        )
    spec = _BY_NAME.get(name)
    if spec is None:
        if spec_for(name) is not None:
            raise ParameterError(
                f"parameter '{name}' is read-only: it is read at start only; restart the "
                "node to change it"
            )
        raise ParameterError(f"parameter '{name}' is not a policy_node parameter")
    if not spec.live:
        raise ParameterError(
            f"parameter '{name}' is read-only: it is read at start only; restart the node "
            f"to change it (live parameters: {', '.join(LIVE_PARAMETERS)})"
        )
    return dataclasses.replace(config, **{name: spec.check(value)})
