"""Every policy_node parameter in one place, and the validated configuration built from them.

The node declares exactly the parameters listed in :data:`PARAMETERS` (with their
descriptions, so ``ros2 param describe`` is useful), plus the per-output and
per-joint parameters whose names depend on other parameters (see
:func:`output_parameter_specs` and :func:`limit_parameter_specs`). Turning the raw
values into a :class:`NodeConfig` is plain Python, so it is tested without rclpy
and every mistake a robot team can make in a YAML file gets a sentence that names
the parameter, the bad value and what was expected.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from relay_ros.models import MODEL_IDS
from relay_ros.paths import config_dir
from relay_ros.pipeline.image_encoding import ImageEncodingError, check_image_encoding

__all__ = [
    "MODELS",
    "PARAMETERS",
    "NodeConfig",
    "OutputSpec",
    "ParamSpec",
    "ParameterError",
    "build_config",
    "limit_parameter_specs",
    "output_parameter_specs",
]

MODELS = MODEL_IDS


class ParameterError(ValueError):
    """A node parameter is missing or has a value the node cannot use."""


@dataclass(frozen=True)
class ParamSpec:
    """One ROS parameter: name, type name, default (None = required), description."""

    name: str
    # string | int | double | bool | string_array | int_array | double_array, or
    # string_or_double (dynamically typed, e.g. request_lead_s: auto | 0.15)
    type: str
    default: Any
    description: str


PARAMETERS: tuple[ParamSpec, ...] = (
    ParamSpec("model", "string", "pi05", "Policy model ID: pi05, pi0 or groot."),
    ParamSpec(
        "policy_url",
        "string",
        "",
        "Server URL; '{model}' is replaced by the model ID. Empty: WALLE_URL from the "
        "environment or a .env file.",
    ),
    ParamSpec(
        "camera_map",
        "string",
        "",
        "Path of the camera map YAML (model camera key -> topic). Empty: the package's "
        "config/<model>_cameras.yaml.",
    ),
    ParamSpec("prompt", "string", "", "Task instruction sent with every observation."),
    ParamSpec(
        "seed",
        "int",
        -1,
        "Sampling seed sent with every observation (same observation + seed -> same "
        "actions). -1: no seed, sampling is random.",
    ),
    ParamSpec("joint_states_topic", "string", "/joint_states", "sensor_msgs/JointState input."),
    ParamSpec(
        "state_joints",
        "string_array",
        None,
        "Joint names in the order the checkpoint expects its state vector. pi0/pi05: "
        "zero-padded to the server's action_dim. groot: split into the server's state "
        "groups by their widths, in metadata order.",
    ),
    ParamSpec(
        "outputs",
        "string_array",
        None,
        "Names of the output controllers; each has outputs.<name>.topic, .joints and "
        ".dims (pi0/pi05) or .action_key (+ optional .dims) (groot).",
    ),
    ParamSpec(
        "limits_mode",
        "string",
        "refuse",
        "What to do with actions outside joint_limits: 'refuse' the whole chunk and hold "
        "(default), or 'clamp' them into the limits.",
    ),
    ParamSpec(
        "control_hz",
        "double",
        0.0,
        "Rate the actions are meant for (Hz). 0: control_hz from the server metadata.",
    ),
    ParamSpec(
        "execute_horizon",
        "int",
        0,
        "Actions of each chunk executed before the next chunk takes over (1..H). "
        "0: half the server's action_horizon.",
    ),
    ParamSpec(
        "request_lead_s",
        "string_or_double",
        "auto",
        "How long before the switch time the next observation is sent (seconds), or "
        "'auto': p95 of measured latency plus a margin.",
    ),
    ParamSpec(
        "request_mode",
        "string",
        "early",
        "'early': request the next chunk ahead of time (streaming). 'sync': ask only when "
        "the executed part is used up (openpi ActionChunkBroker behaviour, for comparison).",
    ),
    ParamSpec(
        "blend_steps",
        "int",
        0,
        "Actions over which a new chunk is cross-faded from the old one (0 = off).",
    ),
    ParamSpec(
        "dry_run",
        "bool",
        False,
        "Publish trajectories only on ~/preview, never to the controllers.",
    ),
    ParamSpec(
        "max_joint_step",
        "double",
        0.25,
        "Largest allowed distance (rad or m) between the measured joint state and the "
        "first point of a new chunk; a larger jump refuses the chunk.",
    ),
    ParamSpec(
        "sensor_timeout_s",
        "double",
        0.5,
        "A camera frame or joint state older than this makes the observation stale: no "
        "request, hold position.",
    ),
    ParamSpec(
        "retry_delay_s",
        "double",
        0.25,
        "Wait after an error reply, a refused chunk or a failed request before the next "
        "request (s), so a misconfigured observation is not resent at the timer rate.",
    ),
    ParamSpec(
        "request_timeout_s",
        "double",
        0.0,
        "Longest a request may take (s); then the connection is dropped and reopened and "
        "the robot holds. 0 or negative: automatic, max(2 s, 10 x p99 of the measured "
        "latency), 30 s until the first reply.",
    ),
    ParamSpec(
        "image_encoding",
        "string",
        "raw",
        "Camera frames on the wire: 'raw' arrays or 'jpeg' bytes (pi0/pi05 only; about a "
        "twentieth of the bytes, see docs/network.md). Frames are fitted to the server's "
        "image_size first.",
    ),
    ParamSpec("jpeg_quality", "int", 90, "JPEG quality 1..100 for image_encoding 'jpeg'."),
    ParamSpec("autostart", "bool", True, "Start commanding at once (else wait for ~/enable)."),
    ParamSpec("tick_hz", "double", 100.0, "Rate of the scheduling timer (Hz)."),
    ParamSpec(
        "reconnect_max_backoff_s",
        "double",
        5.0,
        "Longest wait between reconnection attempts (s); the backoff doubles from 0.25 s.",
    ),
)

_BY_NAME = {spec.name: spec for spec in PARAMETERS}


def output_parameter_specs(name: str) -> tuple[ParamSpec, ...]:
    """The parameters of one output controller ``outputs.<name>.*``."""
    prefix = f"outputs.{name}."
    return (
        ParamSpec(prefix + "topic", "string", "", "JointTrajectory topic of this controller."),
        ParamSpec(prefix + "joints", "string_array", None, "Joint names this controller drives."),
        ParamSpec(
            prefix + "dims",
            "int_array",
            None,
            "Action dimensions driving the joints, in joint order (pi0/pi05: indices into "
            "the action vector; groot: indices within action_key's group, default all).",
        ),
        ParamSpec(
            prefix + "action_key", "string", "", "groot: the action group, e.g. action.gripper."
        ),
    )


def limit_parameter_specs(joints: Sequence[str]) -> tuple[ParamSpec, ...]:
    """One ``joint_limits.<joint>`` = [lower, upper] parameter per commanded joint."""
    return tuple(
        ParamSpec(
            f"joint_limits.{joint}",
            "double_array",
            None,
            f"[lower, upper] position limits of {joint}; every commanded joint needs one.",
        )
        for joint in joints
    )


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
    """Validated policy_node settings. Values that need the server metadata stay optional."""

    model: str
    policy_url: str | None
    camera_map: Path
    prompt: str
    seed: int | None
    joint_states_topic: str
    state_joints: tuple[str, ...]
    outputs: tuple[OutputSpec, ...]
    joint_limits: Mapping[str, tuple[float, float]]
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

    @property
    def commanded_joints(self) -> tuple[str, ...]:
        """Every joint some output drives, in output order."""
        return tuple(joint for output in self.outputs for joint in output.joints)


def _value(values: Mapping[str, Any], name: str) -> Any:
    """The parameter's value, or its declared default when unset."""
    value = values.get(name)
    return _BY_NAME[name].default if value is None else value


