"""What the robot experienced, measured from a simulated controller's events.

`ControllerMeasures` is fed by `relay_ros.sim.trajectory_follower.TrajectoryFollower`
(``docs/streaming.md`` of the shared spec): each accepted or rejected trajectory,
each switch from one trajectory to the next and each control cycle. From them it
keeps stall time, the step at each chunk switch, action age, rejections and a
bounded history of the cycles for plots.

At a switch it records, at the same instant, the old command against the new
chunk: the position gap (C0) and the velocity gap (C1) at the new trajectory's
first point still ahead (the first instant the new chunk itself defines; the old
trajectory is evaluated there as the controller would have run it), as the
smoothness checks for chunked policies do, and whether the arm was at rest when the
switch came (a switch from a standing command joins trivially and is counted
apart). Thread-safe: the events come from
the controller's lock, the reads from any thread.

Memory is fixed when the measures are made: the cycles and the action ages live in
:class:`RowRing` buffers allocated (and touched) at their full capacity, so a
simulated arm running for hours holds as much as after its first second (a deque of
per-cycle arrays grew 4.9 MiB a minute, up to 50 MiB; bench/soak.py ``--sim-arm``).
"""

from __future__ import annotations

import math
import threading
from collections import deque
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

__all__ = [
    "REST_SPEED",
    "BoundaryStep",
    "ControllerMeasures",
    "FollowerHistory",
    "FollowerMetrics",
    "RowRing",
]

# Bound on the stored action-age samples used for percentiles (about 16 min at 100 Hz).
_MAX_AGE_SAMPLES = 100_000
# Bound on the stored per-switch boundary-step records.
_MAX_BOUNDARY_RECORDS = 10_000
#: Speed (rad/s or m/s, every joint) under which a command counts as at rest.
REST_SPEED = 0.01


class RowRing:
    """The last ``capacity`` rows of ``width`` float64 values, in one preallocated array.

    Appending is O(1) and allocates nothing: the array is allocated and written once
    at construction (its pages resident from the start), so the memory is
    ``capacity * width * 8`` bytes whatever is appended later. Not thread-safe (the
    measures' lock guards it).

    Raises:
        ValueError: ``capacity`` or ``width`` is not positive.
    """

    def __init__(self, capacity: int, width: int) -> None:
        if capacity < 1 or width < 1:
            raise ValueError(f"a ring of {capacity} rows of {width} values; expected both >= 1")
        self._rows = np.zeros((int(capacity), int(width)), dtype=np.float64)
        self._rows.fill(0.0)  # touch every page now: the memory is taken at start
        self._next = 0
        self._count = 0

    @property
    def capacity(self) -> int:
        """Rows kept at most."""
        return int(self._rows.shape[0])

    @property
    def nbytes(self) -> int:
        """Bytes of the buffer (fixed)."""
        return int(self._rows.nbytes)

    def __len__(self) -> int:
        return self._count

    def append(self, *parts: float | np.ndarray) -> None:
        """Add one row made of ``parts`` (numbers and 1-D arrays, ``width`` values in
        all); past the capacity the oldest row is dropped."""
        row = self._rows[self._next]
        i = 0
        for part in parts:
            if isinstance(part, np.ndarray):
                row[i : i + part.size] = part
                i += part.size
            else:
                row[i] = part
                i += 1
        self._next = (self._next + 1) % self.capacity
        self._count = min(self._count + 1, self.capacity)

    def rows(self) -> np.ndarray:
        """A copy of the kept rows, oldest first: (len, width)."""
        if self._count < self.capacity:
            return self._rows[: self._count].copy()
        return np.concatenate((self._rows[self._next :], self._rows[: self._next]))

    def clear(self) -> None:
        """Forget every row (the buffer stays allocated)."""
        self._next = 0
        self._count = 0


