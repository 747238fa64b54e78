"""A publication's ends re-timed within the acceleration limits: the tail brakes, a start ramps.

joint_trajectory_controller requires a zero velocity on the last point (Jazzy rejects
anything else), so a chunk that ends while still moving stops within its last segment,
one action period: at 1 rad/s and 50 Hz a cubic from 1 rad/s to rest in 20 ms
accelerates at up to 200 rad/s^2. Without an acceleration limit the node bounds only
the points' second differences (:mod:`~relay_ros.pipeline.gate.motion`), which that
stop passes; with one (ros2_control's ``has_acceleration_limits``, typically 5 to
20 rad/s^2), the motion check refused every chunk that ended moving, that is nearly
every chunk. The same holds for a chunk that starts an arm standing still: from rest
to the chunk's speed within its first segment.

Both ends are fixed the same way, by re-timing the chunk's own path (never its
positions off it, so a trajectory inside the position limits stays inside them):

- :func:`brake_tail`: from a point ``b`` on, the chunk's time runs at a rate ``lambda``
  that falls linearly from 1 to 0 (``lambda' = -k``), so the arm decelerates to rest
  exactly at the chunk's last point, later than the chunk had it: the braking takes
  ``1/k`` s and covers the chunk's last ``1/(2k)`` s, so the trajectory ends ``1/(2k)``
  s later. A joint's acceleration is then ``P'' lambda^2 - P' k`` (``P'``, ``P''``: the
  chunk's own velocity and acceleration), so ``k`` is chosen with ``|P'| k + |P''|``
  within a share of the limit over the braking window;
- :func:`ramp_head`: for an arm that stands, the mirror image from the stamp: the
  chunk's time starts at rate 0 and rises to 1, so the arm accelerates from rest; the
  rest of the chunk (and its switch) runs ``1/(2k)`` s later, the whole chunk moved as
  one (the gate's start for a still arm). The node's own gentle start
  (``ramp_in_s``, :mod:`~relay_ros.pipeline.ramp_in`) usually makes it unnecessary;
  where that ramp is too short for an acceleration limit, this one replaces it (on the
  unstretched chunk, over no less time), so a start is never ramped twice.

The new points lie on the action period's grid (the publication keeps its spacing;
a tail that a ramp-in still stretches is braked at its own mean spacing), on the
chunk's path between its points (the monotone cubic through them), and the result goes
through the same motion check as every trajectory: the tail is still checked. Only
joints with an acceleration limit decide ``k``; without one, nothing is re-timed.
The tail beyond the execute horizon runs only when the next chunk is late (and in
sync mode, where each chunk's published part ends at rest).

Plain NumPy, no clock of its own.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from relay_ros.pipeline.gate.motion import MotionLimits, check_motion
from relay_ros.pipeline.interpolation import (
    ControllerTrajectory,
    finite_difference_velocities,
    segment_extremes,
)
from relay_ros.pipeline.publication import Publication

__all__ = ["RETIMING_SHARES", "brake_tail", "braked_tail", "ramp_head"]

#: Shares of each acceleration limit tried in turn for ``|P'| k + |P''|``: the
#: controller's cubic segments through the re-timed points reach somewhat more than
#: the points' own second differences, so each result is checked exactly.
RETIMING_SHARES = (0.7, 0.5, 0.35, 0.25)
#: Relative slack of the exact check (float rounding only), as the motion check's.
_SLACK = 1e-9


def _grid_step(publication: Publication) -> float | None:
    """The publication's point spacing (s), or None with fewer than two points."""
    tfs = publication.time_from_start
    if len(tfs) < 2:
        return None
    step = float(tfs[1] - tfs[0])
    return step if step > 0.0 else None


