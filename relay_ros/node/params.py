"""Every policy_node parameter in one table, with its validator, and the NodeConfig built from them.

Each :class:`ParamSpec` of :data:`PARAMETERS` holds what ROS needs to declare the
parameter (type, default, description, range, read-only flag) and the rule that
turns a raw value into the :class:`NodeConfig` field of the same name. The names
of the per-output and per-joint parameters depend on other parameters' values
(``outputs.<name>.topic``, ``joint_limits.<joint>``); :func:`output_parameter_specs`
and :func:`limit_parameter_specs` build those rows.

One table serves everyone:

- the node declares exactly these parameters (descriptors from the same rows,
  see :mod:`relay_ros.node.ros_params`) and gets its values through
  :func:`collect_values`;
- replay and the demo read a params file and call :func:`config_from_parameters`;
- a live ``ros2 param set`` is checked by :func:`validate_change` with the rules
  used at start; parameters that only take effect at start are read-only;
- the table in docs/node.md is rendered from it (:mod:`relay_ros.node.params_doc`).

Plain Python (no rclpy): every mistake a robot team can make in a YAML file or a
``ros2 param set`` gets a sentence naming the parameter, the bad value and what
was expected.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from relay_ros.models import MODEL_IDS, family_of
from relay_ros.node.limit_params import (
    LIMITS_PREFIX,
    ROBOT_DESCRIPTION_PARAMETERS,
    check_given_names,
    limit_name,
    limit_parameter_specs,
    limit_params_from_values,
    robot_description_from,
    with_limit_change,
)
from relay_ros.node.param_spec import ParameterError, ParamSpec, is_list
from relay_ros.node.thread_priority import MAX_PRIORITY
from relay_ros.paths import config_dir
from relay_ros.pipeline.image_encoding import ImageEncodingError, check_image_encoding
from relay_ros.pipeline.joint_limits import (
    JointLimit,
    JointLimitsError,
    LimitParams,
    resolve_joint_limits,
)
from relay_ros.pipeline.urdf_limits import RobotDescription

__all__ = [
    "LIVE_PARAMETERS",
    "PARAMETERS",
    "NodeConfig",
    "OutputSpec",
    "ParamSpec",
    "ParameterError",
    "build_config",
    "collect_values",
    "config_from_parameters",
    "limit_parameter_specs",
    "output_parameter_specs",
    "parse_lead",
    "spec_for",
    "validate_change",
]


_MAX_SEED = 2**31 - 1
_MAX_LEAD_S = 10.0


# ---------------------------------------------------------------- converters
def _zero_is_none(spec: ParamSpec, value: Any) -> Any:
    return None if value == 0 else value


def _negative_is_none(spec: ParamSpec, value: int) -> int | None:
    return None if value < 0 else value


def _empty_is_none(spec: ParamSpec, value: str) -> str | None:
    return value or None


def _url(spec: ParamSpec, value: str) -> str | None:
    if value and not value.startswith(("ws://", "wss://")):
        raise ParameterError(
            f"parameter '{spec.name}' is {value!r}; expected a ws:// or wss:// URL, "
            "e.g. ws://127.0.0.1:8000/{model}"
        )
    return value or None


def _topic(spec: ParamSpec, value: str) -> str:
    if not value or any(ch.isspace() for ch in value):
        raise ParameterError(
            f"parameter '{spec.name}' is {value!r}; expected a topic name without spaces, "
            "e.g. 'joint_states'"
        )
    return value


def _names(spec: ParamSpec, value: list[str]) -> tuple[str, ...]:
    if not value:
        raise ParameterError(f"parameter '{spec.name}' is required ({spec.description})")
    return _unique(spec.name, value)


def _lead(spec: ParamSpec, value: Any) -> float | None:
    return parse_lead(value)


def _unique(name: str, items: Sequence[str]) -> tuple[str, ...]:
    seen: set[str] = set()
    for item in items:
        if item in seen:
            raise ParameterError(f"parameter '{name}' lists {item!r} twice")
        seen.add(item)
    return tuple(items)


def parse_lead(value: Any) -> float | None:
    """``'auto'`` -> None, else seconds from 0 to 10 (a number or a numeric string)."""
    text = str(value).strip().lower()
    if text == "auto":
        return None
    try:
        lead = float(text)
    except ValueError:
        raise ParameterError(
            f"parameter 'request_lead_s' is {value!r}; expected 'auto' or seconds, e.g. '0.15'"
        ) from None
    if not (math.isfinite(lead) and 0.0 <= lead <= _MAX_LEAD_S):
        raise ParameterError(
            f"parameter 'request_lead_s' is {value!r}; expected 'auto' or seconds from 0 "
            f"to {_MAX_LEAD_S}"
        )
    return lead


# ---------------------------------------------------------------- the table
PARAMETERS: tuple[ParamSpec, ...] = (
    ParamSpec(
        "model",
        "string",
        "pi05",
        "Policy model ID.",
        choices=MODEL_IDS,
    ),
    ParamSpec(
        "policy_url",
        "string",
        "",
        "Server URL; '{model}' is replaced by the model ID. Empty: WALLE_URL from the "
        "environment or a .env file.",
        convert=_url,
    ),
    ParamSpec(
        "camera_map",
        "string",
        "",
        "Path of the camera map YAML (model camera key -> topic, see camera_map.md). "
        "Empty: the package's config/<model>_cameras.yaml.",
    ),
    ParamSpec(
        "prompt",
        "string",
        "",
        "Task instruction sent with every observation; the ~/prompt topic sets it too.",
        live=True,
    ),
    ParamSpec(
        "seed",
        "int",
        -1,
        "Sampling seed sent with every observation (same observation + seed -> same "
        "actions). -1: no seed, sampling is random.",
        live=True,
        minimum=-1,
        maximum=_MAX_SEED,
        convert=_negative_is_none,
    ),
    ParamSpec(
        "joint_states_topic",
        "string",
        "joint_states",
        "sensor_msgs/JointState input (relative: follows the node's namespace).",
        convert=_topic,
    ),
    ParamSpec(
        "state_joints",
        "string_array",
        None,
        "Joint names in the order the checkpoint expects its state vector. pi0/pi05: "
        "zero-padded to the server's action_dim. groot: split into the server's state "
        "groups by their widths, in metadata order.",
        required=True,
        convert=_names,
    ),
    ParamSpec(
        "output_names",
        "string_array",
        None,
        "Names of the output controllers; each has outputs.<name>.topic, .joints and "
        ".dims (pi0/pi05) or .action_key (+ optional .dims) (groot).",
        required=True,
        convert=_names,
    ),
    ParamSpec(
        "limits_mode",
        "string",
        "refuse",
        "What to do with a chunk outside the joint limits (position, velocity or acceleration "
        "anywhere on the published trajectory): 'refuse' it and hold (default), or 'clamp' "
        "it: positions clipped into the limits, motion slowed to the velocity limit.",
        live=True,
        choices=("refuse", "clamp"),
    ),
    ParamSpec(
        "control_hz",
        "double",
        0.0,
        "Rate the actions are meant for (Hz). 0: control_hz from the server metadata.",
        minimum=0.0,
        maximum=1000.0,
        convert=_zero_is_none,
    ),
    ParamSpec(
        "execute_horizon",
        "int",
        0,
        "Actions of each chunk executed before the next chunk takes over (at most the "
        "server's action_horizon). 0: half the server's action_horizon.",
        live=True,
        minimum=0,
        maximum=1000,
        convert=_zero_is_none,
    ),
    ParamSpec(
        "request_lead_s",
        "string_or_double",
        "auto",
        "How long before the switch time the next observation is sent (seconds, 0 to 10), "
        "or 'auto': p95 of measured latency plus a margin.",
        live=True,
        convert=_lead,
    ),
    ParamSpec(
        "request_mode",
        "string",
        "early",
        "'early': request the next chunk ahead of time (streaming). 'sync': ask only when "
        "the executed part is used up (openpi ActionChunkBroker behaviour, for comparison).",
        live=True,
        choices=("early", "sync"),
    ),
    ParamSpec(
        "blend_steps",
        "int",
        0,
        "Actions over which a new chunk is cross-faded from the old one (0 = off).",
        live=True,
        minimum=0,
        maximum=1000,
    ),
    ParamSpec(
        "dry_run",
        "bool",
        False,
        "Publish trajectories only on ~/preview, never to the controllers. Set true while "
        "running: the controllers get one hold at the commanded position, then nothing.",
        live=True,
    ),
    ParamSpec(
        "max_joint_step",
        "double",
        0.25,
        "Largest allowed distance (rad or m) between the measured joint state and the "
        "first point of a new chunk; a larger jump refuses the chunk.",
        live=True,
        minimum=0.001,
        maximum=10.0,
    ),
    ParamSpec(
        "sensor_timeout_s",
        "double",
        0.5,
        "A camera frame or joint state older than this (s) makes the observation stale: "
        "no request, hold position.",
        live=True,
        minimum=0.01,
        maximum=60.0,
    ),
    ParamSpec(
        "retry_delay_s",
        "double",
        0.25,
        "Wait after an error reply, a refused chunk or a failed request before the next "
        "request (s), so a misconfigured observation is not resent at the timer rate.",
        live=True,
        minimum=0.0,
        maximum=60.0,
    ),
    ParamSpec(
        "request_timeout_s",
        "double",
        0.0,
        "Longest a request may take (s); then the connection is dropped and reopened and "
        "the robot holds. 0: automatic, max(2 s, 10 x p99 of the measured latency), 30 s "
        "until the first reply.",
        live=True,
        minimum=0.0,
        maximum=600.0,
        convert=_zero_is_none,
    ),
    ParamSpec(
        "autostart",
        "bool",
        True,
        "Start commanding at once (else wait for ~/enable).",
    ),
    ParamSpec(
        "tick_hz",
        "double",
        100.0,
        "Tick rate (Hz) while a request is near (frames are read every tick then) and of "
        "retries while holding; otherwise the node ticks when a chunk is due, after each "
        "reply or connection event, and at least every 100 ms.",
        minimum=1.0,
        maximum=1000.0,
    ),
    ParamSpec(
        "image_encoding",
        "string",
        "raw",
        "Camera frames on the wire: 'raw' arrays or 'jpeg' bytes (pi0/pi05 only; about a "
        "twentieth of the bytes, see docs/network.md). Frames are fitted to the server's "
        "image_size first.",
        choices=("raw", "jpeg"),
    ),
    ParamSpec(
        "jpeg_quality",
        "int",
        90,
        "JPEG quality 1..100 for image_encoding 'jpeg'.",
        minimum=1,
        maximum=100,
    ),
    ParamSpec(
        "thread_priority",
        "int",
        0,
        "SCHED_FIFO priority 1..99 for every thread of the node's process, so other "
        "processes cannot delay an observation on its way to the wire; 0: normal "
        "scheduling. Needs CAP_SYS_NICE or an rtprio limit, else refused with a warning; "
        "keep it below the controller manager's (50). See docs/node.md.",
        minimum=0,
        maximum=MAX_PRIORITY,
    ),
    ParamSpec(
        "reconnect_max_backoff_s",
        "double",
        5.0,
        "Longest wait between reconnection attempts (s); the backoff doubles from 0.25 s. "
        "While it waits, the server's port is probed (a TCP connect every 0.25 s) and a "
        "server that is back is reconnected at once.",
        minimum=0.25,
        maximum=300.0,
    ),
) + ROBOT_DESCRIPTION_PARAMETERS

_BY_NAME = {spec.name: spec for spec in PARAMETERS}

#: Names of the parameters a ``ros2 param set`` changes while the node runs.
LIVE_PARAMETERS: tuple[str, ...] = tuple(spec.name for spec in PARAMETERS if spec.live)


def output_parameter_specs(name: str) -> tuple[ParamSpec, ...]:
    """The parameters of one output controller ``outputs.<name>.*`` (read-only)."""
    prefix = f"outputs.{name}."
    return (
        ParamSpec(
            prefix + "topic",
            "string",
            "",
            "JointTrajectory topic of this controller (relative: follows the node's "
            "namespace), e.g. arm_controller/joint_trajectory.",
        ),
        ParamSpec(
            prefix + "joints",
            "string_array",
            None,
            "Joint names this controller drives.",
            required=True,
        ),
        ParamSpec(
            prefix + "dims",
            "int_array",
            None,
            "Action dimensions driving the joints, in joint order (pi0/pi05: required, "
            "indices into the action vector; groot: indices within action_key's group, "
            "default all).",
            only_if_given=True,
        ),
        ParamSpec(
            prefix + "action_key",
            "string",
            "",
            "groot: the action group, e.g. action.gripper (required for groot).",
        ),
    )


def spec_for(name: str) -> ParamSpec | None:
    """The row of parameter ``name``, including per-output and per-joint ones."""
    if name in _BY_NAME:
        return _BY_NAME[name]
    if name.startswith("outputs.") and name.count(".") >= 2:
        output, _, field = name[len("outputs.") :].rpartition(".")
        return next(
            (s for s in output_parameter_specs(output) if s.name.endswith("." + field)), None
        )
    parts = limit_name(name)
    if parts is not None:
        return next(s for s in limit_parameter_specs([parts[0]]) if s.name == name)
    return None


# ---------------------------------------------------------------- the configuration
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
    policy_url: str | None
    camera_map: Path
    prompt: str
    seed: int | None
    joint_states_topic: str
    state_joints: tuple[str, ...]
    outputs: tuple[OutputSpec, ...]
    joint_limits: Mapping[str, JointLimit]
    limits_mode: str
    control_hz: float | None
    execute_horizon: int | None
    request_lead_s: float | None
    request_mode: str
    blend_steps: int
    dry_run: bool
    max_joint_step: float
    sensor_timeout_s: float
    retry_delay_s: float
    request_timeout_s: float | None
    autostart: bool
    tick_hz: float
    reconnect_max_backoff_s: float
    image_encoding: str = "raw"
    jpeg_quality: int = 90
    thread_priority: int = 0
    robot_description: str = ""
    robot_description_file: str = ""
    limit_params: Mapping[str, LimitParams] = dataclasses.field(default_factory=dict)
    robot: RobotDescription | None = None

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


def _output(values: Mapping[str, Any], name: str, model: str) -> OutputSpec:
    prefix = f"outputs.{name}."
    topic_spec, joints_spec, dims_spec, key_spec = output_parameter_specs(name)
    topic = topic_spec.check(values.get(topic_spec.name) or "")
    if not topic:
        raise ParameterError(f"output '{name}' needs parameter '{prefix}topic'")
    _topic(topic_spec, topic)
    joints = _names(joints_spec, joints_spec.check(values.get(joints_spec.name) or []))
    raw_dims = values.get(dims_spec.name)
    dims = tuple(dims_spec.check(raw_dims)) if raw_dims else None
    action_key = key_spec.check(values.get(key_spec.name) or "") or None
    groot = family_of(model) == "groot"
    if groot and action_key is None:
        raise ParameterError(
            f"output '{name}' needs parameter '{prefix}action_key' for model {model} "
            "(the action group, e.g. 'action.single_arm')"
        )
    if not groot and dims is None:
        raise ParameterError(
            f"output '{name}' needs parameter '{prefix}dims' for model {model} "
            "(indices into the action vector, one per joint)"
        )
    return OutputSpec(name, topic, joints, dims, action_key)


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
    model = fields["model"]
    outputs = tuple(_output(values, name, model) for name in fields.pop("output_names"))
    commanded = [joint for output in outputs for joint in output.joints]
    _unique("outputs.*.joints", commanded)
    robot = robot_description_from(fields["robot_description"], fields["robot_description_file"])
    limit_params = limit_params_from_values(values, commanded)
    camera_map = fields["camera_map"]
    fields["camera_map"] = (
        Path(camera_map).expanduser()
        if camera_map
        else default_config_dir() / f"{model}_cameras.yaml"
    )
    try:
        check_image_encoding(model, fields["image_encoding"], fields["jpeg_quality"])
    except ImageEncodingError as exc:
        raise ParameterError(f"parameter {exc}") from None
    fields["outputs"] = outputs
    fields["joint_limits"] = _resolve(commanded, limit_params, robot)
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
        if joint not in config.joint_limits:
            raise ParameterError(
                f"parameter '{name}': no output drives joint {joint!r}; limits are set for "
                f"{list(config.joint_limits)}"
            )
        spec = spec_for(name)
        assert spec is not None
        params = dict(config.limit_params)
        params[joint] = with_limit_change(
            params.get(joint, LimitParams()), field, spec.check(value)
        )
        limit = _resolve([joint], params, config.robot)[joint]
        return dataclasses.replace(
            config, joint_limits={**config.joint_limits, joint: limit}, limit_params=params
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
