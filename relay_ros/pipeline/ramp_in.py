"""The gentle start: the first motion after the arm stood still, from rest to full speed.

After activation, ``~/enable`` true, the dead-man switch pressed again, or any hold,
the scheduler's first publication joins an arm that stands (no publication of ours
moves it: :class:`~relay_ros.pipeline.scheduler.ChunkScheduler`). Without a ramp the
controller's cubic into the first point takes the arm from rest to the chunk's full
speed within one action period (20 ms at 50 Hz): an acceleration of up to four times
the speed over the period, 100 rad/s^2 for a chunk at 0.5 rad/s.

:class:`RampIn` is the time warp that starts it gently instead. From its ``start``,
that publication's stamp, the chunk's time runs at a fraction of real time that
rises linearly from 0 to 1 over ``duration_s`` (the ``ramp_in_s`` parameter),
``s(t) = (t - start) / R``: a chunk moving at speed ``v`` is commanded at
``v s(t)``, a constant acceleration ``v / R`` from rest to full speed (the
trapezoidal start of robot motion planners), the velocity continuous at both ends
(0 at the start, the chunk's own at the end). The whole publication runs on the
ramp, the way from where the arm stands to the first point included (over
``sqrt(2 R lead)`` instead of the lead of one or two action periods). Only the times
change, never the positions, so the ramp never moves faster than the chunk. The
controller's cubic into the first point, whose velocity is a forward difference
while the arm stands at the stamp, accelerates at up to ``2 (1 + sqrt 2) v / R``
(4.8 rad/s^2 for 0.5 rad/s over 0.5 s), against ``4 v`` over one or two action
periods without the ramp (50 to 100 rad/s^2).

**The timeline.** By time ``t`` the ramp has lost ``L(t)``, the integral of
``1 - s`` (``R / 2`` in all). Everything the scheduler times runs on the chunk
timeline ``V(t) = t + R/2 - L(t)``: a chunk observed at ``t_obs`` has its action
``i`` at ``V(t_obs) + i dt``, which is real time once the ramp is over (``V(t) = t``)
and, during the ramp, runs at real time ``V^-1`` of it. So:

- a publication's points are stretched (:meth:`RampIn.stretch`): the nominal offset
  ``tau`` after the stamp is published at the real offset ``x`` with
  ``integral of s from stamp to stamp + x = tau``;
- its timeline (``Publication.shift_s``, and with it the switch) moves by the time
  the ramp still loses after the observation (:meth:`RampIn.remaining`), so later
  chunks and switches join where the robot is;
- a chunk observed during the ramp is placed by the time the ramp lost between its
  observation and its publication (:meth:`RampIn.lost`): the robot ran only that much
  of the actions since the observation, not the whole wall-clock time.

A published point at real time ``t`` lies at ``V(t)`` on its chunk's timeline
(:meth:`RampIn.timeline`, the inverse of the stretch): the scheduler keeps each
published point as the chunk's row there, for the next switch.

The gate checks the stretched publication like any other (position, velocity and
acceleration from where the controller starts it) and follows it as published (its
:class:`~relay_ros.pipeline.gate.controller.CommandedMotion`, the one model of the
commanded state): the splice joins stretched publications at the times they are
published, the action prefix samples that motion at the stretched times of the new
chunk's rows (``ChunkScheduler.chunk_times``), and a hold during the ramp stops from
it; the next start ramps again. Where a joint has an acceleration limit that the ramp
is too short for, the gate re-times the start of the unstretched publication itself
(:func:`~relay_ros.pipeline.gate.retiming.ramp_head`, no shorter than the ramp)
instead: one ramp, never a ramp of a ramp.

Plain Python and NumPy; times in seconds on the node clock.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

__all__ = ["DEFAULT_RAMP_IN_S", "MAX_RAMP_IN_S", "RampIn", "check_ramp_in"]

#: The ``ramp_in_s`` parameter's default (docs/node.md, "Gentle start"): full speed half
#: a second after a start, at a cost of a quarter second of the task per start.
DEFAULT_RAMP_IN_S = 0.5
#: The longest ramp the parameter allows (s).
MAX_RAMP_IN_S = 10.0


def check_ramp_in(duration_s: object) -> float:
    """``duration_s`` as a float, if it is a ramp length: a finite number of seconds in
    ``[0, MAX_RAMP_IN_S]`` (0: no ramp).

    Raises:
        ValueError: anything else (names the value and the range).
    """
    if isinstance(duration_s, bool) or not isinstance(duration_s, (int, float, np.floating)):
        raise ValueError(f"ramp_in_s {duration_s!r} must be a number of seconds")
    value = float(duration_s)
    if not (math.isfinite(value) and 0.0 <= value <= MAX_RAMP_IN_S):
        raise ValueError(f"ramp_in_s {duration_s!r} must be in [0, {MAX_RAMP_IN_S:g}] s")
    return value


@dataclass(frozen=True)
class RampIn:
    """A ramp-in from rest that starts at ``start`` and reaches full speed ``duration_s``
    later (module docstring).

    Attributes:
        start: When the ramp starts (s, node clock): the stamp of the first
            publication after the arm stood still.
        duration_s: Its length ``R`` (> 0).
    """

    start: float
    duration_s: float

    def __post_init__(self) -> None:
        if not math.isfinite(self.start):
            raise ValueError(f"ramp start {self.start!r} must be a finite time")
        if not (math.isfinite(self.duration_s) and self.duration_s > 0.0):
            raise ValueError(f"ramp duration {self.duration_s!r} must be a number of seconds > 0")

    @property
    def end(self) -> float:
        """When the chunks run at full speed again (s)."""
        return self.start + self.duration_s

    def speed(self, t: float) -> float:
        """The ramp's speed at ``t``: the fraction of real time the chunk's time runs at
        (0 at the start, 1 from the end on, and 1 before the start)."""
        d = t - self.start
        return d / self.duration_s if 0.0 <= d < self.duration_s else 1.0

    def _lost_by(self, t: float) -> float:
        """``L(t)``: the time lost from the start to ``t`` (0 before, ``R/2`` after)."""
        d = t - self.start
        if d <= 0.0:
            return 0.0
        if d >= self.duration_s:
            return 0.5 * self.duration_s
        return d - d * d / (2.0 * self.duration_s)

    def lost(self, a: float, b: float) -> float:
        """Time the ramp lost between ``a`` and ``b`` (``b - a`` minus the chunk time that
        ran in between), >= 0 for ``a <= b``; exactly 0 when both lie on one side of it."""
        return self._lost_by(b) - self._lost_by(a)

    def remaining(self, t: float) -> float:
        """Time the ramp still loses after ``t``: how far ahead of real time the chunk
        timeline is at ``t`` (``R/2`` before the start, exactly 0 from the end on)."""
        return 0.5 * self.duration_s - self._lost_by(t)

    def stretch(self, stamp: float, offsets: np.ndarray) -> np.ndarray:
        """The real offsets after ``stamp`` at which the chunk times ``offsets`` after
        ``stamp`` run (each ``x`` with ``integral of s over [stamp, stamp + x] = tau``);
        ``offsets`` itself where the ramp is over at ``stamp``. Increasing offsets stay
        increasing, and none comes earlier."""
        taus = np.asarray(offsets, dtype=np.float64)
        d = stamp - self.start
        if d >= self.duration_s:
            return taus
        r = self.duration_s
        # The chunk time run from the start to the stamp, then to each point.
        before = d if d <= 0.0 else d * d / (2.0 * r)
        m = before + taus
        inside = np.sqrt(2.0 * r * np.clip(m, 0.0, 0.5 * r))
        reached = np.where(m <= 0.0, m, np.where(m >= 0.5 * r, m + 0.5 * r, inside))
        out = reached - d
        # Points the ramp does not reach (all before its start) keep their offsets exactly.
        return np.where(m <= 0.0, taus, out)

    def timeline(self, times: np.ndarray) -> np.ndarray:
        """``V(t) = t + remaining(t)`` at each of the real ``times`` (module docstring):
        where on its chunk's timeline (action ``i`` at ``origin + i*dt``) a point
        published at ``t`` runs, the inverse of :meth:`stretch`; ``times`` itself from
        the ramp's end on, and ``R/2`` later before its start."""
        t = np.asarray(times, dtype=np.float64)
        r = self.duration_s
        d = np.clip(t - self.start, 0.0, r)
        remaining = 0.5 * r - (d - d * d / (2.0 * r))
        return t + np.where(d >= r, 0.0, remaining)

    def delayed(self, delay_s: float) -> RampIn:
        """The same ramp ``delay_s`` later (a publication started later as a whole)."""
        return dataclasses.replace(self, start=self.start + delay_s)
