"""The recorded policy from a bag and a params file: ``relay-policy-server --recorded-bag``.

:class:`~relay_ros.server.recorded.RecordedPolicy` replays recorded joint states as
chunks; building it from files needs what lives in this layer and above the server:
the bag reader (rosbags) and the node's parameter resolution (which joints go to
which action dimensions). So the loading lives here and the server's command line
imports it only when ``--recorded-bag`` is given.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Sequence
from pathlib import Path

from relay_ros.bag.replay_inputs import ReplayError, node_config, read_bag_input, read_params_file
from relay_ros.node.topic_names import expand_topic_name
from relay_ros.server.recorded import RecordedPolicy, RecordedPolicyError, policy_for_config

__all__ = ["load_recorded_policy", "recorded_factory"]


def recorded_factory(
    bag: str | None,
    params_file: str | None,
    *,
    models: Sequence[str] | None,
    embodiment: str | None,
    policy: str | None,
) -> Callable[[], RecordedPolicy]:
    """The server's zero-argument policy factory for ``--recorded-bag BAG --recorded-params F``.

    The bag is read when the server loads the policy.

    Raises:
        ValueError: one of the two options without the other, together with
            ``--policy``, or not exactly one ``--model``.
    """
    if not (bag and params_file):
        raise ValueError("--recorded-bag and --recorded-params go together")
    if policy:
        raise ValueError("--recorded-bag serves the recorded policy; it cannot go with --policy")
    if not models or len(set(models)) != 1:
        raise ValueError("--recorded-bag serves one model: give exactly one --model")
    return functools.partial(
        load_recorded_policy, bag, params_file, model=models[0], embodiment=embodiment
    )


def load_recorded_policy(
    bag: str | os.PathLike[str],
    params_file: str | os.PathLike[str],
    *,
    model: str | None = None,
    embodiment: str | None = None,
    node_name: str = "policy_node",
) -> RecordedPolicy:
    """A :class:`RecordedPolicy` from a bag and the policy_node params file that maps it.

    The params file gives the model (unless ``model`` is given), the joint states
    topic and the outputs (joints -> action dims, or GR00T action groups); the
    reference server's metadata for that model gives the horizon and rate.

    Raises:
        RecordedPolicyError: the bag or params file does not fit (message names it).
        BagError: the bag is missing or unreadable.
    """
    try:
        file_params = read_params_file(params_file, node_name)
        config = node_config(file_params, {"model": model} if model else {})
        # Relative names resolve in the root namespace, as in a replay.
        topic = expand_topic_name(config.joint_states_topic)
        inputs = read_bag_input(Path(bag), {topic: "sensor_msgs/msg/JointState"}, topic)
    except (ReplayError, ValueError) as exc:
        raise RecordedPolicyError(str(exc)) from None
    return policy_for_config(
        config, inputs.joint_times, inputs.joint_positions, embodiment=embodiment
    )
