"""Every policy_node parameter in one table, each row with its validator.

Each :class:`~relay_ros.node.param_spec.ParamSpec` of :data:`PARAMETERS` holds what
ROS needs to declare the parameter (type, default, description, range, read-only
flag) and the rule that turns a raw value into the
:class:`~relay_ros.node.node_config.NodeConfig` field of the same name. The names of
the per-output and per-joint parameters depend on other parameters' values
(``outputs.<name>.topic``, ``joint_limits.<joint>.*``): :func:`output_parameter_specs`
and :func:`~relay_ros.node.limit_params.limit_parameter_specs` build those rows, and
:func:`spec_for` finds the row of any name.

Which parameters change live is not said here: a row is live when the streaming core
changes its setting live (:data:`relay_ros.pipeline.settings.LIVE_SETTINGS`), the
others are read-only (read at start only).

One table serves everyone: the node declares exactly these parameters
(:mod:`relay_ros.node.ros_params`), the configuration is built and changed live
with their validators (:mod:`relay_ros.node.node_config`), and the table in
docs/node.md and ``policy_node --help`` are rendered from it
(:mod:`relay_ros.node.params_doc`). Plain Python (no rclpy).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from relay_ros.models import MODEL_IDS
from relay_ros.node.limit_params import (
    ROBOT_DESCRIPTION_PARAMETERS,
    limit_name,
    limit_parameter_specs,
)
from relay_ros.node.param_spec import ParameterError, ParamSpec
from relay_ros.node.thread_priority import MAX_PRIORITY
from relay_ros.pipeline.ramp_in import DEFAULT_RAMP_IN_S, MAX_RAMP_IN_S
from relay_ros.pipeline.settings import LIVE_SETTINGS
from relay_ros.pipeline.smoothing import SMOOTHING_CHOICES

__all__ = [
    "LIVE_PARAMETERS",
    "PARAMETERS",
    "check_names",
    "check_topic",
    "expected_value",
    "output_parameter_specs",
    "parse_lead",
    "spec_for",
    "unique_names",
]

_MAX_SEED = 2**31 - 1
_MAX_LEAD_S = 10.0


# ---------------------------------------------------------------- converters
def _zero_is_none(spec: ParamSpec, value: Any) -> Any:
    return None if value == 0 else value


def _negative_is_none(spec: ParamSpec, value: int) -> int | None:
    return None if value < 0 else value


def _url(spec: ParamSpec, value: str) -> str | None:
    if value and not value.startswith(("ws://", "wss://")):
        raise ParameterError(
            f"parameter '{spec.name}' is {value!r}; expected a ws:// or wss:// URL, "
            "e.g. ws://127.0.0.1:8000/{model}"
        )
    return value or None


def _layout(spec: ParamSpec, value: str) -> str:
    if value != value.strip():
        raise ParameterError(
            f"parameter '{spec.name}' is {value!r}; expected a layout name or file without spaces "
            "around it"
        )
    return value


def _lora(spec: ParamSpec, value: str) -> str:
    if value != value.strip() or any(ch in value for ch in "\r\n\t"):
        raise ParameterError(
            f"parameter '{spec.name}' is {value!r}; expected an adapter name as the server "
            "lists it in lora_adapters (no surrounding spaces), or '' for the base model"
        )
    return value


def check_topic(spec: ParamSpec, value: str) -> str:
    """``value`` if it is a topic name without spaces."""
    if not value or any(ch.isspace() for ch in value):
        raise ParameterError(
            f"parameter '{spec.name}' is {value!r}; expected a topic name without spaces, "
            "e.g. 'joint_states'"
        )
    return value


def _optional_topic(spec: ParamSpec, value: str) -> str:
    """``value`` stripped: empty (off), or a topic name without spaces."""
    value = value.strip()
    return check_topic(spec, value) if value else ""


def check_names(spec: ParamSpec, value: list[str]) -> tuple[str, ...]:
    """``value`` as a tuple if it is a non-empty list without repeats."""
    if not value:
        raise ParameterError(f"parameter '{spec.name}' is required ({spec.description})")
    return unique_names(spec.name, value)


def _lead(spec: ParamSpec, value: Any) -> float | None:
    return parse_lead(value)


def _directory(spec: ParamSpec, value: str) -> Path | None:
    return Path(value).expanduser() if value else None


def unique_names(name: str, items: Sequence[str]) -> tuple[str, ...]:
    """``items`` as a tuple; an item listed twice is refused, naming parameter ``name``."""
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
_ROWS: tuple[ParamSpec, ...] = (
    ParamSpec(
        "model",
        "string",
        "pi05",
        "Policy model ID.",
        choices=MODEL_IDS,
    ),
    ParamSpec(
        "layout",
        "string",
        "",
        "Observation layout of a stock openpi server: a shipped name (droid, aloha, "
        "libero) or a layout YAML file (docs/camera_map.md). Empty: the model's own "
        "format (the seeds' pi0/pi05 or GR00T observation).",
        convert=_layout,
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
    ),
    ParamSpec(
        "seed",
        "int",
        -1,
        "Sampling seed sent with every observation (same observation + seed -> same "
        "actions). -1: no seed, sampling is random.",
        minimum=-1,
        maximum=_MAX_SEED,
        convert=_negative_is_none,
    ),
    ParamSpec(
        "lora",
        "string",
        "",
        "LoRA adapter the server runs for this node's observations (sent as "
        "sampling_params.lora); it must be one of the server's lora_adapters, else the "
        "node holds. Empty: the base model. A change is a new episode.",
        convert=_lora,
    ),
    ParamSpec(
        "lora_scale",
        "double",
        1.0,
        "Strength of the LoRA adapter (sent as {name, scale} when not 1.0). A change is "
        "a new episode.",
        minimum=0.0,
        maximum=10.0,
    ),
    ParamSpec(
        "joint_states_topic",
        "string",
        "joint_states",
        "sensor_msgs/JointState input (relative: follows the node's namespace).",
        convert=check_topic,
    ),
    ParamSpec(
        "state_joints",
        "string_array",
        None,
        "Joint names in the order the checkpoint expects its state vector. pi0/pi05: "
        "zero-padded to the server's action_dim. groot: split into the server's state "
        "groups by their widths, in metadata order.",
        required=True,
        convert=check_names,
    ),
    ParamSpec(
        "output_names",
        "string_array",
        None,
        "Names of the output controllers; each has outputs.<name>.topic, .joints and "
        ".dims (pi0/pi05) or .action_key (+ optional .dims) (groot).",
        required=True,
        convert=check_names,
    ),
    ParamSpec(
        "limits_mode",
        "string",
        "refuse",
        "What to do with a chunk outside the joint limits (position, velocity or acceleration "
        "anywhere on the published trajectory): 'refuse' it and hold (default), or 'clamp' "
        "it: positions clipped into the limits, motion slowed to the velocity limit.",
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
        "server's action_horizon). 0: automatic, from the measured latency (about one "
        "latency's worth of actions, 4 to half the server's action_horizon; "
        "docs/streaming.md).",
        minimum=0,
        maximum=1000,
        convert=_zero_is_none,
    ),
    ParamSpec(
        "request_lead_s",
        "string_or_double",
        "auto",
        "How long before the switch time the next observation is sent (seconds, 0 to 10), "
        "or 'auto': the median measured latency (docs/streaming.md).",
        convert=_lead,
    ),
    ParamSpec(
        "request_mode",
        "string",
        "early",
        "'early': request the next chunk ahead of time (streaming). 'sync': ask only when "
        "the executed part is used up (openpi ActionChunkBroker behaviour, for comparison).",
        choices=("early", "sync"),
    ),
    ParamSpec(
        "smoothing",
        "string",
        "auto",
        "How a new chunk joins the running one: 'auto' (what measured best: the splice, on "
        "servers with and without action_prefix), 'splice' (from the commanded position, "
        "velocity and acceleration into the new chunk, within the joint limits), 'prefix' "
        "(the server continues the committed actions; refused unless it advertises "
        "action_prefix), 'none', or the averages 'crossfade' (blend_steps points), "
        "'lerobot_average', 'act_ensemble' (docs/streaming.md).",
        choices=SMOOTHING_CHOICES,
    ),
    ParamSpec(
        "blend_steps",
        "int",
        0,
        "Points over which smoothing 'crossfade' fades from the old chunk to the new "
        "(0: half the execute horizon); only with smoothing 'crossfade'.",
        minimum=0,
        maximum=1000,
    ),
    ParamSpec(
        "dry_run",
        "bool",
        False,
        "Publish trajectories only on ~/preview, never to the controllers. Set true while "
        "running: the controllers get one hold from the commanded state, then nothing.",
    ),
    ParamSpec(
        "max_joint_step",
        "double",
        0.25,
        "Largest allowed distance (rad or m) between the measured joint state and the "
        "first point of a new chunk; a larger jump refuses the chunk.",
        minimum=0.001,
        maximum=10.0,
    ),
    ParamSpec(
        "interpolate_from_desired_state",
        "bool",
        True,
        "Set it as your joint_trajectory_controllers have it (Humble: open_loop_control). "
        "true (recommended): a new trajectory starts from the last command, so chunks and "
        "holds are checked from the commanded state however the arm lags; false (JTC's "
        "default): from the measured state, so they are checked from where the arm is.",
    ),
    ParamSpec(
        "max_tracking_error",
        "double",
        0.25,
        "Largest distance (rad or m) between a joint's measured position and what it was "
        "commanded when measured, for the arm to count as following; beyond it (stuck, "
        "stopped, e-stopped) chunks are refused and the hold stops where the arm is.",
        minimum=0.001,
        maximum=10.0,
    ),
    ParamSpec(
        "sensor_timeout_s",
        "double",
        0.5,
        "A camera frame or joint state older than this (s) makes the observation stale: "
        "no request, hold position.",
        minimum=0.01,
        maximum=60.0,
    ),
    ParamSpec(
        "retry_delay_s",
        "double",
        0.25,
        "Wait after an error reply, a refused chunk or a failed request before the next "
        "request (s), so a misconfigured observation is not resent at the timer rate.",
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
        minimum=0.0,
        maximum=600.0,
        convert=_zero_is_none,
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
    # ---- operator control: the lifecycle and the dead-man switch (docs/node.md)
    ParamSpec(
        "autostart",
        "bool",
        True,
        "Configure and activate the node at start (the one-command launch, as Nav2's "
        "lifecycle_manager autostart). false: it starts unconfigured and waits for "
        "'ros2 lifecycle set <node> configure', then 'activate'.",
    ),
    ParamSpec(
        "deadman_topic",
        "string",
        "",
        "std_msgs/Bool topic of a dead-man switch (e.g. a joystick button; relative: "
        "follows the node's namespace): the node commands only while it brings true at "
        "least every deadman_timeout_s, else it holds and says why. Empty: no dead-man "
        "switch.",
        convert=_optional_topic,
    ),
    ParamSpec(
        "deadman_timeout_s",
        "double",
        0.5,
        "How long one true on deadman_topic lets the node command (s): a released or "
        "silent switch holds the robot within this time plus one tick.",
        minimum=0.01,
        maximum=10.0,
    ),
    ParamSpec(
        "ramp_in_s",
        "double",
        DEFAULT_RAMP_IN_S,
        "Gentle start (s): after activation, ~/enable true, the dead-man switch pressed "
        "again or any hold, the first motion runs from rest to the chunks' full speed "
        "over this long (a constant acceleration; each start costs half of it). 0: off, "
        "the first chunk starts at full speed. A change applies from the next start.",
        minimum=0.0,
        maximum=MAX_RAMP_IN_S,
    ),
) + ROBOT_DESCRIPTION_PARAMETERS

#: Recording episodes as LeRobot datasets (relay_ros.node.episode_recording,
#: docs/recording.md); all read at start.
_RECORDING_ROWS: tuple[ParamSpec, ...] = (
    ParamSpec(
        "record_dir",
        "string",
        "",
        "Directory of the LeRobot v3.0 dataset every episode is recorded into (created if "
        "missing, appended to when it holds episodes of the same layout; docs/recording.md). "
        "An episode ends on ~/reset, ~/enable false, deactivate, ~/mark_episode or ~/end_episode. "
        "Empty: no recording.",
        convert=_directory,
    ),
    ParamSpec(
        "record_fps",
        "int",
        15,
        "Frames recorded per second: each camera's newest frame as the model is sent it, "
        "the state and the commanded position at each frame's time.",
        minimum=1,
        maximum=120,
    ),
    ParamSpec(
        "record_video_codec",
        "string",
        "libsvtav1",
        "Codec of the recorded camera videos: 'libsvtav1' (LeRobot's default: AV1, "
        "yuv420p, a keyframe every 2 frames, crf 30), 'h264' or 'hevc'; refused at start "
        "when the installed PyAV cannot encode it.",
        choices=("libsvtav1", "h264", "hevc"),
    ),
    ParamSpec(
        "record_queue_frames",
        "int",
        30,
        "Recorded frames that may wait for the encoder; beyond that frames are dropped "
        "(counted, logged, on /diagnostics), never the control loop.",
        minimum=1,
        maximum=1000,
    ),
    ParamSpec(
        "record_robot_type",
        "string",
        "",
        "robot_type written into the dataset's meta/info.json (e.g. 'so100'); empty: none.",
    ),
)


def _live_as_the_core_says(spec: ParamSpec) -> ParamSpec:
    """``spec`` live exactly when the streaming core changes its setting live."""
    live = spec.name in LIVE_SETTINGS
    if spec.live and not live:
        raise ValueError(
            f"parameter '{spec.name}' is declared live, but the streaming core does not "
            "change it live: add it to relay_ros.pipeline.settings.LiveSettings"
        )
    return dataclasses.replace(spec, live=live)


#: The parameters whose names do not depend on others' values, in declaration order.
PARAMETERS: tuple[ParamSpec, ...] = tuple(
    _live_as_the_core_says(spec) for spec in _ROWS + _RECORDING_ROWS
)

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


def expected_value(name: str) -> str | None:
    """What parameter ``name`` takes, in words (None: not a policy_node parameter)."""
    spec = spec_for(name)
    return None if spec is None else spec.expected()