def _sample(
    times: np.ndarray, positions: np.ndarray, at: np.ndarray, centred: np.ndarray
) -> np.ndarray:
    """The chunk's path through ``positions`` (N, J) at ``times`` (N,), at ``at`` (K,):
    cubic Hermite through the node's velocities (``centred`` columns: the centred
    rule), its speed continuous at every point, the last point's velocity the last
    secant instead of 0 (a path, not the stop the controller makes there)."""
    velocities = finite_difference_velocities(positions, times, centred)
    velocities[-1] = (positions[-1] - positions[-2]) / (times[-1] - times[-2])
    return ControllerTrajectory(times, positions, velocities).state(at)[0]


def _rates(positions: np.ndarray, times: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The secants (N-1, J) and second differences (N-2, J) of points at ``times``."""
    secants = np.diff(positions, axis=0) / np.diff(times)[:, None]
    spans = 0.5 * (times[2:] - times[:-2])
    changes = np.diff(secants, axis=0) / spans[:, None]
    return secants, changes


def _tail_within(
    positions: np.ndarray, times: np.ndarray, limits: MotionLimits, first: int
) -> bool:
    """Whether the controller's cubic segments between the points ``positions`` at
    ``times`` (with the node's velocities), from segment ``first`` on, stay within the
    speed and acceleration limits."""
    velocities = finite_difference_velocities(positions, times, limits.centred)
    ext = segment_extremes(
        positions[:-1], velocities[:-1], positions[1:], velocities[1:], np.diff(times)
    )
    speed = ext.speed[first:] <= limits.max_velocity * (1.0 + _SLACK)
    acceleration = ext.acceleration[first:] <= limits.max_acceleration * (1.0 + _SLACK)
    return bool(speed.all() and acceleration.all())


def brake_tail(publication: Publication, limits: MotionLimits) -> Publication | None:
    """``publication`` with its tail re-timed to brake to rest within the acceleration
    limits (module docstring), or None when nothing needs it (no joint has an
    acceleration limit, the tail already stops within it) or nothing fits (a chunk
    over the limits on its own: the motion check refuses it as it is).

    The last point stays the chunk's last point, reached ``n`` action periods later;
    the switch and everything before the braking point are unchanged.
    """
    braked = braked_tail(publication.positions, publication.time_from_start, limits)
    if braked is None:
        return None
    positions, times = braked
    return dataclasses.replace(publication, positions=positions, time_from_start=times)


def braked_tail(
    positions: np.ndarray, time_from_start: np.ndarray, limits: MotionLimits
) -> tuple[np.ndarray, np.ndarray] | None:
    """The points and times of :func:`brake_tail` for ``positions`` (N, J) at
    ``time_from_start`` (N,, spaced evenly), or None (read-only arrays)."""
    limited = np.isfinite(limits.max_acceleration)
    positions = np.asarray(positions, dtype=np.float64)
    tfs = np.asarray(time_from_start, dtype=np.float64)
    count = positions.shape[0]
    if not limited.any() or count < 3 or not tfs[-1] > tfs[-2]:
        return None
    if _tail_within(positions, tfs, limits, count - 3):
        return None  # the last two segments already stop within the limits
    secants, changes = _rates(positions, tfs)
    # The chunk's own speed change at each point (the first has none of its own).
    curvature = np.vstack((np.zeros((1, positions.shape[1])), np.abs(changes)))
    accel = limits.max_acceleration
    for share in RETIMING_SHARES:
        for n in range(1, count - 1):
            b = count - 1 - n
            # The braked part's own spacing: the action period, or wider where a
            # ramp-in (pipeline/ramp_in.py) still stretches the tail.
            step = float(tfs[-1] - tfs[b]) / n
            k = 1.0 / (2.0 * n * step)
            # At each point j >= b of the braking: lambda^2 |P''| + k |P'| (lambda^2 =
            # 1 - 2 k (t_j - t_b) on the chunk's own time), the segment after it.
            slow = np.clip(1.0 - 2.0 * k * (tfs[b:-1] - tfs[b]), 0.0, 1.0)[:, None]
            needed = slow * curvature[b:] + k * np.abs(secants[b:])
            if not (needed <= share * accel)[:, limited].all():
                continue
            x = step * np.arange(1, 2 * n + 1, dtype=np.float64)
            sigma = tfs[b] + x - 0.5 * k * x * x
            sampled = _sample(tfs, positions, sigma, limits.centred)
            braked = np.vstack((positions[: b + 1], sampled))
            braked[-1] = positions[-1]  # exactly the chunk's last point
            times = np.concatenate((tfs[: b + 1], tfs[b] + x))
            if _tail_within(braked, times, limits, max(0, b - 2)):
                braked.setflags(write=False)
                times.setflags(write=False)
                return braked, times
    return None


def _fade(u: np.ndarray) -> np.ndarray:
    """The quintic smoothstep, 0 up to ``u = 0`` and 1 from ``u = 1`` (zero speed and
    acceleration at both ends)."""
    u = np.clip(u, 0.0, 1.0)
    return u * u * u * (10.0 + u * (-15.0 + 6.0 * u))


def ramp_head(
    publication: Publication,
    start: np.ndarray,
    limits: MotionLimits,
    *,
    min_duration_s: float = 0.0,
) -> Publication | None:
    """``publication`` for an arm standing at ``start`` with its beginning re-timed to
    accelerate from rest within the acceleration limits (module docstring), the rest
    of it (its switch included) ``n`` action periods later; None when no joint has an
    acceleration limit or no ramp of at most the publication's length fits.

    The ramp takes ``2 n`` action periods, at least ``min_duration_s`` where the
    publication is long enough (the ``ramp_in_s`` it replaces: never a harder start
    than the user asked for). ``publication`` runs on its chunk's own timeline (no
    ramp-in: :meth:`~relay_ros.pipeline.publication.Publication.unramped`).

    The ramp runs on the chunk's path from its first point (at the first point's
    time, as published), where the arm stands; a first point off the standing arm
    (the chunk's own offset) is faded out along the ramp with a quintic smoothstep,
    so the first published point is exactly where the arm stands."""
    limited = np.isfinite(limits.max_acceleration)
    dt = _grid_step(publication)
    positions = np.asarray(publication.positions, dtype=np.float64)
    tfs = np.asarray(publication.time_from_start, dtype=np.float64)
    count = positions.shape[0]
    if not limited.any() or dt is None or count < 3:
        return None
    start = np.asarray(start, dtype=np.float64)
    offset = start - positions[0]
    accel = limits.max_acceleration
    shortest = max(1, min(count - 1, math.ceil(min_duration_s / (2.0 * dt) - 1e-9)))
    for share in RETIMING_SHARES:
        for n in range(shortest, count):
            k = 1.0 / (2.0 * n * dt)
            ramp = n * dt  # of the chunk's time, run in 2 n dt of real time
            path = positions + offset * (1.0 - _fade((tfs - tfs[0]) / ramp))[:, None]
            covered = min(count, n + 2)
            secants, changes = _rates(path[:covered], tfs[:covered])
            speed = np.abs(secants).max(axis=0)
            change = np.abs(changes).max(axis=0, initial=0.0)
            if not (speed * k + change <= share * accel)[limited].all():
                continue
            x = dt * np.arange(count + n, dtype=np.float64)  # real time after the first point
            sigma = tfs[0] + np.where(x < 2.0 * ramp, 0.5 * k * x * x, x - ramp)
            ramped = _sample(tfs, path, sigma, limits.centred)
            after = int(np.searchsorted(x, 2.0 * ramp - 1e-12))
            ramped[after:] = positions[after - n :]  # the chunk's own points, n later
            times = tfs[0] + x
            if check_motion(start, ramped, times, limits).ok:
                ramped.setflags(write=False)
                times.setflags(write=False)
                delay = n * dt
                return dataclasses.replace(
                    publication,
                    positions=ramped,
                    time_from_start=times,
                    switch_time=publication.switch_time + delay,
                    shift_s=publication.shift_s + delay,
                )
    return None
