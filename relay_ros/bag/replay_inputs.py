"""What ``relay-ros replay`` reads and checks before anything starts.

Every input error of a replay (a missing or malformed params file, an invalid
node parameter, a bag without a configured topic or with the wrong type, a bad
server URL) is found here, before a server, a node or a player starts:

- :func:`read_params_file` reads a ROS 2 params file without rclpy;
- :func:`parse_param_override` reads ``-p name:=value`` (ROS style);
- :func:`replay_parameters` combines the params file, ``-p`` overrides and what a
  replay forces (a relative ``camera_map`` of the params file is resolved against
  the params file's folder);
- :func:`node_config` resolves the node's configuration like policy_node does;
- :func:`required_topics` and :func:`read_bag_input` check the bag against it
  and read the recorded joint states (a corrupt file fails here);
  :func:`check_joint_names` checks every configured joint name against them;
- :func:`resolve_server_url` and :func:`default_output_path` settle the options.

:class:`ReplayError` lives here because these checks raise it first;
:mod:`relay_ros.bag.replay` re-exports it.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from websockets.exceptions import InvalidURI

from relay_ros.bag.reader import BagReader
from relay_ros.node.limit_params import limit_name
from relay_ros.node.node_config import config_from_parameters
from relay_ros.node.param_spec import flatten_parameters
from relay_ros.node.params import spec_for
from relay_ros.node.topic_names import expand_topic_name
from relay_ros.pipeline.camera_map import CameraEntry, camera_constraints, load_camera_map
from relay_ros.wire.env import parse_server_url, redact_url, resolve_url

__all__ = [
    "FORCED_PARAMETERS",
    "BagInput",
    "ReplayError",
    "camera_entries",
    "check_joint_names",
    "default_output_path",
    "given_parameters",
    "node_config",
    "parse_param_override",
    "read_bag_input",
    "read_params_file",
    "replay_parameters",
    "required_topics",
    "resolve_server_url",
    "robot_description_topic",
]

_CAMERA_TYPES = {"raw": "sensor_msgs/msg/Image", "compressed": "sensor_msgs/msg/CompressedImage"}
_JOINT_STATE_TYPE = "sensor_msgs/msg/JointState"
_URDF_TYPE = "std_msgs/msg/String"


#: Node parameters a replay always sets: bag time, no controller topics, configured and
#: active at start.
FORCED_PARAMETERS: dict[str, Any] = {"use_sim_time": True, "dry_run": True, "autostart": True}


class ReplayError(RuntimeError):
    """The replay cannot run (bad option, bag does not fit the configuration, no server)."""


def parse_param_override(text: str) -> tuple[str, Any]:
    """``name:=value`` (as ``ros2 run ... -p``) to ``(name, value)``; the value is YAML.

    ``seed:=3`` -> 3, ``prompt:="pick it up"`` -> str, ``state_joints:="[a, b]"`` -> list.

    Raises:
        ReplayError: no ``:=``, an empty name, or a value that is not YAML.
    """
    name, sep, raw = text.partition(":=")
    name = name.strip()
    if not sep or not name:
        raise ReplayError(f"parameter override {text!r} is not NAME:=VALUE (e.g. seed:=3)")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError as exc:
        detail = " ".join(str(exc).split())
        raise ReplayError(f"parameter override {text!r}: value is not YAML: {detail}") from None
    if isinstance(value, dict) or value is None:
        raise ReplayError(
            f"parameter override {text!r}: expected a number, string, bool or list, got {raw!r}"
        )
    return name, value


def replay_parameters(
    params_file: str | os.PathLike[str],
    file_params: Mapping[str, Any],
    overrides: Mapping[str, Any],
) -> dict[str, Any]:
    """The node parameters a replay sets on top of the params file.

    ``overrides`` (``-p`` or ``replay(overrides=...)``) win over the params file.
    A relative ``camera_map`` in the params file is resolved against the params
    file's folder (a relative one in ``overrides`` against the working directory);
    :data:`FORCED_PARAMETERS` are added.

    Raises:
        ReplayError: an override of a forced parameter or of ``policy_url`` (use
            ``--url``).
    """
    for name in overrides:
        if name in FORCED_PARAMETERS:
            raise ReplayError(
                f"parameter '{name}' cannot be overridden: a replay always runs with "
                f"{name}={str(FORCED_PARAMETERS[name]).lower()}"
            )
        if name == "policy_url":
            raise ReplayError(
                "parameter 'policy_url' cannot be overridden: choose the server with --url"
            )
    params = given_parameters(params_file, file_params, overrides)
    params.update(FORCED_PARAMETERS)
    return params


def given_parameters(
    params_file: str | os.PathLike[str],
    file_params: Mapping[str, Any],
    overrides: Mapping[str, Any],
) -> dict[str, Any]:
    """``overrides`` in their parameters' declared types, and the params file's
    ``camera_map`` resolved against the params file's folder (a relative one in
    ``overrides`` against the working directory): what a tool sets on top of the
    params file."""
    params: dict[str, Any] = {}
    camera_map = file_params.get("camera_map")
    if camera_map and not Path(str(camera_map)).expanduser().is_absolute():
        params["camera_map"] = str(Path(params_file).resolve().parent / str(camera_map))
    params.update({name: _typed(name, value) for name, value in overrides.items()})
    if params.get("camera_map"):
        params["camera_map"] = str(Path(str(params["camera_map"])).expanduser().resolve())
    return params


def read_params_file(
    path: str | os.PathLike[str], node_name: str = "policy_node"
) -> dict[str, Any]:
    """The ``ros__parameters`` of a ROS 2 params file that apply to ``node_name``.

    Sections ``/**``, ``**``, ``node_name`` and ``/node_name`` are merged in that
    order (later wins), like rcl does for one node.

    Raises:
        ReplayError: The file is missing or is not a params file.
    """
    p = Path(path)
    if not p.is_file():
        raise ReplayError(f"params file '{p}' does not exist")
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise ReplayError(f"params file '{p}' is not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise ReplayError(
            f"params file '{p}' is not a ROS 2 params file: expected "
            "'<node>: {ros__parameters: {...}}' at the top level"
        )
    merged: dict[str, Any] = {}
    for key in ("/**", "**", node_name, f"/{node_name}"):
        section = data.get(key)
        if isinstance(section, dict) and isinstance(section.get("ros__parameters"), dict):
            merged.update(flatten_parameters(section["ros__parameters"]))
    return merged


def default_output_path(bag: str | os.PathLike[str], directory: Path | None = None) -> Path:
    """``<bag name>_replay_<YYYYmmdd-HHMMSS>`` in ``directory`` (default: working directory).

    A counter is appended if that path exists (bags are never overwritten).
    """
    p = Path(bag)
    name = p.stem if p.suffix in (".mcap", ".db3") else p.name
    base = (directory or Path.cwd()) / f"{name}_replay_{datetime.now():%Y%m%d-%H%M%S}"
    path, n = base, 1
    while path.exists():
        n += 1
        path = base.with_name(f"{base.name}_{n}")
    return path


@dataclass
class BagInput:
    """What the replay needs from the input bag before anything starts."""

    start_ns: int
    end_ns: int
    topics: dict[str, int]
    types: dict[str, str]
    joint_times: np.ndarray  # (M,) bag time, absolute seconds
    joint_positions: dict[str, np.ndarray]  # joint -> (M,) positions, NaN where absent


def read_bag_input(bag: Path, required: Mapping[str, str], joint_topic: str) -> BagInput:
    """Open the bag, check the topics and types, read every joint state (and all data)."""
    joint_topic = expand_topic_name(joint_topic)
    with BagReader(bag) as reader:
        reader.require_topics(required)
        for topic, msgtype in required.items():
            actual = reader.topics[topic].msgtype
            if actual != msgtype:
                raise ReplayError(
                    f"bag '{bag}' records topic '{topic}' as {actual}; the configuration "
                    f"expects {msgtype}"
                )
        times: list[float] = []
        rows: list[dict[str, float]] = []
        # Read every played message once: a damaged data file fails here, not mid-replay.
        for message in reader.messages(list(required)):
            if message.topic != joint_topic:
                continue
            msg = reader.deserialize(message)
            times.append(message.timestamp_ns / 1e9)
            rows.append({n: float(v) for n, v in zip(msg.name, msg.position)})
        names = list(dict.fromkeys(n for row in rows for n in row))
        positions = {n: np.array([row.get(n, math.nan) for row in rows]) for n in names}
        return BagInput(
            start_ns=reader.start_ns,
            end_ns=reader.end_ns,
            topics={name: info.count for name, info in reader.topics.items()},
            types={name: info.msgtype for name, info in reader.topics.items()},
            joint_times=np.array(times),
            joint_positions=positions,
        )


def _typed(name: str, value: Any) -> Any:
    """``value`` in the parameter's declared type where YAML read it as another.

    ``-p control_hz:=50`` reads as an integer and ``-p prompt:=123`` as a number;
    rclpy refuses both for a declared double or string parameter, while a params
    file would write ``50.0`` and ``"123"``.
    """
    spec = spec_for(name)
    kind = spec.type if spec is not None else None
    is_int = isinstance(value, int) and not isinstance(value, bool)
    if kind in ("double", "string_or_double") and is_int:
        return float(value)
    if kind == "double_array" and isinstance(value, list):
        return [float(v) if isinstance(v, int) and not isinstance(v, bool) else v for v in value]
    if kind == "string" and isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    if kind == "string_array" and isinstance(value, list):
        return [v if isinstance(v, str) else str(v) for v in value]
    return value


def check_joint_names(
    bag: Path, config: Any, given: Mapping[str, Any], inputs: BagInput, joint_topic: str
) -> None:
    """Every joint the configuration names must be in the bag's joint states.

    Checked: ``state_joints``, ``outputs.<name>.joints`` and every
    ``joint_limits.<joint>.<field>`` in ``given`` (the params file and overrides).
    Joints the bag records but the configuration does not name are ignored.

    Raises:
        ReplayError: one line naming each unknown joint with where it is configured,
            and the joints the bag records.
    """
    recorded = set(inputs.joint_positions)
    unknown: dict[str, list[str]] = {}
    for joint in config.state_joints:
        if joint not in recorded:
            unknown.setdefault(joint, []).append("state_joints")
    for output in config.outputs:
        for joint in output.joints:
            if joint not in recorded:
                unknown.setdefault(joint, []).append(f"outputs.{output.name}.joints")
    for name in given:
        parts = limit_name(name)
        if parts is not None and parts[0] not in recorded:
            where = unknown.setdefault(parts[0], [])
            label = f"joint_limits.{parts[0]}.*"
            if label not in where:
                where.append(label)
    if unknown:
        listed = ", ".join(f"'{j}' ({', '.join(where)})" for j, where in unknown.items())
        raise ReplayError(
            f"bag '{bag}' records no joint {listed} on {joint_topic}; "
            f"its joints are {list(inputs.joint_positions)}"
        )


def node_config(file_params: Mapping[str, Any], overrides: Mapping[str, Any]) -> Any:
    """The node's :class:`~relay_ros.node.node_config.NodeConfig` for these parameters (no rclpy).

    The same resolution as policy_node: declared defaults, then the params file,
    then ``overrides``; per-output and per-joint parameters follow ``outputs``.

    Raises:
        ParameterError: A parameter is missing or invalid (the message names it).
    """
    return config_from_parameters({**file_params, **overrides})


def camera_entries(config: Any) -> list[CameraEntry]:
    """The camera map of ``config``, checked against its model as policy_node checks it."""
    allowed, max_cameras = camera_constraints(config.model)
    return load_camera_map(config.camera_map, allowed_keys=allowed, max_cameras=max_cameras)


def required_topics(config: Any) -> dict[str, str]:
    """Topic -> type the node subscribes to (cameras from the camera map, joint states)."""
    cameras = camera_entries(config)
    # Relative names resolve in the root namespace, where replay runs the node.
    required = {expand_topic_name(e.topic): _CAMERA_TYPES[e.transport] for e in cameras}
    required[expand_topic_name(config.joint_states_topic)] = _JOINT_STATE_TYPE
    return required


def robot_description_topic(bag: Path, config: Any) -> str | None:
    """The bag's URDF topic to play when the configuration takes limits from it.

    A configuration whose joint limits need the robot's URDF from
    ``robot_description_topic`` (no ``robot_description(_file)``, no
    ``joint_limits.<joint>.*`` for some joint) gets it from the bag, which then must
    record that topic (``std_msgs/msg/String``); None when the limits are complete
    without it.

    Raises:
        ReplayError: the bag does not record it: before anything starts, instead of
            a replay that holds from start to end (the message says what to pass).
    """
    if config.limits_problem is None:
        return None
    topic = expand_topic_name(config.robot_description_topic)
    with BagReader(bag) as reader:
        info = reader.topics.get(topic)
    if info is not None and info.msgtype == _URDF_TYPE:
        return topic
    recorded = "does not record it" if info is None else f"records it as {info.msgtype}"
    raise ReplayError(
        f"{config.limits_problem}; the configuration takes them from the URDF on {topic}, "
        f"and bag '{bag}' {recorded}: pass the robot's URDF with "
        "-p robot_description_file:=/path/to/robot.urdf (or record "
        f"{topic} with the other topics)"
    )


def resolve_server_url(url: str | None, model: str) -> tuple[str | None, str]:
    """(url for the node or None to start the reference server, description to show).

    The URL (``--url``'s, or ``WALLE_URL``'s for ``--url`` alone) is checked as every
    server URL is (:func:`~relay_ros.wire.env.parse_server_url`); the description
    has its secrets redacted.

    Raises:
        ReplayError: ``WALLE_URL`` is not set, or the URL is not a ws:// or wss:// URL
            (the message shows it redacted).
    """
    if url is None:
        return None, "reference server"
    source = "--url"
    if url in ("", "env", "WALLE_URL"):
        source = "WALLE_URL"
        try:
            url = resolve_url(model)
        except KeyError:
            raise ReplayError(
                "--url without a value uses WALLE_URL, but WALLE_URL is not set in the "
                "environment or a .env file; give the URL, e.g. --url ws://host:8000/{model}"
            ) from None
    filled = url.replace("{model}", model)
    try:
        parse_server_url(filled)
    except InvalidURI as exc:
        raise ReplayError(f"{source}: {exc}") from None
    return url, redact_url(filled)
