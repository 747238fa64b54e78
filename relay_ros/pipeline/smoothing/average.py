"""Averages of overlapping chunks: a cross-fade, LeRobot's weighted average, ACT's ensemble.

Three client-side ways of mixing the new chunk with the one the controllers follow,
each at the same instants of the chunk timeline (``Switch.row_times``; the previous
chunk linear between its rows, its last row beyond its end,
:func:`~relay_ros.pipeline.publication.chunk_at`). None of them
knows where the controller is going at the switch, so two chunks that disagree
still leave a step in position or velocity (and the publication check may refuse
what results); they are here as the anchors the splice is measured against
(``bench/motion.py``), and as options a user may pick.

- :class:`CrossFade` (``crossfade``, the node's ``blend_steps``): the first B points
  go from the old chunk to the new with smoothstep weights ``s((j+1)/(B+1))``,
  ``s(x) = 3x^2 - 2x^3``.
- :class:`WeightedAverage` (``lerobot_average``): LeRobot async_inference's
  ``weighted_average`` aggregation: every point the previous publication still
  covers becomes ``0.3 * old + 0.7 * new``.
- :class:`TemporalEnsemble` (``act_ensemble``): ACT's temporal ensembling (Zhao et al.
  2023): each instant is the average of every chunk that predicted it, weighted
  ``exp(-m * i)`` with ``i = 0`` for the oldest (``m = 0.01``, ACT's default), so the
  older predictions weigh slightly more.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from relay_ros.pipeline.publication import chunk_at, smooth_weights
from relay_ros.pipeline.smoothing.switch import Smoothed, Smoothing, Switch, changed_rows

__all__ = [
    "ACT_WEIGHT_DECAY",
    "LEROBOT_OLD_WEIGHT",
    "CrossFade",
    "TemporalEnsemble",
    "WeightedAverage",
]

#: LeRobot async_inference's ``weighted_average``: ``0.3 * old + 0.7 * new``.
LEROBOT_OLD_WEIGHT = 0.3
#: ACT's temporal ensembling weight ``exp(-m * i)``: ``m = 0.01``.
ACT_WEIGHT_DECAY = 0.01


@dataclass(frozen=True)
class CrossFade(Smoothing):
    """The first ``steps`` points fade from the old chunk to the new (module docstring).

    Attributes:
        steps: Points cross-faded (>= 1).
    """

    name: ClassVar[str] = "crossfade"
    steps: int = 1

    def __post_init__(self) -> None:
        if isinstance(self.steps, bool) or not isinstance(self.steps, int) or self.steps < 1:
            raise ValueError(f"crossfade steps {self.steps!r} must be an integer >= 1")

    def smooth(self, switch: Switch) -> Smoothed:
        positions = np.array(switch.positions, dtype=np.float64)
        previous = switch.previous
        if previous is None:
            return Smoothed(positions, 0)
        count = min(self.steps, len(positions))
        old = chunk_at(previous.chunk, previous.origin, switch.dt, switch.row_times[:count])
        weights = smooth_weights(count)[:, None]
        positions[:count] = (1.0 - weights) * old + weights * positions[:count]
        return Smoothed(positions, count)

    def describe(self) -> str:
        return f"crossfade over {self.steps} points"


@dataclass(frozen=True)
class WeightedAverage(Smoothing):
    """LeRobot's aggregation: ``old_weight * old + (1 - old_weight) * new`` wherever the
    previous publication still has points (module docstring).

    Attributes:
        old_weight: The previous chunk's weight (0..1).
    """

    name: ClassVar[str] = "lerobot_average"
    old_weight: float = LEROBOT_OLD_WEIGHT

    def __post_init__(self) -> None:
        if not 0.0 <= self.old_weight <= 1.0:
            raise ValueError(f"old_weight {self.old_weight!r} must be in [0, 1]")

    def smooth(self, switch: Switch) -> Smoothed:
        original = np.array(switch.positions, dtype=np.float64)
        previous = switch.previous
        if previous is None:
            return Smoothed(original, 0)
        overlap = switch.times <= previous.end_time + 1e-9
        positions = original.copy()
        old = chunk_at(previous.chunk, previous.origin, switch.dt, switch.row_times[overlap])
        positions[overlap] = self.old_weight * old + (1.0 - self.old_weight) * original[overlap]
        return Smoothed(positions, changed_rows(original, positions))

    def describe(self) -> str:
        return f"lerobot_average ({self.old_weight:g} old + {1 - self.old_weight:g} new)"


@dataclass(frozen=True)
class TemporalEnsemble(Smoothing):
    """ACT's temporal ensembling over every chunk that predicted an instant.

    The memo is, per row of the published chunk, the total weight of the chunks
    averaged into it and how many there were, so the next chunk joins the average
    with its own weight ``exp(-decay * count)``.

    Attributes:
        decay: ``m`` of the weights ``exp(-m * i)`` (>= 0).
    """

    name: ClassVar[str] = "act_ensemble"
    decay: float = ACT_WEIGHT_DECAY

    def __post_init__(self) -> None:
        if not (math.isfinite(self.decay) and self.decay >= 0.0):
            raise ValueError(f"decay {self.decay!r} must be a finite number >= 0")

    def smooth(self, switch: Switch) -> Smoothed:
        original = np.array(switch.positions, dtype=np.float64)
        horizon = switch.chunk.shape[0]
        n = len(original)
        weight_new = np.ones(n)
        count_new = np.ones(n)
        positions = original.copy()
        previous = switch.previous
        if previous is not None:
            times = switch.row_times
            last = previous.origin + (previous.chunk.shape[0] - 1) * switch.dt
            covered = (times >= previous.origin - 1e-9) & (times <= last + 1e-9)
            rows = np.rint((times - previous.origin) / switch.dt).astype(np.int64)
            rows = np.clip(rows, 0, previous.chunk.shape[0] - 1)
            if isinstance(previous.memo, tuple):
                old_weight, old_count = previous.memo
            else:
                old_weight = np.ones(previous.chunk.shape[0])
                old_count = np.ones(previous.chunk.shape[0])
            w_old = np.where(covered, old_weight[rows], 0.0)
            c_old = np.where(covered, old_count[rows], 0.0)
            w_this = np.exp(-self.decay * c_old)
            old = chunk_at(previous.chunk, previous.origin, switch.dt, times)
            total = w_old + w_this
            positions = (w_old[:, None] * old + w_this[:, None] * original) / total[:, None]
            weight_new, count_new = total, c_old + 1.0
        weights = np.ones(horizon)
        counts = np.ones(horizon)
        weights[switch.first_index : switch.first_index + n] = weight_new
        counts[switch.first_index : switch.first_index + n] = count_new
        return Smoothed(positions, changed_rows(original, positions), (weights, counts))

    def describe(self) -> str:
        return f"act_ensemble (weights exp(-{self.decay:g} i))"
