"""The one check every trajectory passes before it is published, and what the controllers follow.

A :class:`~relay_ros.pipeline.scheduler.Publication` is checked as a whole, as the
controller will run it (:func:`check_publication`):

1. the joints' limits are known: a commanded joint with no position limit (unless
   continuous) or no velocity limit from the URDF or the parameters is never
   commanded (``limits_problem``);
2. the first point against the measured state (``max_joint_step``);
3. every segment the controller interpolates, within each joint's position range,
   velocity limit and acceleration limit (:func:`~relay_ros.pipeline.motion_check.check_motion`):
   from where the controller is, with the velocity it has, to the first point;
   between every two points; and the tail past the execute horizon, which the
   robot runs when the next chunk is late. ``limits_mode`` ``"refuse"`` refuses a
   violation, ``"clamp"`` publishes a slowed and clipped copy and says so.

The first segment starts where the controller is at the stamp: the commanded state
and velocity (:class:`CommandedMotion`: the trajectory of the last accepted
publication or the last hold, sampled as the controller interpolates it, cubic
Hermite segments with the published velocities) while the measured state is within
:data:`TRACKING_TOLERANCE` of what was commanded when it was measured (a moving arm's
joint state is a few ms of transport old); otherwise (a robot that did not follow, nothing
commanded yet) the measured state, where joint_trajectory_controller starts a new
trajectory by default, moving at the commanded velocity. Only accepted publications enter
:class:`CommandedMotion`, so neither a hold nor the next check ever starts from a
value of a refused chunk.

Plain NumPy, no rclpy, no clock of its own.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from relay_ros.pipeline.controller_messages import (
    HOLD_TIME_S,
    Output,
    TrajectoryMessage,
    hold_messages,
)
from relay_ros.pipeline.interpolation import finite_difference_velocities
from relay_ros.pipeline.joint_limits import JointLimit
from relay_ros.pipeline.motion_check import MotionLimits, check_motion
from relay_ros.pipeline.safety import LimitsMode, Refusal, check_first_step
from relay_ros.pipeline.scheduler import ChunkScheduler, Publication

__all__ = [
    "MAX_START_DELAY_SLOTS",
    "TRACKING_TOLERANCE",
    "CommandedMotion",
    "PublicationGate",
    "PublicationVerdict",
    "check_publication",
]

#: How far (rad or m) the measured state may be from the commanded one for the robot
#: to count as following it: the first segment then starts from the commanded state
#: at the stamp (exact for a moving arm, whose measurement is a tick old), else from
#: the measured state.
TRACKING_TOLERANCE = 0.05

#: Most control periods a chunk for a still arm may start later so that the arm can
#: reach its first point within its velocity and acceleration limits
#: (:func:`_start_later`); a chunk that needs more is refused.
MAX_START_DELAY_SLOTS = 10


class CommandedMotion:
    """The trajectory the controllers follow now, as they interpolate it.

    Holds the times, positions and velocities of the last accepted trajectory,
    starting with the state the controller had at its stamp; after its last point
    the controller stands at it. Empty before the first acceptance and after
    :meth:`forget`.
    """

    def __init__(self) -> None:
        self._times: np.ndarray | None = None
        self._positions: np.ndarray | None = None
        self._velocities: np.ndarray | None = None

    @property
    def known(self) -> bool:
        """Whether a trajectory of ours was accepted (since the last :meth:`forget`)."""
        return self._times is not None

    def follow(
        self,
        stamp: float,
        start: np.ndarray,
        start_velocity: np.ndarray,
        positions: np.ndarray,
        time_from_start: np.ndarray,
    ) -> None:
        """An accepted trajectory: from ``start`` moving at ``start_velocity`` at
        ``stamp`` through ``positions`` (N, J) at ``stamp + time_from_start``, with
        the velocities the node publishes with them."""
        positions = np.asarray(positions, dtype=np.float64)
        tfs = np.asarray(time_from_start, dtype=np.float64)
        self._times = np.concatenate(([float(stamp)], float(stamp) + tfs))
        self._positions = np.vstack((np.asarray(start, dtype=np.float64)[None, :], positions))
        self._velocities = np.vstack(
            (
                np.asarray(start_velocity, dtype=np.float64)[None, :],
                finite_difference_velocities(positions, tfs),
            )
        )

    def hold(self, position: np.ndarray, stamp: float, time_from_start: float) -> None:
        """A hold was sent: from where the controller is at ``stamp`` to ``position``,
        reached at rest ``time_from_start`` seconds later."""
        target = np.asarray(position, dtype=np.float64).reshape(1, -1)
        state = self.state_at(stamp)
        start, velocity = state if state is not None else (target[0], np.zeros(target.shape[1]))
        self.follow(stamp, start, velocity, target, np.array([float(time_from_start)]))

    def forget(self) -> None:
        """Nothing of ours moves the controllers (what went out went to ``~/preview``)."""
        self._times = self._positions = self._velocities = None

    def state_at(self, t: float) -> tuple[np.ndarray, np.ndarray] | None:
        """``(position, velocity)`` commanded at ``t``, or None when nothing is known."""
        times, points, velocities = self._times, self._positions, self._velocities
        if times is None or points is None or velocities is None:
            return None
        if t >= times[-1]:
            return points[-1].copy(), np.zeros(points.shape[1])
        if t <= times[0]:
            return points[0].copy(), velocities[0].copy()
        j = int(np.searchsorted(times, t, side="right")) - 1
        span = times[j + 1] - times[j]
        tau = t - times[j]
        p0, p1, v0, v1 = points[j], points[j + 1], velocities[j], velocities[j + 1]
        delta = p1 - p0
        c2 = (3.0 * delta - (2.0 * v0 + v1) * span) / span**2
        c3 = (-2.0 * delta + (v0 + v1) * span) / span**3
        position = p0 + v0 * tau + c2 * tau**2 + c3 * tau**3
        velocity = v0 + 2.0 * c2 * tau + 3.0 * c3 * tau**2
        return position, velocity


@dataclass(frozen=True, eq=False)
class PublicationVerdict:
    """Outcome of :func:`check_publication`.

    Exactly one of ``publication`` (what to publish: the one given, or in clamp
    mode its slowed copy) and ``refusal`` is set. ``start`` and ``start_velocity``
    are where the controller was taken to be at the stamp (for
    :meth:`CommandedMotion.follow`); ``note`` says what clamping changed.
    """

    publication: Publication | None
    refusal: Refusal | None
    start: np.ndarray | None = None
    start_velocity: np.ndarray | None = None
    note: str | None = None
    peak_speed_ratio: float = 0.0


def check_publication(
    publication: Publication,
    *,
    joints: Sequence[str],
    joint_limits: Mapping[str, Any],
    limits_mode: str,
    max_joint_step: float,
    motion: CommandedMotion,
    measured: np.ndarray | None,
    measured_at: float | None = None,
    limits_problem: str | None = None,
) -> PublicationVerdict:
    """Check ``publication`` (columns ``joints``) before it goes out (module docstring).

    Args:
        publication: The scheduler's due publication (peeked, not committed).
        joints: The commanded joints, in column order.
        joint_limits: Joint -> :class:`~relay_ros.pipeline.joint_limits.JointLimit`.
        limits_mode: ``"refuse"`` or ``"clamp"``.
        max_joint_step: Largest first-point distance from ``measured``.
        motion: What the controllers follow now.
        measured: The measured positions of ``joints`` (fresh), or None: then the
            publication is refused, since where the arm is is not known.
        measured_at: When they were measured (None: at the stamp). A moving arm's
            measurement is compared with what was commanded at that time, so one
            that lags by a few ms of transport still counts as following.
        limits_problem: Why some joint has no limits (then everything is refused).
    """
    if limits_problem is not None:
        return PublicationVerdict(None, Refusal(f"cannot command: {limits_problem}", "no_limits"))
    missing = [joint for joint in joints if not isinstance(joint_limits.get(joint), JointLimit)]
    if missing:
        return PublicationVerdict(
            None,
            Refusal(f"cannot command: no velocity limit known for joints {missing}", "no_limits"),
        )
    if measured is None:
        # Where the arm is must be known now, not only where it was commanded: the
        # joint states went stale or were dropped (a clock jump forgets them) since
        # the observation was taken.
        return PublicationVerdict(
            None,
            Refusal(
                f"no fresh joint state for {list(joints)} to check the trajectory's first "
                "point against; refusing it",
                "stale",
            ),
        )
    refusal = check_first_step(measured, publication.positions[0], max_joint_step, joints)
    if refusal is not None:
        return PublicationVerdict(None, Refusal(refusal.reason, "first_step"))
    state = motion.state_at(publication.stamp)
    then = state if measured_at is None else motion.state_at(measured_at)
    if state is None or then is None or np.abs(then[0] - measured).max() > TRACKING_TOLERANCE:
        # Not where it was commanded (or nothing was): joint_trajectory_controller starts
        # from the measured state (unless open_loop_control), moving as it was commanded.
        start = np.asarray(measured, dtype=np.float64)
        start_velocity = state[1] if state is not None else np.zeros(len(joints))
    else:
        start, start_velocity = state
    limits = MotionLimits.from_joint_limits(joint_limits, joints)
    result = check_motion(
        start,
        publication.positions,
        publication.time_from_start,
        limits,
        start_velocity=start_velocity,
        mode=cast(LimitsMode, limits_mode),
    )
    if result.refusal is not None and result.refusal.kind in ("velocity", "acceleration"):
        later = _start_later(publication, start, start_velocity, limits)
        if later is not None:
            delayed, ratio = later
            return PublicationVerdict(delayed, None, start, start_velocity, peak_speed_ratio=ratio)
    if result.refusal is not None or result.positions is None:
        refusal = result.refusal or Refusal("refused by the motion check", "velocity")
        return PublicationVerdict(None, refusal, start, start_velocity)
    if result.note is None:
        return PublicationVerdict(
            publication, None, start, start_velocity, peak_speed_ratio=result.peak_speed_ratio
        )
    positions = result.positions.copy()
    positions.setflags(write=False)
    clamped = dataclasses.replace(publication, positions=positions)
    return PublicationVerdict(
        clamped, None, start, start_velocity, result.note, result.peak_speed_ratio
    )


def _start_later(
    publication: Publication,
    start: np.ndarray,
    start_velocity: np.ndarray,
    limits: MotionLimits,
) -> tuple[Publication, float] | None:
    """``publication`` delayed by the fewest whole slots (at most
    :data:`MAX_START_DELAY_SLOTS`) that let an arm standing at ``start`` reach its
    first point within the velocity and acceleration limits, or None.

    Only for a still arm (``start_velocity`` zero: before the first chunk, after a
    hold or a reset): leaving a standing arm a few control periods later costs only
    that time, whereas refusing would hold it for a retry and a round trip. The whole
    chunk moves with its first point (``shift_s`` and the switch too), so the points
    keep their spacing and the next chunk joins the same timeline; a violation
    between two points of the chunk is not helped by a delay and is refused as is.
    """
    if np.abs(start_velocity).max(initial=0.0) > 0.0:
        return None
    tfs = publication.time_from_start
    dt = float(tfs[1] - tfs[0]) if len(tfs) > 1 else float(tfs[0])
    if not dt > 0.0:
        return None
    for slots in range(1, MAX_START_DELAY_SLOTS + 1):
        delay = slots * dt
        delayed_tfs = tfs + delay
        result = check_motion(
            start, publication.positions, delayed_tfs, limits, start_velocity=start_velocity
        )
        if result.refusal is None:
            delayed_tfs.setflags(write=False)
            delayed = dataclasses.replace(
                publication,
                time_from_start=delayed_tfs,
                switch_time=publication.switch_time + delay,
                shift_s=publication.shift_s + delay,
            )
            return delayed, result.peak_speed_ratio
    return None


class PublicationGate:
    """Peek, check, then commit or refuse: the one way a chunk reaches the controllers.

    Owns :class:`CommandedMotion` (fed only by what it commits and by holds) and the
    clamp count and note the diagnostics show.
    """

    def __init__(self) -> None:
        self.motion = CommandedMotion()
        self.clamped = 0
        self.last_clamp: str | None = None

    def publish_due(
        self,
        scheduler: ChunkScheduler,
        now: float,
        *,
        settings: Any,
        measured: np.ndarray | None,
        measured_at: float | None = None,
    ) -> PublicationVerdict | None:
        """The scheduler's due publication at ``now``, checked (:func:`check_publication`
        with ``settings``' joints, limits, ``limits_mode`` and ``max_joint_step``):
        committed when accepted (the clamped copy in clamp mode), refused otherwise.
        None when nothing is due."""
        publication = scheduler.peek(now)
        if publication is None:
            return None
        verdict = check_publication(
            publication,
            joints=settings.commanded_joints,
            joint_limits=settings.joint_limits,
            limits_mode=settings.limits_mode,
            max_joint_step=settings.max_joint_step,
            motion=self.motion,
            measured=measured,
            measured_at=measured_at,
            limits_problem=getattr(settings, "limits_problem", None),
        )
        accepted = verdict.publication
        if verdict.refusal is not None or accepted is None:
            reason = verdict.refusal.reason if verdict.refusal else "refused"
            scheduler.refuse(publication, now, reason)
            return verdict
        scheduler.commit(accepted)
        assert verdict.start is not None and verdict.start_velocity is not None
        if not settings.dry_run:  # a dry run's trajectories go to ~/preview only
            self.motion.follow(
                accepted.stamp,
                verdict.start,
                verdict.start_velocity,
                accepted.positions,
                accepted.time_from_start,
            )
        if verdict.note is not None:
            self.clamped += 1
            self.last_clamp = verdict.note
        return verdict

    def hold(
        self,
        position: np.ndarray,
        outputs: Sequence[Output],
        *,
        dt: float,
        now: float,
        dry_run: bool,
    ) -> list[TrajectoryMessage]:
        """The messages that hold ``position`` (one per output), recorded as what the
        controllers follow (unless they go to ``~/preview`` in a dry run)."""
        position = np.asarray(position, dtype=np.float64)
        if not dry_run:
            self.motion.hold(position, now, max(dt, HOLD_TIME_S))
        return hold_messages(position, outputs, dt=dt, now=now, dry_run=dry_run)
