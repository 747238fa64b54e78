"""Turn action chunks into timed trajectory publications (pure, time injected).

A chunk is an (H, D) array computed from an observation taken at ``t_obs``;
action ``i`` is meant for ``t_obs + i*dt``. :class:`ChunkScheduler` decides when
to ask the policy for the next chunk and when and how to publish each chunk so
that joint_trajectory_controller follows it without pauses or jumps (see
``docs/streaming.md``):

- **Switch**: a chunk published at ``stamp`` with first kept index ``k``
  executes E actions, ``k .. k+E-1``; its switch time is the time of the last
  of them, ``t_obs + (k+E-1)*dt``. The next chunk is published then (its first
  point lies at least ``min_lead_s`` later, normally in the slot of action
  ``k+E``). The controller replaces a running trajectory on arrival, so a
  reply that arrives earlier is *held* until the switch time; one that arrives
  later is published at once.
- **Early request** (mode ``"early"``): the next observation is sent at
  ``switch_time - lead``; ``lead`` is ``request_lead_s`` or, when that is
  ``None`` ("auto"), the rule of :mod:`~relay_ros.pipeline.adaptive_timing` over
  the measured latencies (the :class:`LatencyStats` given to the scheduler). (An
  early request is always timed from a published chunk, whose reply was
  measured, so no initial guess is ever needed.) The whole rest of the chunk is
  published, so a late reply leaves the robot following the current chunk
  instead of holding still. With ``adaptive_execute_horizon`` E follows the
  latency too (:meth:`ChunkScheduler.execute_horizon`).
- **Sync** (mode ``"sync"``, openpi's ``ActionChunkBroker``): only the E executed
  actions are published and the next request is sent when they are used up.
- **Latency compensation**: on publication at ``now``, the first point goes in
  the first slot ``k`` with ``t_obs + k*dt >= now + min_lead_s``; the actions
  before it are dropped while the arm ran them (on the previous trajectory).
- **Joining a still arm**: actions the arm never ran are not dropped. When no
  trajectory of ours moved the arm since ``t_obs`` (the first chunk after a
  start, a hold or a reset; sync mode, whose trajectory ended at the request), the
  chunk starts at action 0 in slot ``k``, re-timed by ``k`` slots
  (``Publication.shift_s``); when the previous trajectory ended between ``t_obs``
  and ``now``, at the first action after its end. With an action prefix the
  server reproduces (``request_sent(committed_steps=d)``), at action
  ``min(k, d)``: rows before ``d`` are what the arm follows anyway. A chunk is
  dropped (``chunks_dropped_late``) only when nothing of it is left after the
  previous trajectory, and a new one requested.
- **Ramp-in** (``ramp_in_s``): the first publication after the arm stood still
  (``current`` is None: a start, a hold, a reset) starts a
  :class:`~relay_ros.pipeline.ramp_in.RampIn` at its stamp. Its points, and those of
  every chunk observed before the ramp ends, are stretched from rest to full speed;
  their timelines (``shift_s``, the switch) move by the time the ramp still loses,
  and a chunk observed during the ramp is placed by the time it lost since the
  observation (:meth:`RampIn.lost`), so each joins where the robot is. The smoothing
  sees the stretched times.
- **Smoothing**: the re-timed rows go through the configured strategy
  (:mod:`~relay_ros.pipeline.smoothing`), which sees the previous chunk as it was
  published and what the controllers follow, handed in by the caller of
  :meth:`ChunkScheduler.peek` (the gate's
  :class:`~relay_ros.pipeline.gate.controller.CommandedMotion`, the one model of
  the commanded state: the scheduler keeps none of its own).

Times are float seconds on the node clock. Comparisons allow ``TIME_EPS_S``
(1 ns, the ROS time resolution) so that float rounding never moves an action by
one slot. The scheduler is not thread-safe: call it from one thread (the node's
timer); only :attr:`ChunkScheduler.latencies` may be read from anywhere.

Who records what: the caller that receives replies records each reply's latency
in the :class:`LatencyStats` it passes in (the streaming core does, for every
action reply, refused ones too, and keeps it across reconnects); the scheduler
only reads it. The scheduler owns the timeline, the retry deadline, the stall
time and the count of chunks it dropped for arriving too late.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import numpy as np

from relay_ros.pipeline.adaptive_timing import adaptive_execute_horizon, adaptive_lead
from relay_ros.pipeline.interpolation import ControllerTrajectory
from relay_ros.pipeline.publication import Publication
from relay_ros.pipeline.ramp_in import RampIn
from relay_ros.pipeline.scheduler_config import SchedulerConfig, SchedulerConfigError
from relay_ros.pipeline.smoothing import Motion, Switch
from relay_ros.pipeline.stats import LatencyStats

__all__ = ["TIME_EPS_S", "ChunkError", "ChunkScheduler", "SchedulerStateError"]

_log = logging.getLogger(__name__)

TIME_EPS_S = 1e-9


class ChunkError(ValueError):
    """A chunk given to the scheduler has the wrong shape or non-finite values."""


class SchedulerStateError(RuntimeError):
    """Scheduler methods were called out of order (e.g. a reply without a request)."""


@dataclass
class _Active:
    chunk: np.ndarray  # the chunk, its published rows as published
    publication: Publication


@dataclass
class _Pending:
    chunk: np.ndarray
    t_obs: float
    due: float
    seq: int
    committed_steps: int  # leading rows that repeat what the robot follows from t_obs on


class ChunkScheduler:
    """State machine from chunk replies to timed publications (see module docs).

    Typical use from the node's timer, every tick at time ``now``::

        if sched.wants_request(now): send observation; sched.request_sent(now)
        ...reply arrived: latencies.add(now - t_obs)
                          sched.chunk_received(chunk, t_obs, now)
        ...or failed:     sched.request_failed(now)
        pub = sched.peek(now, followed)   # what the controllers follow; check it, then:
        sched.commit(pub) or sched.refuse(pub, now, reason)

    Args:
        config: The settings.
        latencies: Reply latencies the auto lead reads, recorded by the caller;
            pass the same instance to the next scheduler (after a reconnect) to
            keep the measurements. Default: a new one of ``latency_window``.
    """

    def __init__(self, config: SchedulerConfig, latencies: LatencyStats | None = None) -> None:
        self._cfg = config
        self.latencies = latencies if latencies is not None else LatencyStats(config.latency_window)
        self._dropped_late = 0
        self._current: _Active | None = None
        self._pending: _Pending | None = None
        self._in_flight: float | None = None
        self._in_flight_committed = 0
        self._discard_reply = False
        self._retry_not_before = -math.inf
        self._seq = 0
        self._stall_s = 0.0
        self._ramp: RampIn | None = None  # the ramp-in of the last start (ramp_in)

    # ------------------------------------------------------------------ state
    @property
    def config(self) -> SchedulerConfig:
        """The configuration this scheduler runs with."""
        return self._cfg

    @property
    def current(self) -> Publication | None:
        """The publication the controller is following, if any."""
        return self._current.publication if self._current is not None else None

    @property
    def has_pending(self) -> bool:
        """A received chunk is held until its publication time."""
        return self._pending is not None

    @property
    def request_in_flight(self) -> bool:
        """A request was sent and neither a reply nor a failure came back yet."""
        return self._in_flight is not None

    @property
    def chunks_dropped_late(self) -> int:
        """Chunks dropped because none of their actions was still in the future."""
        return self._dropped_late

    def reconfigure(self, config: SchedulerConfig) -> None:
        """Run with ``config`` from now on (a live parameter change).

        The lead, retry delay and mode apply to the next request; execute
        horizon and smoothing to the next publication. The chunk being followed
        and a held chunk stay as they are.

        Raises:
            SchedulerConfigError: ``dt`` or ``horizon`` differ (they come from
                the server and only change with a new scheduler).
        """
        if config.dt != self._cfg.dt or config.horizon != self._cfg.horizon:
            raise SchedulerConfigError(
                f"reconfigure cannot change dt ({self._cfg.dt} -> {config.dt}) or horizon "
                f"({self._cfg.horizon} -> {config.horizon}); they come from the server"
            )
        self._cfg = config

    def request_lead(self) -> float:
        """The lead in seconds used for early requests now (0 in sync mode).

        ``request_lead_s``, or in auto mode
        :func:`~relay_ros.pipeline.adaptive_timing.adaptive_lead` of the measured
        latencies; either way at most
        ``(H-1)*dt - min_lead_s`` (and >= 0): a reply to an observation taken
        earlier than that before the switch would have no action left at the
        switch and would be dropped.
        """
        cfg = self._cfg
        if cfg.mode == "sync":
            return 0.0
        if cfg.request_lead_s is not None:
            lead = cfg.request_lead_s
        else:
            measured = self.latencies.percentile(cfg.timing.lead_percentile)
            lead = adaptive_lead(measured, cfg.timing)
        return max(0.0, min(lead, (cfg.horizon - 1) * cfg.dt - cfg.effective_min_lead_s))

    def execute_horizon(self) -> int:
        """E for the next publication: ``execute_horizon``, or with
        ``adaptive_execute_horizon`` the latency's
        (:func:`~relay_ros.pipeline.adaptive_timing.adaptive_execute_horizon`, at most
        ``execute_horizon``)."""
        cfg = self._cfg
        if not cfg.adaptive_execute_horizon:
            return cfg.execute_horizon
        median = self.latencies.percentile(50.0)
        return adaptive_execute_horizon(median, cfg.dt, cfg.execute_horizon, cfg.timing)

    def next_request_time(self) -> float | None:
        """Earliest time the next request should be sent, in seconds.

        ``-inf`` means at once; ``None`` means not now: a request is in flight or
        a received chunk is still held (the next request is timed from it once
        it is published).
        """
        if self._in_flight is not None or self._pending is not None:
            return None
        if self._current is None:
            return self._retry_not_before
        due = self._current.publication.switch_time - self.request_lead()
        return max(due, self._retry_not_before)

    @property
    def publication_due(self) -> float | None:
        """When the held chunk is due (:meth:`peek` returns it), seconds; None when none is held."""
        return self._pending.due if self._pending is not None else None

    def wants_request(self, now: float) -> bool:
        """Whether the node should take an observation and send it now."""
        due = self.next_request_time()
        return due is not None and now >= due - TIME_EPS_S

    def stall_time(self, now: float) -> float:
        """Seconds the controller had no future point to follow since the first
        publication of each episode (ends of trajectories until the next one),
        including an ongoing stall up to ``now``."""
        total = self._stall_s
        if self._current is not None:
            total += max(0.0, now - self._current.publication.end_time)
        return total

    # --------------------------------------------------------------- requests
    def request_sent(self, t_obs: float, *, committed_steps: int = 0) -> None:
        """Record that an observation taken at ``t_obs`` was sent.

        ``committed_steps``: how many leading rows of the reply repeat what the robot
        follows from ``t_obs`` on (the ``action_prefix`` the server honours,
        ``action_prefix.committed_prefix``); 0 without a prefix. A reply that comes
        while the arm stands still may start at any of them (module docstring,
        "Joining a still arm").
        """
        if self._in_flight is not None:
            raise SchedulerStateError(
                f"request_sent(t_obs={t_obs}) while the request for t_obs={self._in_flight} "
                "is still in flight; at most one request may be in flight"
            )
        self._in_flight = float(t_obs)
        self._in_flight_committed = max(0, int(committed_steps))

    def request_failed(self, now: float, reason: str | None = None) -> None:
        """The request in flight failed (connection error, error reply or a chunk
        refused by safety): request again after ``retry_delay_s``. ``reason`` is
        logged at debug level."""
        if self._in_flight is None:
            raise SchedulerStateError("request_failed() without a request in flight")
        self._in_flight = None
        self._discard_reply = False
        self._retry_not_before = now + self._cfg.retry_delay_s
        if reason:
            _log.debug("request failed at %.6f: %s", now, reason)

    def chunk_received(self, chunk: np.ndarray, t_obs: float, now: float) -> bool:
        """A reply chunk (H, D) for the observation taken at ``t_obs`` arrived at ``now``.

        Returns ``False`` if the reply is
        discarded because ``reset()`` was called while it was in flight, or if
        it is dropped at once because it is too late to have any future action;
        ``True`` if it is accepted (publishable at once or held).

        Raises:
            ChunkError: the chunk is not (H, D) with finite values (run
                ``safety.check_chunk`` first). The request then counts as
                failed, like ``request_failed(now)``.
            SchedulerStateError: no request is in flight for ``t_obs``.
        """
        if self._in_flight is None:
            raise SchedulerStateError(f"chunk_received(t_obs={t_obs}) without a request in flight")
        if float(t_obs) != self._in_flight:
            raise SchedulerStateError(
                f"chunk_received(t_obs={t_obs}) does not match the request in flight "
                f"(t_obs={self._in_flight})"
            )
        if now < t_obs:
            raise SchedulerStateError(f"chunk_received at now={now} before its t_obs={t_obs}")
        self._in_flight = None
        if self._discard_reply:
            self._discard_reply = False
            _log.debug("discarding reply for t_obs=%.6f sent before reset()", t_obs)
            return False
        try:
            arr = self._validate_chunk(chunk)
        except ChunkError:
            self._retry_not_before = now + self._cfg.retry_delay_s
            raise
        self._seq += 1
        due = now
        if self._current is not None:
            due = max(now, self._current.publication.switch_time - self._cfg.publish_early_s)
        pending = _Pending(arr, float(t_obs), due, self._seq, self._in_flight_committed)
        if self._placement(pending, due)[1] >= self._cfg.horizon:
            self._drop_late(t_obs, now)
            return False
        self._pending = pending
        return True

    # ------------------------------------------------------------- publishing
    def peek(self, now: float, followed: ControllerTrajectory | None = None) -> Publication | None:
        """The publication due at ``now`` (stamped ``now``), or ``None``; changes nothing
        the caller must undo.

        ``followed`` is what the controllers follow from ``now`` on (the gate's
        commanded motion, :meth:`~relay_ros.pipeline.gate.controller.ControllerModel.followed`):
        the smoothing joins the new chunk to it. None: not known (the smoothing then
        has only the previous chunk; the splice publishes the rows as they are).

        The caller checks it (e.g. the first-step jump) and then either
        commits it (:meth:`commit`: it is published) or refuses it (:meth:`refuse`). A held chunk
        with no action left ``min_lead_s`` after ``now`` is dropped here and counted
        (``chunks_dropped_late``): there is nothing to check or publish.
        """
        pending = self._pending
        if pending is None or now < pending.due - TIME_EPS_S:
            return None
        cfg = self._cfg
        ramp = self._ramp_for(pending.t_obs)
        slot, first = self._placement(pending, now)
        if first >= cfg.horizon:
            self._pending = None
            self._drop_late(pending.t_obs, now)
            return None
        execute = self.execute_horizon()
        end = cfg.horizon if cfg.mode == "early" else min(cfg.horizon, first + execute)
        switch_index = min(first + execute - 1, cfg.horizon - 1)
        shift_s = (slot - first) * cfg.dt  # the time the arm stood still: not skipped
        lost = 0.0 if ramp is None else ramp.lost(pending.t_obs, now)
        tfs0 = ((pending.t_obs - now) + lost) + slot * cfg.dt
        tfs = tfs0 + np.arange(end - first, dtype=np.float64) * cfg.dt
        switch_time = pending.t_obs + shift_s + switch_index * cfg.dt
        if self._current is None and cfg.ramp_in_s > 0.0:
            ramp = RampIn(float(now), cfg.ramp_in_s)  # the arm stands: a new start
        if ramp is not None:
            # During a ramp-in: the chunk timeline runs ahead of real time by what the
            # ramp still loses (from the observation on); the points are stretched.
            shift_s += lost + ramp.remaining(now)
            nominal_switch = tfs0 + (switch_index - first) * cfg.dt
            switch_time = now + float(ramp.stretch(now, np.array([nominal_switch]))[0])
            tfs = ramp.stretch(now, tfs)
        tfs.setflags(write=False)
        origin = pending.t_obs + shift_s
        smoothed = cfg.smoothing.smooth(
            Switch(
                stamp=float(now),
                time_from_start=tfs,
                positions=pending.chunk[first:end],
                chunk=pending.chunk,
                origin=origin,
                first_index=first,
                dt=cfg.dt,
                execute_horizon=execute,
                previous=self._motion(followed),
            )
        )
        positions = np.array(smoothed.positions, dtype=np.float64)
        positions.setflags(write=False)
        return Publication(
            stamp=float(now),
            positions=positions,
            time_from_start=tfs,
            t_obs=pending.t_obs,
            first_index=first,
            switch_time=switch_time,
            chunk_seq=pending.seq,
            blended=smoothed.changed,
            shift_s=shift_s,
            memo=smoothed.memo,
            ramp=ramp,
        )

    def _motion(self, followed: ControllerTrajectory | None) -> Motion | None:
        """The previous chunk and what the controllers follow, for the smoothing (None:
        no chunk of ours runs, the arm stands)."""
        current = self._current
        if current is None:
            return None
        return Motion(
            chunk=current.chunk,
            origin=current.publication.origin,
            end_time=current.publication.end_time,
            followed=followed,
            memo=current.publication.memo,
        )

    def commit(self, publication: Publication) -> None:
        """``publication`` (the last :meth:`peek`, or its copy with positions the caller
        clamped) is published: the controller follows it.

        Raises:
            SchedulerStateError: it is not the held chunk's publication (a chunk
                arrived or the scheduler was reset since the peek).
        """
        pending = self._take_pending(publication, "commit")
        # The ramp-in it runs on (None once the gate re-timed its head instead): the
        # chunks observed before the ramp's end are placed and stretched by it.
        self._ramp = publication.ramp
        if self._current is not None:
            self._stall_s += max(0.0, publication.stamp - self._current.publication.end_time)
        # The next switch joins what was published (smoothed, maybe clamped, its ends
        # re-timed): each row the published point at its time on the chunk timeline
        # (a ramp-in's stretched points at the chunk times they were stretched from),
        # where there is one.
        chunk = pending.chunk.copy()
        dt = self._cfg.dt
        row_times = publication.origin + dt * np.arange(chunk.shape[0], dtype=np.float64)
        times = publication.timeline_times
        index = np.rint((row_times - times[0]) / dt).astype(np.int64)
        inside = (index >= 0) & (index < len(times))
        index = np.clip(index, 0, len(times) - 1)
        inside &= np.abs(times[index] - row_times) < 1e-6
        chunk[inside] = publication.positions[index[inside]]
        chunk.setflags(write=False)
        self._current = _Active(chunk, publication)

    def refuse(self, publication: Publication, now: float, reason: str) -> None:
        """``publication`` (the last :meth:`peek`) failed a check: nothing is published,
        the chunk is dropped, the current trajectory keeps running and the next
        request waits ``retry_delay_s``. ``reason`` is logged at debug level.

        Raises:
            SchedulerStateError: it is not the held chunk's publication.
        """
        pending = self._take_pending(publication, "refuse")
        self._retry_not_before = now + self._cfg.retry_delay_s
        _log.debug("chunk %d refused: %s", pending.seq, reason)

    def poll(self, now: float, followed: ControllerTrajectory | None = None) -> Publication | None:
        """:meth:`peek` and :meth:`commit` in one: the publication due at ``now``, for a
        caller with no checks to run (the simulated loop, tests)."""
        publication = self.peek(now, followed)
        if publication is not None:
            self.commit(publication)
        return publication

    def _take_pending(self, publication: Publication, action: str) -> _Pending:
        pending = self._pending
        if pending is None or pending.seq != publication.chunk_seq:
            raise SchedulerStateError(
                f"{action}() of chunk {publication.chunk_seq}, but the held chunk is "
                f"{None if pending is None else pending.seq}; peek() again"
            )
        self._pending = None
        return pending

    def reset(self, *, not_before: float | None = None) -> None:
        """Start a new episode: forget the current and held chunks.

        A reply to a request still in flight will be discarded; the retry
        deadline of a failed request (the server's trouble outlives the
        episode), the drop count and the stall total are kept (a stall still
        going on at the reset is not added: the episode is over).
        ``not_before``: no request before this time (a hold's stop still moves
        the arm: the next chunk joins it once it stands).
        """
        self._current = None
        self._pending = None
        self._ramp = None  # the next start ramps in afresh
        if self._in_flight is not None:
            self._discard_reply = True
        if not_before is not None:
            self._retry_not_before = max(self._retry_not_before, not_before)

    # ---------------------------------------------------------------- helpers
    def _validate_chunk(self, chunk: np.ndarray) -> np.ndarray:
        arr = np.asarray(chunk)
        if arr.ndim != 2 or arr.shape[0] != self._cfg.horizon or arr.shape[1] < 1:
            raise ChunkError(
                f"chunk has shape {tuple(arr.shape)}, expected ({self._cfg.horizon}, D) with D >= 1"
            )
        if self._current is not None and arr.shape[1] != self._current.chunk.shape[1]:
            raise ChunkError(
                f"chunk has {arr.shape[1]} action dimensions, the current chunk has "
                f"{self._current.chunk.shape[1]}"
            )
        try:
            values = arr.astype(np.float64)
        except (TypeError, ValueError):
            raise ChunkError(f"chunk dtype {arr.dtype} is not numeric") from None
        if not np.isfinite(values).all():
            raise ChunkError("chunk contains NaN or Inf; run safety.check_chunk first")
        values.setflags(write=False)
        return values

    def _first_index(self, t_obs: float, now: float) -> int:
        cfg = self._cfg
        target = now + cfg.effective_min_lead_s - TIME_EPS_S
        k = max(0, math.ceil((target - t_obs) / cfg.dt))
        while k > 0 and t_obs + (k - 1) * cfg.dt >= target:
            k -= 1
        while t_obs + k * cfg.dt < target:
            k += 1
        return k

    def _ramp_for(self, t_obs: float) -> RampIn | None:
        """The ramp-in of the last start while it concerns a chunk observed at ``t_obs``
        (observed before its end, and something of ours moves the arm); None
        otherwise: the chunk runs on real time (a new start begins a new ramp in
        :meth:`peek`)."""
        ramp = self._ramp
        if self._current is None or ramp is None or t_obs >= ramp.end:
            return None
        return ramp

    def chunk_steps(self, t_obs: float, t: float) -> float:
        """How many action periods of a chunk observed at ``t_obs`` the robot runs by
        ``t`` following the current publication: ``(t - t_obs) / dt``, less the time a
        ramp-in loses in between (:mod:`~relay_ros.pipeline.ramp_in`)."""
        ramp = self._ramp_for(t_obs)
        lost = 0.0 if ramp is None else ramp.lost(t_obs, t)
        return ((t - t_obs) - lost) / self._cfg.dt

    def chunk_times(self, t_obs: float, count: int) -> np.ndarray:
        """When rows ``0 .. count-1`` of a chunk observed at ``t_obs`` run, continuing
        the current publication: ``t_obs + i*dt``, stretched while a ramp-in runs."""
        offsets = np.arange(count, dtype=np.float64) * self._cfg.dt
        ramp = self._ramp_for(t_obs)
        return t_obs + (offsets if ramp is None else ramp.stretch(t_obs, offsets))

    def _placement(self, pending: _Pending, now: float) -> tuple[int, int]:
        """``(slot, first)`` for publishing ``pending`` at ``now``: ``slot`` is the
        first index whose time is ``min_lead_s`` ahead (latency compensation; during a
        ramp-in, of the chunk time the robot ran since ``t_obs``), and ``first`` the row
        published there: ``slot``, or an earlier one when the arm stood still since
        ``t_obs`` (the rows the arm never ran are not dropped)."""
        ramp = self._ramp_for(pending.t_obs)
        lost = 0.0 if ramp is None else ramp.lost(pending.t_obs, now)
        slot = self._first_index(pending.t_obs + lost, now)
        if not self._cfg.join_still_arm:
            return slot, slot
        return slot, min(slot, max(self._moving_steps(pending.t_obs), pending.committed_steps))

    def _moving_steps(self, t_obs: float) -> int:
        """How many rows of a chunk observed at ``t_obs`` fall in the time a trajectory
        of ours was still moving the arm: 0 before the first publication (or after a
        reset), else up to the current publication's last point."""
        if self._current is None:
            return 0
        moving = self.chunk_steps(t_obs, self._current.publication.end_time)
        return max(0, math.ceil(moving - 1e-6))

    def _drop_late(self, t_obs: float, now: float) -> None:
        self._dropped_late += 1
        _log.debug(
            "dropping chunk for t_obs=%.6f at %.6f: no action left %.3f s ahead",
            t_obs,
            now,
            self._cfg.min_lead_s,
        )
