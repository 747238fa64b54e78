"""The plan of a replay: every option, parameter and bag check settled before anything starts.

:func:`plan_replay` runs the checks of :mod:`relay_ros.bag.replay_inputs` in
order (options, params file and ``-p`` overrides, node configuration, the bag's
topics and types, the configured joint names, server URL, output paths) and
returns a :class:`ReplayPlan`, so a bad input stops the replay before a server,
a node or a player starts. Plain Python, no rclpy.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from relay_ros.bag.reader import SUPPORTED_STORAGES, BagReader
from relay_ros.bag.replay_inputs import (
    BagInput,
    ReplayError,
    check_joint_names,
    default_output_path,
    node_config,
    read_bag_input,
    read_params_file,
    replay_parameters,
    required_topics,
    resolve_server_url,
    robot_description_topic,
)
from relay_ros.node.topic_names import expand_topic_name
from relay_ros.paths import config_dir
from relay_ros.server.recorded import RecordedPolicyError, policy_for_config

__all__ = ["POLICIES", "ReplayPlan", "plan_replay"]

#: Policies of the reference server a replay can run; the first is the default.
POLICIES = ("recorded", "synthetic")


@dataclass(frozen=True)
class ReplayPlan:
    """Everything :func:`replay` settled before anything starts."""

    bag: Path
    params_file: Path
    params: dict[str, Any]
    config: Any
    required: dict[str, str]
    #: Played topics offered transient-local (the URDF, as robot_state_publisher does).
    latched: tuple[str, ...]
    inputs: BagInput
    node_url: str | None
    url_text: str
    output: Path
    rate: float
    seed: int | None
    model: str
    storage: str
    plot: Path | None
    policy: str | None
    save_observations: Path | None
    recorded_policy: Any
    node_name: str
    connect_timeout_s: float
    clock_hz: float


def plan_replay(
    bag: Path,
    *,
    params_file: str | os.PathLike[str] | None,
    camera_map: str | os.PathLike[str] | None,
    output: str | os.PathLike[str] | None,
    rate: float,
    seed: int | None,
    model: str | None,
    url: str | None,
    policy: str | None,
    storage: str,
    plot: str | os.PathLike[str] | None,
    save_observations: str | os.PathLike[str] | None,
    overrides: Mapping[str, Any],
    node_name: str,
    connect_timeout_s: float,
    clock_hz: float,
) -> ReplayPlan:
    """Check every input (options, params, bag, joints) before a server or node starts."""
    if not (isinstance(rate, (int, float)) and math.isfinite(rate) and rate > 0):
        raise ReplayError(f"rate {rate!r} must be a finite number > 0")
    if storage not in SUPPORTED_STORAGES:
        raise ReplayError(f"storage '{storage}' is not one of {list(SUPPORTED_STORAGES)}")
    if url is not None and policy is not None:
        raise ReplayError(
            f"policy '{policy}' is a policy of the reference server; with --url the server "
            "at that URL answers"
        )
    if url is not None and save_observations is not None:
        raise ReplayError(
            "--save-observations records what the reference server receives; it cannot be "
            "used with --url"
        )
    if url is None:
        policy = policy or POLICIES[0]
        if policy not in POLICIES:
            raise ReplayError(f"policy '{policy}' is not one of {list(POLICIES)}")
    if params_file is None:
        params_file = config_dir() / f"{model or 'pi05'}.yaml"
    file_params = read_params_file(params_file, node_name)
    model = model or str(overrides.get("model") or file_params.get("model") or "pi05")
    if camera_map is not None and not Path(camera_map).is_file():
        raise ReplayError(f"camera map '{camera_map}' does not exist")
    # Every input error is found before a server or node starts.
    BagReader(bag).close()
    given: dict[str, Any] = {"model": model, **overrides}
    if camera_map is not None:
        given["camera_map"] = str(camera_map)
    if seed is not None:
        given["seed"] = int(seed)
    params = replay_parameters(params_file, file_params, given)
    config = node_config(file_params, params)
    required = required_topics(config)
    urdf_topic = robot_description_topic(bag, config)
    if urdf_topic is not None:
        required[urdf_topic] = "std_msgs/msg/String"
    inputs = read_bag_input(bag, required, config.joint_states_topic)
    check_joint_names(
        bag, config, {**file_params, **params}, inputs, expand_topic_name(config.joint_states_topic)
    )
    node_url, url_text = resolve_server_url(url, model)
    output_path = Path(output) if output is not None else default_output_path(bag)
    if output_path.exists():
        raise ReplayError(f"output bag '{output_path}' exists already; bags are never overwritten")
    if plot is not None and not Path(plot).parent.is_dir():
        raise ReplayError(f"directory of the plot '{plot}' does not exist")
    recorded = None
    if policy == "recorded":
        try:
            recorded = policy_for_config(config, inputs.joint_times, inputs.joint_positions)
        except RecordedPolicyError as exc:
            raise ReplayError(f"recorded policy: {exc}") from None
    return ReplayPlan(
        bag=bag,
        params_file=Path(params_file),
        params=params,
        config=config,
        required=required,
        latched=() if urdf_topic is None else (urdf_topic,),
        inputs=inputs,
        node_url=node_url,
        url_text=url_text,
        output=output_path,
        rate=float(rate),
        seed=seed,
        model=model,
        storage=storage,
        plot=None if plot is None else Path(plot),
        policy=policy,
        save_observations=None if save_observations is None else Path(save_observations),
        recorded_policy=recorded,
        node_name=node_name,
        connect_timeout_s=connect_timeout_s,
        clock_hz=clock_hz,
    )
