"""The check of a chunk's publication, as the controller will run it.

A :class:`~relay_ros.pipeline.publication.Publication` is checked as a whole
(:func:`check_publication`):

1. the joints' limits are known: a commanded joint with no position limit (unless
   continuous) or no velocity limit from the URDF or the parameters is never
   commanded (``limits_problem``);
2. the arm is measured (a fresh joint state) and follows what it was commanded
   (:meth:`~relay_ros.pipeline.gate.controller.ControllerModel.tracking`);
3. the first point against the measured state (``max_joint_step``);
4. every segment the controller interpolates, within each joint's position range,
   velocity limit and acceleration bounds (:func:`~relay_ros.pipeline.gate.motion.check_motion`):
   from where the controller starts it
   (:meth:`~relay_ros.pipeline.gate.controller.ControllerModel.start`, at the stamp) to
   the first point, between every two points, and the tail past the execute horizon,
   which the robot runs when the next chunk is late. ``limits_mode`` ``"refuse"``
   refuses a violation, ``"clamp"`` publishes a slowed and clipped copy and says so.

A chunk for an arm that stands (start, hold, reset) whose first segment would be too
fast starts up to :data:`MAX_START_DELAY_SLOTS` control periods later instead, or,
with an acceleration limit, ramps in from rest (:func:`_start_later`). Such a chunk
usually runs on the scheduler's ramp-in already (``ramp_in_s``,
:mod:`~relay_ros.pipeline.ramp_in`), checked as stretched; the gate's own ramp only
replaces a ramp-in too short for an acceleration limit, never ramps it again. With an
acceleration limit, the tail brakes to rest within it before the last point
(:mod:`~relay_ros.pipeline.gate.retiming`).

Plain NumPy, no rclpy, no clock of its own.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from relay_ros.pipeline.gate.controller import CommandedMotion, ControllerModel
from relay_ros.pipeline.gate.motion import MotionLimits, check_motion
from relay_ros.pipeline.gate.retiming import brake_tail, ramp_head
from relay_ros.pipeline.interpolation import published_velocities
from relay_ros.pipeline.joint_limits import JointLimit
from relay_ros.pipeline.publication import Publication
from relay_ros.pipeline.safety import LimitsMode, Refusal, check_first_step

__all__ = ["MAX_START_DELAY_SLOTS", "PublicationVerdict", "check_publication"]

#: Most control periods a chunk for a still arm may start later so that the arm can
#: reach its first point within its velocity and acceleration limits
#: (:func:`_start_later`); a chunk that needs more is refused.
MAX_START_DELAY_SLOTS = 10


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
    controller: ControllerModel | None = None,
    dt: float | None = None,
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
        measured_at: When they were measured (None: at the stamp); the tracking
            error compares them with what was commanded then.
        limits_problem: Why some joint has no limits (then everything is refused).
        controller: The controller the user runs (default: interpolating from the
            desired state, ``max_tracking_error`` 0.25).
        dt: The action period (s): joints without an acceleration limit get the
            default bound on the points' second differences (None: none).
    """
    controller = controller or ControllerModel()
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
    measured = np.asarray(measured, dtype=np.float64)
    tracking = controller.tracking(
        motion, measured, publication.stamp if measured_at is None else measured_at, joints
    )
    if tracking.refusal is not None:
        return PublicationVerdict(None, tracking.refusal)
    refusal = check_first_step(measured, publication.positions[0], max_joint_step, joints)
    if refusal is not None:
        return PublicationVerdict(None, Refusal(refusal.reason, "first_step"))
    start, start_velocity = controller.start(
        motion, publication.stamp, measured=measured, offset=tracking.offset
    )
    limits = MotionLimits.from_joint_limits(joint_limits, joints, dt=dt)
    # The last point stops the chunk (zero velocity by JTC's rule): within the
    # acceleration limits only if the tail brakes before it (retiming.py).
    unbraked = publication
    publication = brake_tail(publication, limits) or publication
    result = check_motion(
        start,
        publication.positions,
        publication.time_from_start,
        limits,
        start_velocity=start_velocity,
        mode=cast(LimitsMode, limits_mode),
    )
    if result.refusal is not None and result.refusal.kind in ("velocity", "acceleration"):
        later = _start_later(publication, unbraked, start, start_velocity, limits, dt)
        if later is not None:
            delayed, ratio = later
            delayed = _with_velocities(delayed, start, limits)
            return PublicationVerdict(delayed, None, start, start_velocity, peak_speed_ratio=ratio)
    if result.refusal is not None or result.positions is None:
        refusal = result.refusal or Refusal("refused by the motion check", "velocity")
        return PublicationVerdict(None, refusal, start, start_velocity)
    if result.note is None:
        accepted = _with_velocities(publication, start, limits)
        return PublicationVerdict(
            accepted, None, start, start_velocity, peak_speed_ratio=result.peak_speed_ratio
        )
    positions = result.positions.copy()
    positions.setflags(write=False)
    clamped = _with_velocities(dataclasses.replace(publication, positions=positions), start, limits)
    return PublicationVerdict(
        clamped, None, start, start_velocity, result.note, result.peak_speed_ratio
    )


