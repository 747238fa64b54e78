"""A chunk re-timed for publication (:class:`Publication`), and what it commands over time.

The :class:`~relay_ros.pipeline.scheduler.ChunkScheduler` builds publications; the
trajectory messages, the holding logic and the checks read them. The helpers here
answer "what did a chunk say for time t" (:func:`chunk_at`) and give the smoothstep
weights of a cross-fade (:func:`smooth_weights`). Plain Python and NumPy.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from relay_ros.pipeline.ramp_in import RampIn

__all__ = ["Publication", "chunk_at", "smooth_weights"]


def smooth_weights(count: int) -> np.ndarray:
    """The new chunk's weights of a ``count``-point cross-fade: ``s((j+1)/(count+1))``
    for ``j = 0..count-1`` with the smoothstep ``s(x) = 3x^2 - 2x^3``, so that the
    blend leaves the old chunk and joins the new one with zero slope."""
    x = np.arange(1, count + 1, dtype=np.float64) / (count + 1)
    return x * x * (3.0 - 2.0 * x)


@dataclass(frozen=True, eq=False)
class Publication:
    """One chunk re-timed for publication; arrays are read-only.

    Attributes:
        stamp: header.stamp to publish with (= the poll time), seconds.
        positions: (N, D) positions, one row per published action.
        time_from_start: (N,) seconds after ``stamp``, spacing ``dt``, first
            >= ``min_lead_s`` (within ``TIME_EPS_S``), strictly increasing.
        t_obs: observation time of the chunk, seconds.
        first_index: chunk index of ``positions[0]``.
        switch_time: when the next chunk takes over (time of the last executed
            action), seconds.
        chunk_seq: 1-based sequence number of the chunk (order of receipt).
        blended: how many leading points the smoothing changed
            (:mod:`~relay_ros.pipeline.smoothing`).
        shift_s: how much later than ``t_obs + i*dt`` action ``i`` runs (s): the time
            the arm stood still between the observation and the publication, which
            is not skipped (a multiple of dt; 0 while the arm moved), plus the time a
            ramp-in loses after the observation.
        memo: What the smoothing keeps for the next switch (``Smoothed.memo``).
        ramp: The ramp-in whose stretched times these are
            (:mod:`~relay_ros.pipeline.ramp_in`), None: the points run on the chunk's
            own timeline.
        velocities: (N, D) the velocities published with the points, set by the gate
            once it knows where the controller starts them
            (:func:`~relay_ros.pipeline.interpolation.published_velocities`); None:
            the monotone rule of the points alone.
    """

    stamp: float
    positions: np.ndarray
    time_from_start: np.ndarray
    t_obs: float
    first_index: int
    switch_time: float
    chunk_seq: int
    blended: int = 0
    shift_s: float = 0.0
    memo: Any = None
    ramp: RampIn | None = None
    velocities: np.ndarray | None = None

    @property
    def origin(self) -> float:
        """When action 0 of the chunk runs on this publication's timeline (seconds):
        ``t_obs + shift_s``; action ``i`` runs at ``origin + i*dt`` (during a ramp-in,
        later: at the stretched :attr:`times`; at ``origin + i*dt`` once it is over)."""
        return self.t_obs + self.shift_s

    def delayed(self, delay_s: float) -> Publication:
        """This publication ``delay_s`` seconds later as a whole: every point, the
        switch, the timeline and its ramp-in move together."""
        tfs = self.time_from_start + delay_s
        tfs.setflags(write=False)
        return dataclasses.replace(
            self,
            time_from_start=tfs,
            switch_time=self.switch_time + delay_s,
            shift_s=self.shift_s + delay_s,
            ramp=None if self.ramp is None else self.ramp.delayed(delay_s),
            velocities=None,  # they depend on the first segment, which the delay lengthens
        )

    def unramped(self) -> Publication:
        """This publication without its ramp-in's time warp: each point at the chunk
        time it was stretched from (:meth:`RampIn.timeline` after the stamp), the
        timeline (``shift_s``) and the switch as if no ramp ran from the stamp on;
        itself when none runs. What a re-timing that replaces the ramp starts from
        (:func:`~relay_ros.pipeline.gate.retiming.ramp_head`)."""
        ramp = self.ramp
        if ramp is None:
            return self
        at = float(ramp.timeline(np.array([self.stamp]))[0])
        tfs = ramp.timeline(self.times) - at
        tfs.setflags(write=False)
        switch = float(ramp.timeline(np.array([self.switch_time]))[0]) - at
        return dataclasses.replace(
            self,
            time_from_start=tfs,
            switch_time=self.stamp + switch,
            shift_s=self.shift_s - ramp.remaining(self.stamp),
            ramp=None,
            velocities=None,
        )

    @property
    def timeline_times(self) -> np.ndarray:
        """Where each point runs on the chunk timeline (action ``i`` at ``origin +
        i*dt``), seconds: :attr:`times`, or, while a ramp-in stretches them, the chunk
        times they were stretched from (:meth:`RampIn.timeline`)."""
        times = self.times
        return times if self.ramp is None else self.ramp.timeline(times)

    @property
    def times(self) -> np.ndarray:
        """Absolute time of each point, ``stamp + time_from_start`` (seconds)."""
        return self.stamp + self.time_from_start

    @property
    def end_time(self) -> float:
        """Absolute time of the last point (seconds)."""
        return float(self.stamp + self.time_from_start[-1])

    @property
    def first_time(self) -> float:
        """Absolute time of the first point (seconds)."""
        return float(self.stamp + self.time_from_start[0])


def chunk_at(chunk: np.ndarray, origin: float, dt: float, times: np.ndarray) -> np.ndarray:
    """A chunk's actions (all H rows, not only the published ones) at ``times``, seconds.

    Action ``i`` runs at ``origin + i*dt``; between two actions linear interpolation,
    before the first and after the last the end rows.
    """
    f = (np.asarray(times, dtype=np.float64) - origin) / dt
    f = np.clip(f, 0.0, chunk.shape[0] - 1)
    i0 = np.floor(f).astype(np.int64)
    i1 = np.minimum(i0 + 1, chunk.shape[0] - 1)
    a = (f - i0)[:, None]
    return (1.0 - a) * chunk[i0] + a * chunk[i1]