def _need(values: Mapping[str, Any], name: str) -> Any:
    value = values.get(name)
    if value is None or value == "" or (isinstance(value, (list, tuple)) and not value):
        spec = _BY_NAME.get(name)
        hint = f" ({spec.description})" if spec else ""
        raise ParameterError(f"parameter '{name}' is required{hint}")
    return value


def _positive(name: str, value: float) -> float:
    if not math.isfinite(value) or value <= 0:
        raise ParameterError(f"parameter '{name}' must be a positive number, got {value!r}")
    return float(value)


def _non_negative(name: str, value: float) -> float:
    if not math.isfinite(value) or value < 0:
        raise ParameterError(f"parameter '{name}' must be >= 0 seconds, got {value!r}")
    return float(value)


def _timeout_or_auto(value: float) -> float | None:
    """``request_timeout_s``: seconds, or None (automatic) for 0 or less."""
    if math.isnan(value) or math.isinf(value):
        raise ParameterError(
            f"parameter 'request_timeout_s' is {value!r}; expected seconds, or 0 for automatic"
        )
    return value if value > 0 else None


def _choice(name: str, value: str, allowed: Sequence[str]) -> str:
    if value not in allowed:
        raise ParameterError(f"parameter '{name}' is {value!r}; expected one of {list(allowed)}")
    return value


def _unique(name: str, items: Sequence[str]) -> tuple[str, ...]:
    seen: set[str] = set()
    for item in items:
        if item in seen:
            raise ParameterError(f"parameter '{name}' lists {item!r} twice")
        seen.add(item)
    return tuple(items)


def parse_lead(value: str) -> float | None:
    """``'auto'`` -> None, else a non-negative number of seconds."""
    text = str(value).strip().lower()
    if text == "auto":
        return None
    try:
        lead = float(text)
    except ValueError:
        raise ParameterError(
            f"parameter 'request_lead_s' is {value!r}; expected 'auto' or seconds, e.g. '0.15'"
        ) from None
    if not math.isfinite(lead) or lead < 0:
        raise ParameterError(f"parameter 'request_lead_s' must be >= 0 seconds, got {value!r}")
    return lead


