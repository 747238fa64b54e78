"""One request to the policy server: its observation, and the tag that comes back with its reply.

The streaming core decides *when* to request (the scheduler) and *whether* the inputs
allow it (:mod:`~relay_ros.pipeline.observation_inputs`); this module builds *what* is
sent: :func:`build_observation` turns one :class:`~relay_ros.pipeline.observation_inputs.Snapshot`
into the model's observation, with the ``action_prefix`` keys
(:mod:`~relay_ros.pipeline.action_prefix`) when the server takes them, and
:class:`RequestTag` travels with it through the connection, so that a reply from
before a reconnect or an episode reset is never executed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from relay_ros.pipeline.action_prefix import add_prefix_keys
from relay_ros.pipeline.observation_inputs import Snapshot
from relay_ros.pipeline.request_clock import RequestStart
from relay_ros.pipeline.server_session import ServerSession
from relay_ros.pipeline.settings import StreamingSettings

__all__ = ["RequestTag", "build_observation"]


@dataclass(frozen=True)
class RequestTag:
    """Travels with each observation through the connection and back with its reply.

    Attributes:
        generation: Which connection the request was made on; a reply from an
            earlier one is dropped (its scheduler is gone).
        session_id: The episode; a reply from before ``~/reset`` is never executed.
        t_obs: Observation time on the node clock (s).
        start: The request's start on the core's
            :class:`~relay_ros.pipeline.request_clock.RequestClock`.
    """

    generation: int
    session_id: str
    t_obs: float
    start: RequestStart


def build_observation(
    session: ServerSession,
    snapshot: Snapshot,
    settings: StreamingSettings,
    *,
    prompt: str,
    session_id: str,
    joint_names: Sequence[str],
    requested_at: float,
) -> tuple[dict[str, Any], int]:
    """The observation of ``snapshot`` for ``session``'s model, and how many of the
    scheduler's committed steps it carries as ``action_prefix`` (0 when the server
    takes no prefix).

    ``joint_names`` orders ``snapshot.state`` (the inputs' watched joints, state
    joints first); the prefix starts from the commanded joints' positions in it.
    """
    observation = session.builder.build(
        snapshot.frames.frames,
        snapshot.state[: len(settings.state_joints)],
        prompt,
        session_id=session_id,
        seed=settings.seed,
        observation_time=snapshot.t_obs,
    )
    if not session.spec.action_prefix:
        return observation, 0
    order = {name: i for i, name in enumerate(joint_names)}
    commanded = np.array([snapshot.state[order[j]] for j in settings.commanded_joints])
    committed = add_prefix_keys(
        observation,
        session.scheduler,
        snapshot.t_obs,
        commanded,
        requested_at=requested_at,
        used_dims=session.reader.used_dims.tolist(),
        chunk_width=session.spec.chunk_width,
    )
    return observation, committed