@dataclass(frozen=True, slots=True)
class BoundaryStep:
    """The step at one chunk switch.

    Attributes:
        t: Time the new trajectory took over (s).
        jump: Largest per-joint distance from the last command of the old trajectory
            to the first point of the new one that is still ahead.
        scale: Largest per-joint step between consecutive points of the new chunk
            (of earlier chunks if the new one has none).
        ratio: ``jump / scale``; ~1 is seamless. None when every chunk so far is static.
        at: The instant of the gaps: the new trajectory's first point still ahead.
        position_gap: C0 there: largest per-joint distance between the new point and
            the old trajectory's command at the same instant.
        velocity_gap: C1 there: largest per-joint difference of their velocities
            (per second).
        typical_step: Median over the new chunk's consecutive points of their largest
            per-joint step (0 for a static chunk): "a typical step between points".
        at_rest: The old command moved slower than `REST_SPEED` at the switch.
    """

    t: float
    jump: float
    scale: float
    ratio: float | None
    at: float = 0.0
    position_gap: float = 0.0
    velocity_gap: float = 0.0
    typical_step: float = 0.0
    at_rest: bool = False


@dataclass(frozen=True)
class FollowerMetrics:
    """What the robot experienced, since the first accepted trajectory (or a reset).

    Attributes:
        name: Controller name.
        accepted: Trajectories accepted.
        rejected: Trajectories rejected.
        rejection_reasons: Count per rejection code (see `REJECT_CODES`).
        last_rejection: Reason text of the latest rejection, or None.
        switches: Times an accepted trajectory took over from an earlier one.
        superseded: Accepted trajectories replaced before they ever ran.
        measured_s: Seconds covered by the measures.
        stall_time_s: Total seconds with no future point to follow (holding).
        stall_events: Number of separate holding periods.
        longest_stall_s: Longest single holding period in seconds.
        holding: Whether the controller is holding at the last update.
        boundary_step_max: Largest boundary-step ratio, or None if no switch had one.
        boundary_step_mean: Mean boundary-step ratio, or None.
        boundary_step_last: Ratio at the latest switch, or None.
        boundary_jump_max: Largest boundary jump in joint units (rad or m).
        action_age_samples: Control cycles that executed an action with known t_obs.
        action_age_mean_s: Mean of now - t_obs over those cycles, or None.
        action_age_p50_s: Median action age in seconds, or None.
        action_age_p99_s: 99th percentile action age in seconds, or None.
        action_age_max_s: Largest action age in seconds, or None.
    """

    name: str
    accepted: int = 0
    rejected: int = 0
    rejection_reasons: dict[str, int] = field(default_factory=dict)
    last_rejection: str | None = None
    switches: int = 0
    superseded: int = 0
    measured_s: float = 0.0
    stall_time_s: float = 0.0
    stall_events: int = 0
    longest_stall_s: float = 0.0
    holding: bool = False
    boundary_step_max: float | None = None
    boundary_step_mean: float | None = None
    boundary_step_last: float | None = None
    boundary_jump_max: float = 0.0
    action_age_samples: int = 0
    action_age_mean_s: float | None = None
    action_age_p50_s: float | None = None
    action_age_p99_s: float | None = None
    action_age_max_s: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """Return the metrics as a JSON-friendly dict."""
        return asdict(self)


@dataclass(frozen=True)
class FollowerHistory:
    """Recorded control cycles, for plotting (oldest first, bounded length).

    Attributes:
        joint_names: Column names of the position arrays.
        times: (N,) cycle times in seconds.
        commanded: (N, D) commanded positions.
        positions: (N, D) followed positions.
        switch_times: (M,) times at which a new trajectory took over.
        ages: (N,) action age at each cycle, ``now - t_obs`` of the trajectory it
            executed (s); NaN where unknown (a hold, nothing yet).
    """

    joint_names: tuple[str, ...]
    times: np.ndarray
    commanded: np.ndarray
    positions: np.ndarray
    switch_times: np.ndarray
    ages: np.ndarray