def build_config(
    values: Mapping[str, Any],
    *,
    default_config_dir: Callable[[], Path] = config_dir,
) -> NodeConfig:
    """Validate raw parameter values (name -> value, unset = None) into a NodeConfig.

    ``values`` holds the :data:`PARAMETERS`, the ``outputs.<name>.*`` parameters of
    every listed output and ``joint_limits.<joint>`` of every commanded joint.
    """
    model = _choice("model", str(_value(values, "model")), MODELS)
    state_joints = _unique("state_joints", list(_need(values, "state_joints")))
    output_names = _unique("outputs", list(_need(values, "outputs")))

    outputs = []
    for name in output_names:
        prefix = f"outputs.{name}."
        topic = str(values.get(prefix + "topic") or "")
        if not topic:
            raise ParameterError(f"output '{name}' needs parameter '{prefix}topic'")
        joints = _unique(prefix + "joints", list(_need(values, prefix + "joints")))
        dims_value = values.get(prefix + "dims")
        dims = tuple(int(d) for d in dims_value) if dims_value else None
        action_key = str(values.get(prefix + "action_key") or "") or None
        if model == "groot" and action_key is None:
            raise ParameterError(
                f"output '{name}' needs parameter '{prefix}action_key' for model groot "
                "(the action group, e.g. 'action.single_arm')"
            )
        if model != "groot" and dims is None:
            raise ParameterError(
                f"output '{name}' needs parameter '{prefix}dims' for model {model} "
                "(indices into the action vector, one per joint)"
            )
        outputs.append(OutputSpec(name, topic, joints, dims, action_key))

    commanded = [joint for output in outputs for joint in output.joints]
    _unique("outputs.*.joints", commanded)
    limits: dict[str, tuple[float, float]] = {}
    missing = []
    for joint in commanded:
        pair = values.get(f"joint_limits.{joint}")
        if pair is None or len(pair) == 0:
            missing.append(joint)
            continue
        if len(pair) != 2:
            raise ParameterError(
                f"parameter 'joint_limits.{joint}' is {list(pair)!r}; expected [lower, upper]"
            )
        lower, upper = float(pair[0]), float(pair[1])
        if not (math.isfinite(lower) and math.isfinite(upper) and lower < upper):
            raise ParameterError(
                f"parameter 'joint_limits.{joint}' is {list(pair)!r}; expected finite lower < upper"
            )
        limits[joint] = (lower, upper)
    if missing:
        raise ParameterError(
            f"joints {missing} have no 'joint_limits.<joint>' parameter; every commanded "
            "joint needs [lower, upper] limits"
        )

    camera_map = str(_value(values, "camera_map"))
    camera_path = Path(camera_map) if camera_map else default_config_dir() / f"{model}_cameras.yaml"

    control_hz = float(_value(values, "control_hz"))
    execute_horizon = int(_value(values, "execute_horizon"))
    if execute_horizon < 0:
        raise ParameterError(
            f"parameter 'execute_horizon' must be >= 1 (0 = half the horizon), "
            f"got {execute_horizon}"
        )
    blend_steps = int(_value(values, "blend_steps"))
    if blend_steps < 0:
        raise ParameterError(f"parameter 'blend_steps' must be >= 0, got {blend_steps}")
    seed = int(_value(values, "seed"))
    image_encoding = str(_value(values, "image_encoding"))
    jpeg_quality = _value(values, "jpeg_quality")
    try:
        check_image_encoding(model, image_encoding, jpeg_quality)
    except ImageEncodingError as exc:
        raise ParameterError(f"parameter {exc}") from None

    return NodeConfig(
        model=model,
        policy_url=str(_value(values, "policy_url")) or None,
        camera_map=camera_path,
        prompt=str(_value(values, "prompt")),
        seed=None if seed < 0 else seed,
        joint_states_topic=str(_value(values, "joint_states_topic")),
        state_joints=state_joints,
        outputs=tuple(outputs),
        joint_limits=limits,
        limits_mode=_choice("limits_mode", str(_value(values, "limits_mode")), ("refuse", "clamp")),
        control_hz=None if control_hz == 0 else _positive("control_hz", control_hz),
        execute_horizon=execute_horizon or None,
        request_lead_s=parse_lead(str(_value(values, "request_lead_s"))),
        request_mode=_choice(
            "request_mode", str(_value(values, "request_mode")), ("early", "sync")
        ),
        blend_steps=blend_steps,
        dry_run=bool(_value(values, "dry_run")),
        max_joint_step=_positive("max_joint_step", float(_value(values, "max_joint_step"))),
        sensor_timeout_s=_positive("sensor_timeout_s", float(_value(values, "sensor_timeout_s"))),
        retry_delay_s=_non_negative("retry_delay_s", float(_value(values, "retry_delay_s"))),
        request_timeout_s=_timeout_or_auto(float(_value(values, "request_timeout_s"))),
        autostart=bool(_value(values, "autostart")),
        tick_hz=_positive("tick_hz", float(_value(values, "tick_hz"))),
        reconnect_max_backoff_s=_positive(
            "reconnect_max_backoff_s", float(_value(values, "reconnect_max_backoff_s"))
        ),
        image_encoding=image_encoding,
        jpeg_quality=int(jpeg_quality),
    )
