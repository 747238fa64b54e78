"""Prefix conditioning: a new chunk that starts with the actions the robot has committed to.

Real-time chunking (Black et al. 2025, "Real-Time Execution of Action Chunking Flow
Policies") freezes the actions that will run while the model infers and inpaints
the rest of the chunk so that it continues them. The reference server does the
same to its own plan, in closed form (docs/protocol.md, "Action prefix"):

- rows ``0 .. d-1`` of the reply are the prefix's first ``d = committed_steps`` rows,
  exactly (hard constraint: the robot executes them whatever the model says);
- rows ``d .. d+W-1`` (``W = soft_steps``) cross-fade from the *continuation* to the
  plan with weights ``w_j = smoothstep((j+1) / (W+1))``, ``j = 0..W-1``; the
  continuation is the prefix's own rows beyond ``d`` where given (the old chunk's
  remaining plan, RTC's soft guidance), else its last row held (what a controller
  does at the end of a trajectory; never zeros, which are a real position:
  lerobot #4454);
- the remaining rows are the plan.

The soft window: with the client's ``execute_horizon`` E (the new chunk's rows
``d .. d+E-1`` run before the next chunk takes over, so the soft region must end by
``d+E``), ``W = max(1, E // 2)``: the first half of the executed rows blends, the
second half is the new plan at full weight (`soft_steps`). Without it, two fifths of
the horizon (`default_soft_steps`).

The cross-fade is RTC's guidance weight schedule with a smooth ramp instead of an
exponential one: it keeps position and velocity continuous at both ends of the
window, so a policy that changes its mind between chunks bends the motion instead
of jumping.
"""

from __future__ import annotations

import numpy as np

__all__ = ["apply_prefix", "default_soft_steps", "soft_steps"]


def default_soft_steps(action_horizon: int) -> int:
    """The reference server's soft window: two fifths of the horizon, at least 1 (50 -> 20).

    Long enough that a reply published a few steps later than the committed ones (a
    latency spike) still lands early in the cross-fade, where it differs little from
    the old plan; short enough to leave most of the executed part to the new plan.
    """
    return max(1, 2 * action_horizon // 5)


def soft_steps(execute_horizon: int | None, action_horizon: int) -> int:
    """The soft window for a request: half the client's execute horizon (at least 1),
    or `default_soft_steps` when the client did not send one."""
    if execute_horizon is None:
        return default_soft_steps(action_horizon)
    return max(1, int(execute_horizon) // 2)


def apply_prefix(
    plan: np.ndarray, prefix: np.ndarray, committed_steps: int, soft_steps: int
) -> np.ndarray:
    """The chunk that starts with ``prefix[:committed_steps]`` and blends into ``plan``.

    Args:
        plan: (H, D) the policy's own chunk (action ``i`` for ``t_obs + i*dt``).
        prefix: (P, D) the actions the robot follows from ``t_obs`` on, same timing.
        committed_steps: ``d``, 0 <= d <= min(P, H): rows that must be reproduced exactly.
        soft_steps: ``W`` >= 0, length of the cross-fade after them.

    Returns:
        float64 (H, D), a new array.

    Raises:
        ValueError: shapes or counts out of range (names the values).
    """
    plan = np.asarray(plan, dtype=np.float64)
    prefix = np.asarray(prefix, dtype=np.float64)
    horizon, width = plan.shape
    if prefix.ndim != 2 or prefix.shape[1] != width or prefix.shape[0] < 1:
        raise ValueError(f"prefix has shape {prefix.shape}; expected (P, {width}) with P >= 1")
    d = int(committed_steps)
    if not 0 <= d <= min(prefix.shape[0], horizon):
        raise ValueError(
            f"committed_steps {committed_steps!r} is not in [0, {min(prefix.shape[0], horizon)}]"
        )
    if soft_steps < 0:
        raise ValueError(f"soft_steps {soft_steps!r} is negative")
    out = plan.copy()
    out[:d] = prefix[:d]
    soft = min(int(soft_steps), horizon - d)
    if soft == 0:
        return out
    continuation = _continuation(prefix, d + soft)[d:]
    j = np.arange(1, soft + 1, dtype=np.float64) / (soft + 1)
    w = (j * j * (3.0 - 2.0 * j))[:, None]
    out[d : d + soft] = (1.0 - w) * continuation + w * plan[d : d + soft]
    return out


def _continuation(prefix: np.ndarray, length: int) -> np.ndarray:
    """``length`` rows: the prefix, then its last row held."""
    rows = prefix.shape[0]
    if rows >= length:
        return prefix[:length]
    return np.vstack([prefix, np.repeat(prefix[-1:], length - rows, axis=0)])