class ControllerMeasures:
    """The measures of one controller, fed by its events.

    Measuring starts at the first accepted trajectory (again after `reset`).

    Args:
        name: Controller name, for `FollowerMetrics`.
        joint_names: Column names of the recorded positions.
        history_length: Control cycles kept for `history` (oldest dropped first).
    """

    # What `_init` sets (and `reset` sets again), declared here for the methods above it.
    _last_rejection: str | None
    _measure_since: float | None
    _measured_until: float
    _stall_time: float
    _stall_events: int
    _longest_stall: float
    _in_stall: bool
    _step_scale: float
    _age_count: int
    _age_sum: float
    _age_max: float | None

    def __init__(self, name: str, joint_names: tuple[str, ...], history_length: int) -> None:
        self._name = name
        self._joint_names = joint_names
        self._history_length = int(history_length)
        self._ages = RowRing(_MAX_AGE_SAMPLES, 1)
        # Per cycle: the time, the commanded and the followed positions, the action age.
        self._history = RowRing(self._history_length, 2 + 2 * len(joint_names))
        self._lock = threading.Lock()
        self._holding = False
        self._init()

    # ------------------------------------------------------------------ events

    def advance(self, now: float, governing_end: float) -> None:
        """Time moved to ``now`` while the trajectory governing it ends at ``governing_end``
        (-inf without one): what lies past its end is stall time."""
        with self._lock:
            if self._measure_since is None or now <= self._measured_until:
                return
            stall = now - max(self._measured_until, governing_end)
            if stall > 0.0:
                if not self._in_stall:
                    self._in_stall = True
                    self._stall_events += 1
                    self._current_stall = 0.0
                self._stall_time += stall
                self._current_stall += stall
                self._longest_stall = max(self._longest_stall, self._current_stall)
            self._measured_until = now

    def accepted(self, now: float, supersedes: bool) -> None:
        """A trajectory was accepted at ``now``; ``supersedes``: one still pending never ran."""
        with self._lock:
            if self._measure_since is None:
                self._measure_since = now
                self._measured_until = now
            if supersedes:
                self._superseded += 1
            self._accepted += 1
            self._in_stall = False
            self._current_stall = 0.0

    def rejected(self, code: str, reason: str) -> None:
        """A trajectory was rejected with one of ``REJECT_CODES`` and its reason."""
        with self._lock:
            self._rejected += 1
            self._reject_counts[code] = self._reject_counts.get(code, 0) + 1
            self._last_rejection = reason

    def adopted(
        self,
        now: float,
        *,
        first: bool,
        positions: np.ndarray,
        before: np.ndarray,
        at: float,
        ahead: np.ndarray,
        old: tuple[np.ndarray, np.ndarray],
        new: tuple[np.ndarray, np.ndarray],
        old_speed: float,
    ) -> None:
        """A trajectory took over at control cycle ``now``.

        Args:
            first: No trajectory ran before it (not a switch).
            positions: (N, D) its points.
            before: The old command at ``now`` (the boundary jump starts there).
            at: The instant of the gaps (its first point still ahead).
            ahead: That point's positions.
            old: Old trajectory's command (positions, velocities) at ``at``.
            new: The new point's (positions, velocities).
            old_speed: Largest joint speed of the old command at ``now``.
        """
        steps = np.abs(np.diff(positions, axis=0)).max(axis=1) if len(positions) > 1 else None
        own_scale = float(steps.max()) if steps is not None else 0.0
        typical = float(np.median(steps)) if steps is not None else 0.0
        with self._lock:
            earlier_scale = self._step_scale
            self._step_scale = max(self._step_scale, own_scale)
            if first:
                return
            self._switches += 1
            self._switch_times.append(now)
            jump = float(np.max(np.abs(ahead - before)))
            scale = own_scale if own_scale > 1e-12 else earlier_scale
            self._boundaries.append(
                BoundaryStep(
                    t=now,
                    jump=jump,
                    scale=scale,
                    ratio=jump / scale if scale > 1e-12 else None,
                    at=at,
                    position_gap=float(np.max(np.abs(new[0] - old[0]))),
                    velocity_gap=float(np.max(np.abs(new[1] - old[1]))),
                    typical_step=typical,
                    at_rest=old_speed < REST_SPEED,
                )
            )

    def cycle(
        self,
        now: float,
        commanded: np.ndarray,
        followed: np.ndarray,
        t_obs: float | None,
        holding: bool,
    ) -> None:
        """A control cycle at ``now`` commanded and followed these positions; ``t_obs``
        of the trajectory it executed (None: unknown or none); ``holding``: past its end."""
        with self._lock:
            self._holding = holding
            age = math.nan if t_obs is None else now - t_obs
            if self._measure_since is not None and t_obs is not None:
                self._age_count += 1
                self._age_sum += age
                self._age_max = age if self._age_max is None else max(self._age_max, age)
                self._ages.append(age)
            self._history.append(now, commanded, followed, age)

    # ------------------------------------------------------------------ reads

    def metrics(self) -> FollowerMetrics:
        """Return the measures up to the latest event."""
        with self._lock:
            ratios = [b.ratio for b in self._boundaries if b.ratio is not None]
            ages = self._ages.rows()[:, 0]
            return FollowerMetrics(
                name=self._name,
                accepted=self._accepted,
                rejected=self._rejected,
                rejection_reasons=dict(self._reject_counts),
                last_rejection=self._last_rejection,
                switches=self._switches,
                superseded=self._superseded,
                measured_s=(
                    0.0
                    if self._measure_since is None
                    else self._measured_until - self._measure_since
                ),
                stall_time_s=self._stall_time,
                stall_events=self._stall_events,
                longest_stall_s=self._longest_stall,
                holding=self._holding,
                boundary_step_max=max(ratios) if ratios else None,
                boundary_step_mean=float(np.mean(ratios)) if ratios else None,
                boundary_step_last=ratios[-1] if ratios else None,
                boundary_jump_max=max((b.jump for b in self._boundaries), default=0.0),
                action_age_samples=self._age_count,
                action_age_mean_s=self._age_sum / self._age_count if self._age_count else None,
                action_age_p50_s=float(np.percentile(ages, 50)) if ages.size else None,
                action_age_p99_s=float(np.percentile(ages, 99)) if ages.size else None,
                action_age_max_s=self._age_max,
            )

    def boundary_steps(self) -> list[BoundaryStep]:
        """Return the step of every switch so far (bounded, oldest first)."""
        with self._lock:
            return list(self._boundaries)

    def history(self) -> FollowerHistory:
        """Return the recorded control cycles and switch times."""
        with self._lock:
            dof = len(self._joint_names)
            rows = self._history.rows()
            return FollowerHistory(
                joint_names=self._joint_names,
                times=rows[:, 0],
                commanded=rows[:, 1 : 1 + dof],
                positions=rows[:, 1 + dof : 1 + 2 * dof],
                switch_times=np.asarray(self._switch_times, dtype=np.float64),
                ages=rows[:, 1 + 2 * dof],
            )

    def reset(self) -> None:
        """Clear measures, counters and history; measuring restarts at the next accepted
        trajectory."""
        with self._lock:
            self._init()

    def _init(self) -> None:
        self._accepted = 0
        self._rejected = 0
        self._reject_counts: dict[str, int] = {}
        self._last_rejection: str | None = None
        self._switches = 0
        self._superseded = 0
        self._measure_since: float | None = None
        self._measured_until = 0.0
        self._stall_time = 0.0
        self._stall_events = 0
        self._longest_stall = 0.0
        self._in_stall = False
        self._current_stall = 0.0
        self._boundaries: deque[BoundaryStep] = deque(maxlen=_MAX_BOUNDARY_RECORDS)
        self._step_scale = 0.0
        self._age_count = 0
        self._age_sum = 0.0
        self._age_max: float | None = None
        self._ages.clear()
        self._history.clear()
        self._switch_times: deque[float] = deque(maxlen=_MAX_BOUNDARY_RECORDS)
