"""How smooth a commanded motion was, from its real sample times and its chunk switches.

Plain NumPy over what a simulated controller recorded
(`relay_ros.sim.controller_measures`), shared by the demo and ``bench/motion.py``:

- **jerk** (`jerk_rms`): the third derivative of the commanded positions from
  divided differences over the *real* sample times. A controller's cycles jitter
  (1-1.7 ms on a loaded machine); dividing by a fixed ``dt^3`` would read that
  timing noise as jerk, divided differences read a straight line as exactly 0 on
  any sample times and a cubic exactly;
- **switches** (`switch_summary`): the C0 (position) and C1 (velocity) gap at each
  chunk switch at the same instant, the new chunk's own curve against the old
  command, over a typical step between points; switches with the arm at rest on
  both sides join trivially and are counted apart, so standing still cannot make a
  run look smooth.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from relay_ros.sim.controller_measures import BoundaryStep

__all__ = ["SwitchSummary", "jerk_rms", "switch_summary"]


def jerk_rms(times_s: np.ndarray, commanded: np.ndarray) -> float | None:
    """RMS jerk (units/s^3) of ``commanded`` (N, D) sampled at ``times_s`` (N,), or None.

    Six times the third divided difference on the real sample times, over all
    joints. Rows with a non-finite value are dropped only when they lead or trail
    the series (a gap in the middle would fake a jerk, so then None is returned);
    None also for fewer than 4 rows or times that do not increase.
    """
    values = np.asarray(commanded, dtype=np.float64)
    times = np.asarray(times_s, dtype=np.float64)
    if values.ndim == 1:
        values = values[:, None]
    finite = np.all(np.isfinite(values), axis=1) & np.isfinite(times)
    index = np.flatnonzero(finite)
    if index.size < 4:
        return None
    first, last = index[0], index[-1] + 1
    if not finite[first:last].all():
        return None
    values, times = values[first:last], times[first:last]
    if not np.all(np.diff(times) > 0):
        return None
    diff = values
    for order in (1, 2, 3):
        span = (times[order:] - times[:-order])[:, None]
        diff = np.diff(diff, axis=0) / span
    jerk = 6.0 * diff
    return float(np.sqrt(np.mean(jerk * jerk)))


@dataclass(frozen=True)
class SwitchSummary:
    """The chunk switches of a run, at the switch instant.

    Attributes:
        moving: Switches with the arm moving on at least one side.
        at_rest: Switches between two commands at rest (not in the gaps below).
        typical_step: Median of the chunks' typical step between points (rad).
        c0_median: Median position gap of the moving switches (rad).
        c0_p95: 95th percentile of it (rad).
        c1_median: Median velocity gap of the moving switches (rad/s).
        c1_p95: 95th percentile of it (rad/s).
    """

    moving: int
    at_rest: int
    typical_step: float | None
    c0_median: float | None
    c0_p95: float | None
    c1_median: float | None
    c1_p95: float | None

    @property
    def c0_over_step(self) -> float | None:
        """Median position gap over a typical step (<= 0.5: the switch hides in a step)."""
        if self.c0_median is None or not self.typical_step:
            return None
        return self.c0_median / self.typical_step

    @property
    def c0_p95_over_step(self) -> float | None:
        """95th percentile of the position gap over a typical step (<= 1: even the
        worst switches stay within one step)."""
        if self.c0_p95 is None or not self.typical_step:
            return None
        return self.c0_p95 / self.typical_step


def switch_summary(steps: Sequence[BoundaryStep], since: float = -np.inf) -> SwitchSummary:
    """Summarise the switches at or after ``since`` (s)."""
    chosen = [s for s in steps if s.t >= since]
    moving = [s for s in chosen if not s.at_rest]
    typical = [s.typical_step for s in chosen if s.typical_step > 0]

    def stat(values: list[float], q: float) -> float | None:
        return float(np.percentile(values, q)) if values else None

    c0 = [s.position_gap for s in moving]
    c1 = [s.velocity_gap for s in moving]
    return SwitchSummary(
        moving=len(moving),
        at_rest=len(chosen) - len(moving),
        typical_step=stat(typical, 50),
        c0_median=stat(c0, 50),
        c0_p95=stat(c0, 95),
        c1_median=stat(c1, 50),
        c1_p95=stat(c1, 95),
    )
