"""Holds: one stop the controller runs from wherever it is when the hold arrives.

A hold is one point, ``target`` at ``duration`` seconds, zero velocity, stamped zero
(:mod:`~relay_ros.pipeline.gate.messages`): joint_trajectory_controller takes it on its
first control cycle after arrival, however late, and joins its state then (position
``p`` and velocity ``v``: the commanded state, or the measured one, per
:class:`~relay_ros.pipeline.gate.controller.ControllerModel`) to the point with one
cubic segment. Until it arrives the controller runs the trajectory it had, so where
the stop starts depends on when the hold arrives. :func:`plan_stop` plans one that is
within the limits for every arrival in ``[now, now + HOLD_DELIVERY_S]``:

- **starts**: the controller's start state at every :data:`HOLD_SAMPLE_S` of that window
  (one state when the controller stands or its clock jumped);
- **target**: the point where a constant deceleration over ``duration`` brings the
  state at a reference time of the window to rest, ``p + v * duration / 2`` (from that
  state the cubic to it *is* that quadratic stop), clipped into the position range; the
  reference is the window's start (a prompt arrival stops shortest; later ones brake
  harder and may turn back a little), else a later one where that allows a shorter
  stop; for an arm that does not follow, where it was measured;
- **duration**: for that reference, the shortest of ``HOLD_MIN_S * 1.25**k`` (at least
  one action period) for which the segment from every start passes
  :func:`~relay_ros.pipeline.gate.motion.check_motion` (position range, velocity, and the
  stop acceleration: ``max_acceleration`` where set, else ``max_velocity / dt``).

None when no stop up to :data:`MAX_STOP_S` passes: then no hold is sent, and the
controllers finish the last accepted trajectory, which passed the same check and ends
at rest.

Plain NumPy, no rclpy.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from relay_ros.pipeline.gate.controller import CommandedMotion, ControllerModel
from relay_ros.pipeline.gate.motion import MotionLimits, check_motion
from relay_ros.pipeline.interpolation import segment_extremes

__all__ = [
    "HOLD_DELIVERY_S",
    "HOLD_MIN_S",
    "HOLD_SAMPLE_S",
    "MAX_STOP_S",
    "StopPlan",
    "hold_starts",
    "plan_stop",
]

#: Arrivals up to this long after the hold is published are planned for (s): a same-host
#: message takes about a millisecond, a loaded machine's executor 100 ms and more.
HOLD_DELIVERY_S = 0.2
#: Spacing of the arrival times a stop is checked from (s).
HOLD_SAMPLE_S = 0.005
#: Shortest stop (s), also for an arm that stands: a few control cycles to settle.
HOLD_MIN_S = 0.1
#: Longest stop tried (s).
MAX_STOP_S = 3.0
#: Relative slack on the limits (float rounding only), as the motion check's.
_SLACK = 1e-9


@dataclass(frozen=True, eq=False)
class StopPlan:
    """A hold: ``target`` (J,) reached at rest ``duration`` s after the controller takes
    it; ``starts`` the ``(position, velocity)`` states it was checked from."""

    target: np.ndarray
    duration: float
    starts: tuple[tuple[np.ndarray, np.ndarray], ...]

    @property
    def moves(self) -> bool:
        """Whether the arm moves during the stop (else it stands at its target)."""
        return any(
            np.abs(v).max(initial=0.0) > 0.0 or not np.array_equal(p, self.target)
            for p, v in self.starts
        )


def hold_starts(
    motion: CommandedMotion,
    controller: ControllerModel,
    now: float,
    *,
    offset: np.ndarray,
    measured: np.ndarray,
) -> tuple[tuple[np.ndarray, np.ndarray], ...]:
    """The controller's start state for each arrival of a hold published at ``now``
    (every :data:`HOLD_SAMPLE_S` of :data:`HOLD_DELIVERY_S`)."""
    steps = int(round(HOLD_DELIVERY_S / HOLD_SAMPLE_S))
    times = now + HOLD_SAMPLE_S * np.arange(steps + 1)
    starts = [controller.start(motion, float(t), measured=measured, offset=offset) for t in times]
    first = starts[0]
    if all(np.array_equal(p, first[0]) and np.array_equal(v, first[1]) for p, v in starts):
        return (first,)
    return tuple(starts)


def _fast_enough(
    starts: np.ndarray,
    velocities: np.ndarray,
    target: np.ndarray,
    duration: float,
    limits: MotionLimits,
) -> bool:
    """Speed and acceleration of the cubic from every start to ``target`` at rest, all
    starts at once: the quick test before :func:`check_motion` runs on each."""
    n = starts.shape[0]
    ext = segment_extremes(
        starts,
        velocities,
        np.broadcast_to(target, starts.shape),
        np.zeros_like(starts),
        np.full(n, duration),
    )
    slack = 1.0 + _SLACK
    return not (
        (ext.speed > limits.max_velocity * slack).any()
        or (ext.acceleration > limits.stop_acceleration * slack).any()
    )


def plan_stop(
    starts: Sequence[tuple[np.ndarray, np.ndarray]],
    limits: MotionLimits,
    *,
    dt: float,
    target: np.ndarray | None = None,
) -> StopPlan | None:
    """The shortest stop within ``limits`` from every one of ``starts`` (module
    docstring); ``target``: stop there (an arm that does not follow) instead of
    where the motion brakes to. None when none up to :data:`MAX_STOP_S` passes."""
    positions = np.array([p for p, _ in starts], dtype=np.float64)
    velocities = np.array([v for _, v in starts], dtype=np.float64)
    n = len(starts)
    # The reference state the stop brakes from: a prompt arrival first, then later ones.
    references = sorted({0, n // 4, n // 2})
    # Limits whose acceleration is the stop's (what check_motion holds the hold to).
    stop_limits = dataclasses.replace(
        limits,
        max_acceleration=limits.stop_acceleration,
        action_acceleration=limits.stop_acceleration,
    )
    shortest = max(HOLD_MIN_S, float(dt))
    for k in references:
        duration = shortest
        while duration <= MAX_STOP_S + 1e-12:
            aim = target if target is not None else positions[k] + velocities[k] * duration / 2.0
            aim = np.clip(aim, limits.lower, limits.upper)
            times = np.array([duration])
            if _fast_enough(positions, velocities, aim, duration, stop_limits) and all(
                # The same check every trajectory passes, from every start.
                check_motion(p, aim[None, :], times, stop_limits, start_velocity=v).ok
                for p, v in starts
            ):
                return StopPlan(aim, duration, tuple(starts))
            duration *= 1.25
        if target is not None:
            break
    return None
