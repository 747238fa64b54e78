"""The actions already committed for the next inference window (the ``action_prefix`` keys).

When the server advertises ``action_prefix`` (docs/protocol.md, "Action prefix"), an
observation taken at ``t_obs`` carries the actions the robot will follow from
``t_obs`` on, on the new chunk's time grid ``t_obs + i*dt`` (stretched while a
ramp-in runs: ``ChunkScheduler.chunk_times``), how many of them
execute before the new chunk takes over (``committed_steps``), how many the robot
runs while the server infers (``inference_delay``) and how many rows of the new
chunk run after the committed ones (``execute_horizon``, where the server's soft
region ends). The server then returns a chunk that starts with the committed
actions and blends into its own plan: real-time chunking (Black et al. 2025) over
the wire.

`committed_prefix` reads them from the `ChunkScheduler` that will publish the reply
and what the controllers follow:

- **rows**: what the controller follows from ``t_obs`` on: the gate's commanded
  motion (``Gate.followed``, as the controller samples it; its last point held after
  its end; in a dry run the arm standing where it was measured), or, when no chunk
  of ours runs (the first chunk after a start, a hold or a reset), the held state;
  at least up to the end of the soft region (``committed_steps + execute_horizon``)
  and the end of the current publication, at most ``H`` rows.
  Rows beyond what is published repeat the last action (never zeros: a zero is a
  real position, lerobot #4454);
- **committed_steps** ``d``: the first index the scheduler will keep when it
  publishes the reply: at the switch time (early requests) or, if the reply is
  expected later, at ``t_obs`` plus the median measured latency; both plus
  ``min_lead_s``. With the arm still, the reply joins the arm at any of these rows
  (``ChunkScheduler.request_sent(committed_steps=d)``), so it starts without a jump
  even when it comes later than expected;
- **inference_delay**: the steps from ``t_obs`` until the reply is expected (the
  request's time plus the median latency, the warm-up reply excluded,
  ``RequestClock.estimate``), at most ``d``: the robot cannot run more of the prefix
  before the new chunk takes over than the committed rows;
- **execute_horizon** ``E``: the new chunk's rows ``d .. d+E-1`` run before the next
  chunk takes over (``ChunkScheduler.execute_horizon``, the latency's when automatic);
  its soft region must end by row ``d + E``.

Pure (time is passed in), no rclpy; the rows are in the scheduler's chunk columns
(`to_action_space` spreads them into the server's action vector).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from relay_ros.pipeline.interpolation import ControllerTrajectory
from relay_ros.pipeline.scheduler import TIME_EPS_S, ChunkScheduler

__all__ = ["CommittedPrefix", "committed_prefix", "to_action_space"]


@dataclass(frozen=True, eq=False)
class CommittedPrefix:
    """The ``action_prefix`` keys of one observation (see the module docstring).

    Attributes:
        rows: (P, D) float32, the scheduler's columns.
        committed_steps: Rows certain to execute before the new chunk takes over.
        inference_delay: Rows the robot runs while the server infers (estimated).
        execute_horizon: Rows of the new chunk after the committed ones that run
            before the next chunk takes over.
    """

    rows: np.ndarray
    committed_steps: int
    inference_delay: int
    execute_horizon: int


def committed_prefix(
    scheduler: ChunkScheduler,
    t_obs: float,
    held: np.ndarray,
    *,
    followed: ControllerTrajectory | None,
    requested_at: float | None = None,
) -> CommittedPrefix:
    """The prefix for an observation at ``t_obs``, requested at ``requested_at``
    (default ``t_obs``; later when the observation shows its frames' moment: the
    scheduler's latencies count from the request); ``held`` (D,) is where the arm
    stands (the measured state of the commanded joints), used when nothing of ours
    moves it; ``followed`` what the controllers follow (the gate's commanded motion)."""
    cfg = scheduler.config
    current = scheduler.current
    latency = scheduler.latencies.percentile(50.0)
    sent = t_obs if requested_at is None else max(t_obs, requested_at)
    reply = sent if latency is None else sent + latency
    takeover = reply
    if current is not None:
        takeover = max(takeover, current.switch_time - cfg.publish_early_s)
    target = takeover + cfg.effective_min_lead_s - TIME_EPS_S
    # Action periods of the new chunk the robot runs by then (less what a ramp-in loses).
    committed = min(cfg.horizon, max(0, math.ceil(scheduler.chunk_steps(t_obs, target) - 1e-9)))
    execute = scheduler.execute_horizon()
    wanted = min(cfg.horizon, max(committed + execute, 1))
    if current is None or followed is None:
        rows = np.repeat(np.asarray(held, dtype=np.float64)[None, :], wanted, axis=0)
    else:
        covered = math.floor(scheduler.chunk_steps(t_obs, current.end_time) + 1e-9) + 1
        count = min(cfg.horizon, max(wanted, covered))
        # When the new chunk's rows run (stretched during a ramp-in), on the motion the
        # controllers follow there.
        rows = followed.state(scheduler.chunk_times(t_obs, count))[0]
    delay = math.ceil(scheduler.chunk_steps(t_obs, reply) - 1e-9) if latency is not None else 0
    return CommittedPrefix(
        rows=rows.astype(np.float32),
        committed_steps=committed,
        inference_delay=min(delay, committed),
        execute_horizon=execute,
    )


def add_prefix_keys(
    observation: dict[str, Any],
    scheduler: ChunkScheduler,
    t_obs: float,
    held: np.ndarray,
    *,
    followed: ControllerTrajectory | None,
    requested_at: float,
    used_dims: Sequence[int],
    chunk_width: int,
) -> int:
    """Real-time chunking: add the ``action_prefix`` keys (:func:`committed_prefix`,
    in the server's action space) to ``observation``; returns ``committed_steps``."""
    prefix = committed_prefix(scheduler, t_obs, held, followed=followed, requested_at=requested_at)
    observation["action_prefix"] = to_action_space(prefix.rows, used_dims, chunk_width)
    observation["committed_steps"] = prefix.committed_steps
    observation["inference_delay"] = prefix.inference_delay
    observation["execute_horizon"] = prefix.execute_horizon
    return prefix.committed_steps


def to_action_space(rows: np.ndarray, dims: Sequence[int], action_dim: int) -> np.ndarray:
    """Scheduler-column rows (P, D) as (P, action_dim) float32: column j -> ``dims[j]``.

    Action dimensions no column drives (π0's padding) are 0, as in the state.

    Raises:
        ValueError: ``dims`` does not have one index in ``[0, action_dim)`` per column.
    """
    rows = np.asarray(rows)
    if len(dims) != rows.shape[1] or any(not 0 <= d < action_dim for d in dims):
        raise ValueError(
            f"dims {list(dims)} do not map {rows.shape[1]} columns into {action_dim} dimensions"
        )
    out = np.zeros((rows.shape[0], action_dim), dtype=np.float32)
    out[:, list(dims)] = rows
    return out
