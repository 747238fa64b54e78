"""What a smoothing strategy sees when a new chunk takes over, and what it gives back.

At every switch the :class:`~relay_ros.pipeline.scheduler.ChunkScheduler` has a new
chunk re-timed for publication (latency compensated: one row per published point)
and, unless the arm stands (the first chunk after a start, a hold or a reset), the
previous chunk as published and what the controllers follow now (the gate's one model
of the commanded motion, handed to the scheduler at each peek). A :class:`Smoothing`
turns the new rows into the positions that are published, from a :class:`Switch`; it
returns a :class:`Smoothed`. Strategies are values without hidden state: what one needs from
the previous switch (the ensemble's weights) travels in :attr:`Smoothed.memo` and
comes back in :attr:`Motion.memo`, so that a refused publication (the scheduler's
``peek`` without a ``commit``) changes nothing.

Plain NumPy; times in seconds on the node clock, positions in the scheduler's chunk
columns (the commanded joints).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from relay_ros.pipeline.interpolation import ControllerTrajectory

__all__ = [
    "Motion",
    "NoSmoothing",
    "Smoothed",
    "Smoothing",
    "SmoothingError",
    "Switch",
    "changed_rows",
]


class SmoothingError(ValueError):
    """A smoothing that does not exist, or one the connected server cannot support."""


@dataclass(frozen=True, eq=False)
class Motion:
    """What the controllers follow when the new chunk takes over.

    Attributes:
        chunk: (H, D) the previous chunk, its published rows as they were published.
        origin: When its action 0 runs (s): action ``i`` at ``origin + i*dt`` on the
            chunk timeline (:attr:`Switch.row_times`).
        end_time: Its last published point (s); the controller holds it after.
        followed: What the controllers follow, as they sample it: the gate's
            commanded motion (:meth:`~relay_ros.pipeline.gate.controller.ControllerModel.followed`;
            in a dry run the arm as measured, since nothing published moved it).
            None when that is not known (the arm not measured and nothing commanded:
            the publication check refuses the chunk anyway).
        memo: What the strategy returned with the previous publication.
    """

    chunk: np.ndarray
    origin: float
    end_time: float
    followed: ControllerTrajectory | None
    memo: Any = None


@dataclass(frozen=True, eq=False)
class Switch:
    """A new chunk about to be published.

    Attributes:
        stamp: The publication's stamp (now), seconds.
        time_from_start: (N,) the published points' times after the stamp.
        positions: (N, D) the new chunk's rows for those points.
        chunk: (H, D) the whole new chunk.
        origin: When its action 0 runs (s); ``positions[j]`` is row
            ``first_index + j``, at ``origin + (first_index + j)*dt``.
        first_index: The chunk row of ``positions[0]``.
        dt: The action period (s).
        execute_horizon: Rows of the new chunk that run before the next takes over.
        previous: What the controllers follow now; None while the arm stands.
    """

    stamp: float
    time_from_start: np.ndarray
    positions: np.ndarray
    chunk: np.ndarray
    origin: float
    first_index: int
    dt: float
    execute_horizon: int
    previous: Motion | None

    @property
    def times(self) -> np.ndarray:
        """Absolute time of each published point (s)."""
        return self.stamp + self.time_from_start

    @property
    def row_times(self) -> np.ndarray:
        """When each published row runs on the chunk timeline,
        ``origin + (first_index + j)*dt`` (s), on which :attr:`Motion.origin` places the
        previous chunk's rows: the same instants as :attr:`times`, except while a
        ramp-in stretches the points (:mod:`~relay_ros.pipeline.ramp_in`). What
        compares two chunks row by row uses these."""
        rows = self.first_index + np.arange(len(self.time_from_start), dtype=np.float64)
        return self.origin + rows * self.dt


@dataclass(frozen=True, eq=False)
class Smoothed:
    """What a strategy publishes.

    Attributes:
        positions: (N, D) float64, one row per published point.
        changed: How many leading points differ from the new chunk's rows.
        memo: Handed back in :attr:`Motion.memo` at the next switch.
    """

    positions: np.ndarray
    changed: int
    memo: Any = None


def changed_rows(original: np.ndarray, smoothed: np.ndarray) -> int:
    """How many leading rows of ``smoothed`` differ from ``original`` (the index of the
    last differing row plus one; 0 when they are equal)."""
    differ = np.flatnonzero(np.any(original != smoothed, axis=1))
    return int(differ[-1]) + 1 if differ.size else 0


class Smoothing(ABC):
    """One way of joining a new chunk to the motion the controllers follow.

    Class attributes:
        name: The ``smoothing`` parameter value that selects it.
        needs_prefix: Only a server that advertises ``action_prefix`` supports it;
            the observations then carry the committed actions
            (:mod:`~relay_ros.pipeline.action_prefix`).
        continuous: Keeps position and velocity continuous at a switch and stays
            inside the velocity and acceleration limits whatever the chunks.
    """

    name: ClassVar[str]
    needs_prefix: ClassVar[bool] = False
    continuous: ClassVar[bool] = False

    @abstractmethod
    def smooth(self, switch: Switch) -> Smoothed:
        """The positions to publish for ``switch`` (the new rows unchanged when there
        is nothing to join: ``switch.previous`` is None)."""

    def describe(self) -> str:
        """One line for the logs and ``/diagnostics``: the name and its settings."""
        return self.name


@dataclass(frozen=True)
class NoSmoothing(Smoothing):
    """``none``: the new chunk's rows as they are; the controller joins them to its
    commanded state in one segment (a jump when two chunks disagree)."""

    name: ClassVar[str] = "none"

    def smooth(self, switch: Switch) -> Smoothed:
        return Smoothed(np.array(switch.positions, dtype=np.float64), 0)