def _with_velocities(
    publication: Publication, start: np.ndarray, limits: MotionLimits
) -> Publication:
    """``publication`` with the velocities it is checked and published with
    (:func:`~relay_ros.pipeline.interpolation.published_velocities` from ``start``)."""
    velocities = published_velocities(
        start, publication.positions, publication.time_from_start, limits.centred
    )
    velocities.setflags(write=False)
    return dataclasses.replace(publication, velocities=velocities)


def _start_later(
    publication: Publication,
    unbraked: Publication,
    start: np.ndarray,
    start_velocity: np.ndarray,
    limits: MotionLimits,
    period: float | None = None,
) -> tuple[Publication, float] | None:
    """``publication`` delayed by the fewest whole slots (at most
    :data:`MAX_START_DELAY_SLOTS`) that let an arm standing at ``start`` reach its
    first point within the velocity and acceleration limits, or None.

    Only for a still arm (``start_velocity`` zero: before the first chunk, after a
    hold or a reset): leaving a standing arm a few control periods later costs only
    that time, whereas refusing would hold it for a retry and a round trip. The whole
    chunk moves with its first point (``shift_s`` and the switch too, a ramp-in's
    stretch with them: :meth:`Publication.delayed`), so the points keep their spacing
    and the next chunk joins the same timeline; a violation between two points of the
    chunk is not helped by a delay and is refused as is. A slot is ``period`` (the
    action period; None: the first points' spacing, which a ramp-in stretches).
    Where no delay fits and a joint has an acceleration limit, the chunk's start is
    re-timed to accelerate from rest within it instead (:func:`_ramped_head`, from
    ``unbraked``: the publication before its tail was braked).
    """
    if np.abs(start_velocity).max(initial=0.0) > 0.0:
        return None
    delayed = _delayed(publication, start, start_velocity, limits, period)
    if delayed is not None:
        return delayed
    return _ramped_head(unbraked, start, limits)


def _ramped_head(
    publication: Publication, start: np.ndarray, limits: MotionLimits
) -> tuple[Publication, float] | None:
    """``publication`` (its tail not braked yet) for an arm standing at ``start``, its
    head re-timed to accelerate from rest within the acceleration limits
    (:func:`~relay_ros.pipeline.gate.retiming.ramp_head`) and its tail braked, with
    its peak speed ratio; None when that does not fit either.

    A ramp-in (``ramp_in_s``) that is too short for a joint's acceleration limit is
    replaced, never ramped again: the head is re-timed on the chunk's own timeline
    (:meth:`Publication.unramped`), over no less time than the ramp-in would have
    taken, and the scheduler places later chunks by that (the publication runs on no
    ramp-in any more)."""
    ramp = publication.ramp
    nominal = publication.unramped()
    nominal = brake_tail(nominal, limits) or nominal
    ramped = ramp_head(
        nominal, start, limits, min_duration_s=0.0 if ramp is None else ramp.duration_s
    )
    if ramped is None:
        return None
    result = check_motion(start, ramped.positions, ramped.time_from_start, limits)
    return ramped, result.peak_speed_ratio


def _delayed(
    publication: Publication,
    start: np.ndarray,
    start_velocity: np.ndarray,
    limits: MotionLimits,
    period: float | None,
) -> tuple[Publication, float] | None:
    """``publication`` delayed by the fewest whole slots of ``period``, at most
    :data:`MAX_START_DELAY_SLOTS`, that pass the motion check, or None."""
    tfs = publication.time_from_start
    dt = period or (float(tfs[1] - tfs[0]) if len(tfs) > 1 else float(tfs[0]))
    if not dt > 0.0:
        return None
    for slots in range(1, MAX_START_DELAY_SLOTS + 1):
        delayed = publication.delayed(slots * dt)
        result = check_motion(
            start,
            publication.positions,
            delayed.time_from_start,
            limits,
            start_velocity=start_velocity,
        )
        if result.refusal is None:
            return delayed, result.peak_speed_ratio
    return None
