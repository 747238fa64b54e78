"""The actions already committed for the next inference window (the ``action_prefix`` keys).

When the server advertises ``action_prefix`` (docs/protocol.md, "Action prefix"), an
observation taken at ``t_obs`` carries the actions the robot will follow from
``t_obs`` on, on the new chunk's time grid ``t_obs + i*dt``, and how many of them
execute before the new chunk takes over (``committed_steps``). The server then
returns a chunk that starts with them and blends into its own plan: real-time
chunking (Black et al. 2025) over the wire.

`committed_prefix` reads both from the `ChunkScheduler` that will publish the reply:

- the rows are its current publication (what the controller follows: linear
  between points, the last point held after its end) at ``t_obs + i*dt`` for every
  slot up to the end of that publication (at least ``committed_steps`` rows, at
  most ``H``); rows after the committed ones are the old chunk's remaining plan,
  which the server uses as soft guidance;
- ``committed_steps`` is the first index the scheduler will keep when it publishes
  the reply: at the switch time (early requests) or, if the reply is expected
  later, at ``t_obs`` plus the median measured latency; both plus ``min_lead_s``.

Pure (time is passed in), no rclpy; the rows are in the scheduler's chunk columns
(`to_action_space` spreads them into the server's action vector).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from relay_ros.pipeline.scheduler import TIME_EPS_S, ChunkScheduler

__all__ = ["committed_prefix", "to_action_space"]


def committed_prefix(scheduler: ChunkScheduler, t_obs: float) -> tuple[np.ndarray, int] | None:
    """``(rows (P, D) float32, committed_steps)`` for an observation at ``t_obs``, or None.

    None when nothing is published yet (the first chunk has no prefix to continue).
    """
    current = scheduler.current
    if current is None:
        return None
    cfg = scheduler.config
    takeover = current.switch_time - cfg.publish_early_s
    latency = scheduler.latencies.percentile(50.0)
    if latency is not None:
        takeover = max(takeover, t_obs + latency)
    target = takeover + cfg.min_lead_s - TIME_EPS_S
    committed = min(cfg.horizon, max(0, math.ceil((target - t_obs) / cfg.dt - 1e-9)))
    covered = math.floor((current.end_time - t_obs) / cfg.dt + 1e-9) + 1
    rows = min(cfg.horizon, max(committed, covered, 1))
    times = t_obs + np.arange(rows, dtype=np.float64) * cfg.dt
    prefix = np.stack([scheduler.last_commanded(float(t)) for t in times])
    return prefix.astype(np.float32), committed


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
