"""The gate: the one place every trajectory the node publishes passes, chunks and holds alike.

:class:`Gate` keeps what the controllers were commanded
(:class:`~relay_ros.pipeline.gate.controller.CommandedMotion`) and the controller the
user runs (:class:`~relay_ros.pipeline.gate.controller.ControllerModel`, from the
``interpolate_from_desired_state`` and ``max_tracking_error`` settings), and turns
both kinds of publication into messages only after the same motion check
(:func:`~relay_ros.pipeline.gate.motion.check_motion`):

- :meth:`Gate.publish_due`: the scheduler's due publication peeked, checked
  (:func:`~relay_ros.pipeline.gate.chunks.check_publication`) and committed, then a
  :class:`~relay_ros.pipeline.gate.decisions.Publish` of one message per controller
  (or ``~/preview``); or refused in the scheduler and returned as a
  :class:`~relay_ros.pipeline.gate.decisions.Refuse`;
- :meth:`Gate.hold`: why the robot is held (the latest reason; its kind, logged when
  it changes) and, once per hold and only when a chunk of ours moved the robot since
  the last hold message, a stop (:func:`~relay_ros.pipeline.gate.stops.plan_stop`) from
  the commanded state at the moment the hold takes effect, within the limits for any
  arrival within ``HOLD_DELIVERY_S``, stamped zero so that a late one is still obeyed.

Only accepted publications and holds sent to the controllers enter the commanded
motion (a dry run's go to ``~/preview`` and are checked against the arm the controllers
hold), so neither a hold nor the next check ever starts from a value of a refused chunk.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from relay_ros.pipeline.gate.chunks import check_publication
from relay_ros.pipeline.gate.controller import CommandedMotion, ControllerModel
from relay_ros.pipeline.gate.decisions import Hold, Publish, Refuse
from relay_ros.pipeline.gate.messages import TrajectoryMessage, chunk_messages, hold_messages
from relay_ros.pipeline.gate.motion import MotionLimits
from relay_ros.pipeline.gate.stops import HOLD_DELIVERY_S, StopPlan, hold_starts, plan_stop
from relay_ros.pipeline.interpolation import ControllerTrajectory
from relay_ros.pipeline.scheduler import TIME_EPS_S, ChunkScheduler
from relay_ros.pipeline.server_session import ServerSession
from relay_ros.pipeline.settings import StreamingSettings

__all__ = ["CLAMP_WARNING_PERIOD_S", "Gate", "HoldResult", "controller_model"]

#: What clamp mode changed is logged at most this often (``last_clamp`` always has it).
CLAMP_WARNING_PERIOD_S = 5.0

#: Hold kinds that are expected before the first chunk (inputs not there yet): logged
#: at INFO as waiting, not as a fault.
_STARTUP_KINDS = ("missing_input", "joint_states")


def controller_model(settings: StreamingSettings) -> ControllerModel:
    """The :class:`ControllerModel` of ``settings``."""
    return ControllerModel(
        interpolate_from_desired_state=bool(settings.interpolate_from_desired_state),
        max_tracking_error=float(settings.max_tracking_error),
    )


@dataclass(frozen=True, eq=False)
class HoldResult:
    """What :meth:`Gate.hold` did: ``new`` (a new hold, not a repeat of its kind: the
    caller resets the schedule), the ``messages`` to publish (none when nothing of
    ours moves the robot, or a repeat) and, with them, when the arm ``settles``: the
    stop has arrived (within ``HOLD_DELIVERY_S``) and run, so an observation from then
    on shows the arm standing where the gate has it (no request before)."""

    new: bool
    messages: tuple[TrajectoryMessage, ...] = ()
    settles: float | None = None


class Gate:
    """Checks and builds every trajectory the core publishes (module docstring).

    Args:
        info: Writes an INFO line (the core's logger).
        warning: Writes a WARN line.
        error: Writes an ERROR line.
    """

    def __init__(
        self,
        *,
        info: Callable[[str], Any],
        warning: Callable[[str], Any],
        error: Callable[[str], Any],
    ) -> None:
        self._info = info
        self._warning = warning
        self._error = error
        #: What the controllers follow: accepted chunks and holds, never a dry run's.
        self.motion = CommandedMotion()
        self.clamped = 0
        self.last_clamp: str | None = None
        self.holds_sent = 0
        self.holds_not_sent = 0
        self._clamp_warned_at = -math.inf
        self._reason: str | None = None
        self._kind: str | None = None
        self._moving = False
        # The limits and action period the commanded motion was checked with: a hold
        # plans its stop with them where they are not known now (a new URDF that drops
        # a joint, a server that no longer fits).
        self._limits_used: dict[str, Any] = {}
        self._dt_used = 0.0

    @property
    def reason(self) -> str | None:
        """Why the robot is held now, or None while streaming."""
        return self._reason

    # ------------------------------------------------------------------ chunks
    def publish_due(
        self,
        session: ServerSession,
        now: float,
        settings: StreamingSettings,
        *,
        measured: np.ndarray | None,
        measured_at: float | None = None,
    ) -> Publish | Refuse | None:
        """The scheduler's due publication at ``now``, checked as the controller will
        run it and committed (the clamped copy in clamp mode), as the messages to
        send; or refused (the scheduler told so). None when nothing is due.
        ``measured``: the commanded joints' measured positions (None: missing or
        stale), measured at ``measured_at``."""
        scheduler = session.scheduler
        due = scheduler.publication_due
        if due is None or now < due - TIME_EPS_S:
            return None  # nothing due (and nothing to compute what it would join)
        followed = self.followed(now, settings, measured=measured, measured_at=measured_at)
        publication = scheduler.peek(now, followed)
        if publication is None:
            return None
        motion = self.motion
        verdict = check_publication(
            publication,
            joints=settings.commanded_joints,
            joint_limits=settings.joint_limits,
            limits_mode=settings.limits_mode,
            max_joint_step=settings.max_joint_step,
            motion=motion,
            measured=measured,
            measured_at=measured_at,
            limits_problem=settings.limits_problem,
            controller=controller_model(settings),
            dt=scheduler.config.dt,
        )
        accepted = verdict.publication
        if verdict.refusal is not None or accepted is None:
            reason = verdict.refusal.reason if verdict.refusal else "refused"
            scheduler.refuse(publication, now, reason)
            kind = verdict.refusal.kind if verdict.refusal else "other"
            return Refuse(reason, kind)
        scheduler.commit(accepted)
        assert verdict.start is not None and verdict.start_velocity is not None
        self._limits_used.update(settings.joint_limits)
        self._dt_used = scheduler.config.dt
        if not settings.dry_run:  # a dry run's trajectories go to ~/preview only
            motion.follow(
                accepted.stamp,
                verdict.start,
                verdict.start_velocity,
                accepted.positions,
                accepted.time_from_start,
                accepted.velocities,
            )
        if verdict.note is not None:
            self.clamped += 1
            self.last_clamp = verdict.note
            if now - self._clamp_warned_at >= CLAMP_WARNING_PERIOD_S:
                self._clamp_warned_at = now
                self._warning(verdict.note)
        messages = chunk_messages(
            accepted, session.outputs, settings.commanded_joints, dry_run=settings.dry_run
        )
        return Publish(tuple(messages), verdict.note)

    def followed(
        self,
        now: float,
        settings: StreamingSettings,
        *,
        measured: np.ndarray | None,
        measured_at: float | None,
    ) -> ControllerTrajectory | None:
        """What a trajectory taking effect at ``now`` continues from
        (:meth:`ControllerModel.followed`): the commanded motion (shifted by the
        tracking offset for a controller that starts from the measured state), or the
        arm standing where it was measured when nothing of ours commands it (before
        the first chunk; a dry run, whose chunks go to ``~/preview``). The one source
        the smoothing joins, the action prefix continues and velocity actions are
        integrated from; None when nothing is commanded and the arm is not measured."""
        controller = controller_model(settings)
        tracking = controller.tracking(
            self.motion,
            measured,
            now if measured_at is None else measured_at,
            settings.commanded_joints,
        )
        return controller.followed(self.motion, at=now, measured=measured, offset=tracking.offset)

    def streaming(self) -> None:
        """A chunk was published: the hold (if any) is over, and said so."""
        ended = self._reason
        self._moving = True
        self._reason = self._kind = None
        if ended is not None:
            self._info(f"streaming again after: {ended}")

    # ------------------------------------------------------------------ holds
    def hold(
        self,
        decision: Hold,
        now: float,
        *,
        settings: StreamingSettings,
        scheduler: ChunkScheduler | None,
        startup: bool,
        measured: np.ndarray | None,
        measured_at: float | None,
    ) -> HoldResult:
        """Stop following chunks for ``decision``'s reason; the stop to send, if any.

        A repeat of the same kind only updates the reason. A new hold is logged (as
        waiting when it is an input not there yet before the first chunk,
        ``startup``) and, when a chunk of ours moved the robot since the last hold
        message, planned from the commanded state at ``now`` (:meth:`_plan`) into one
        message per controller (``~/preview`` in a dry run: from where the controllers
        hold the arm, or where it was measured).
        """
        if self._kind == decision.kind and self._reason is not None:
            self._reason = decision.reason
            return HoldResult(False)
        self._reason = decision.reason
        self._kind = decision.kind
        if startup and decision.kind in _STARTUP_KINDS:
            self._info(f"waiting before the first request: {decision.reason}")
        else:
            self._warning(f"holding position: {decision.reason}")
        if not self._moving:
            return HoldResult(True)  # nothing of ours is moving the robot
        dt = self._dt_used if scheduler is None else scheduler.config.dt
        plan = self._plan(self.motion, now, settings, dt, measured, measured_at)
        if plan is None:
            return HoldResult(True)
        self._moving = False
        self.holds_sent += 1
        if not settings.dry_run:
            start, velocity = plan.starts[0]
            self.motion.follow(
                now, start, velocity, plan.target[None, :], np.array([plan.duration])
            )
        messages = hold_messages(
            plan.target, settings.outputs, duration=plan.duration, dry_run=settings.dry_run
        )
        # No observation before the stop has surely run: it arrives within
        # HOLD_DELIVERY_S, and a chunk sent earlier could find the arm still moving
        # (a dry run's stop goes to ~/preview: nothing waits for it).
        settles = None
        if not settings.dry_run:
            settles = now + HOLD_DELIVERY_S + (plan.duration if plan.moves else 0.0)
        return HoldResult(True, tuple(messages), settles)

    def _plan(
        self,
        motion: CommandedMotion,
        now: float,
        settings: StreamingSettings,
        dt: float,
        measured: np.ndarray | None,
        measured_at: float | None,
    ) -> StopPlan | None:
        """The stop for a hold published at ``now`` (:func:`plan_stop`): from the
        commanded state (shifted by the tracking offset when the controller starts
        from the measured state) at every arrival within ``HOLD_DELIVERY_S``; to where
        the arm was measured when it does not follow. None (logged) when nothing is
        known of the arm or no stop fits the limits."""
        joints = settings.commanded_joints
        if not motion.known and measured is None:
            return None
        controller = controller_model(settings)
        tracking = controller.tracking(
            motion, measured, now if measured_at is None else measured_at, joints
        )
        # (``measured`` is where a controller stands that nothing of ours commanded.)
        standing = measured if measured is not None else np.zeros(len(joints))
        starts = hold_starts(motion, controller, now, offset=tracking.offset, measured=standing)
        known = {**self._limits_used, **settings.joint_limits}
        limits = MotionLimits.from_joint_limits(known, joints, dt=dt if dt > 0.0 else None)
        target = None if tracking.following or measured is None else measured
        plan = plan_stop(starts, limits, dt=dt, target=target)
        if plan is None:
            self.holds_not_sent += 1
            position, velocity = starts[0]
            self._error(
                "no stop within the joint limits from the commanded state (position "
                f"{np.round(position, 4).tolist()}, velocity {np.round(velocity, 4).tolist()}) "
                f"for an arrival within {HOLD_DELIVERY_S:.2f} s; not sending a hold: the "
                "controllers finish the last accepted trajectory, which ends at rest"
            )
        return plan

    def clear(self) -> None:
        """Forget the hold without publishing anything (``~/enable`` true)."""
        self._reason = self._kind = None

    def dry_run_changed(self, dry_run: bool) -> None:
        """``dry_run`` was switched off: nothing of ours moves the robot until the next
        chunk (the controllers keep the hold they got when it was switched on; what
        went to ``~/preview`` meanwhile never moved it)."""
        if not dry_run:
            self._moving = False

    def clock_jumped(self, delta_s: float, now: float) -> None:
        """The node clock jumped by ``delta_s`` to ``now``: the controllers, on the same
        clock, stand at the end of their trajectory (forward) or keep their last command
        (back: their trajectory lies in the future), on the new timeline."""
        state = self.motion.state_at(now if delta_s > 0 else now - delta_s)
        if state is not None:
            self.motion.freeze(now, *state)
