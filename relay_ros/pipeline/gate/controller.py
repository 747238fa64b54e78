"""The controller the gate checks against: what it follows, and where a new trajectory starts.

joint_trajectory_controller (JTC) replaces its trajectory with every message it
accepts and starts the new one on its first control cycle after arrival, from a state
that one setting decides (``joint_trajectory_controller.cpp``, ``update()``, the first
sample of a new trajectory, ``set_point_before_trajectory_msg``; Jazzy and rolling):

- ``interpolate_from_desired_state: true`` (Humble: ``open_loop_control: true``; what
  docs/node.md tells users to set): from the *last commanded* state, position and
  velocity, whatever the arm lags;
- ``false`` (JTC's default): from the *measured* state (its state interfaces).

The node's parameter of the same name says which one the user runs
(:class:`ControllerModel`), and every check starts where that controller starts:

- :class:`CommandedMotion`: what the controllers were commanded, as JTC interpolates it
  (cubic Hermite segments with the published velocities), fed only by trajectories the
  gate accepted and by holds, so nothing ever starts from a value of a refused chunk;
- :meth:`ControllerModel.start`: the state a trajectory taking effect at ``t`` starts
  from: the commanded state at ``t``; or, measuring, the commanded state shifted by the
  arm's tracking offset (a lagging arm keeps lagging), with the commanded velocity;
- :meth:`ControllerModel.tracking`: whether the arm follows at all. A healthy arm lags
  (a 50 ms first-order lag is 0.125 rad at 2.5 rad/s); an arm that is stuck, stopped or
  far off is more than ``max_tracking_error`` from where it was commanded when it was
  measured: the gate refuses to command it further and holds where it is.

Plain NumPy, no rclpy, no clock of its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from relay_ros.pipeline.interpolation import ControllerTrajectory
from relay_ros.pipeline.safety import Refusal

__all__ = ["CommandedMotion", "ControllerModel", "Tracking"]


class CommandedMotion:
    """The trajectory the controllers follow now, as they interpolate it.

    Holds the last accepted trajectory (a
    :class:`~relay_ros.pipeline.interpolation.ControllerTrajectory`: the state the
    controller had at its stamp, then the points with the node's velocities); after
    its last point the controller stands at it. Empty before the first acceptance and
    after :meth:`forget`; :meth:`freeze` holds one state (a controller whose clock
    jumped). The one model of what the controllers are commanded: the gate checks
    from it, the smoothing joins it, requests integrate velocity actions from it.
    """

    def __init__(self) -> None:
        self._trajectory: ControllerTrajectory | None = None
        self._frozen_velocity: np.ndarray | None = None

    @property
    def known(self) -> bool:
        """Whether a trajectory of ours was accepted (since the last :meth:`forget`)."""
        return self._trajectory is not None

    @property
    def trajectory(self) -> ControllerTrajectory | None:
        """What the controllers follow, or None when nothing of ours was accepted (a
        frozen controller: standing at its last command)."""
        return self._trajectory

    def follow(
        self,
        stamp: float,
        start: np.ndarray,
        start_velocity: np.ndarray,
        positions: np.ndarray,
        time_from_start: np.ndarray,
        velocities: np.ndarray | None = None,
    ) -> None:
        """An accepted trajectory: from ``start`` moving at ``start_velocity`` at
        ``stamp`` through ``positions`` (N, J) at ``stamp + time_from_start``, with
        the ``velocities`` the node publishes with them (default: the monotone rule)."""
        self._frozen_velocity = None
        self._trajectory = ControllerTrajectory.published(
            stamp, start, start_velocity, positions, time_from_start, velocities
        )

    def freeze(self, at: float, position: np.ndarray, velocity: np.ndarray) -> None:
        """The controller keeps commanding ``position`` with ``velocity`` from ``at`` on:
        JTC after a jump of its clock back, which puts its trajectory in the future
        (``Trajectory::sample`` gives no point before the trajectory's start, and the
        last command stays)."""
        self._trajectory = ControllerTrajectory.standing(at, position)
        self._frozen_velocity = np.asarray(velocity, dtype=np.float64).reshape(-1).copy()

    def forget(self) -> None:
        """Nothing of ours moves the controllers (what went out went to ``~/preview``)."""
        self._trajectory = None
        self._frozen_velocity = None

    def state_at(self, t: float) -> tuple[np.ndarray, np.ndarray] | None:
        """``(position, velocity)`` commanded at ``t``, or None when nothing is known."""
        trajectory = self._trajectory
        if trajectory is None:
            return None
        if self._frozen_velocity is not None:
            return trajectory.positions[0].copy(), self._frozen_velocity.copy()
        position, velocity, _ = trajectory.state(float(t))
        return position, velocity


@dataclass(frozen=True, eq=False)
class Tracking:
    """How the measured arm compares with what it was commanded when it was measured.

    Attributes:
        offset: ``measured - commanded`` per joint (zeros when nothing is known).
        refusal: Why the arm does not count as following (more than
            ``max_tracking_error`` off), or None.
    """

    offset: np.ndarray
    refusal: Refusal | None = None

    @property
    def following(self) -> bool:
        """Whether the arm follows what it is commanded."""
        return self.refusal is None


@dataclass(frozen=True)
class ControllerModel:
    """The controller setting the user runs, and how far a following arm may lag.

    Attributes:
        interpolate_from_desired_state: JTC's setting (Humble: ``open_loop_control``):
            True, a new trajectory starts from the last commanded state; False, from
            the measured state.
        max_tracking_error: Largest distance (rad or m) between a joint's measured
            position and what it was commanded when measured, for the arm to count
            as following.
    """

    interpolate_from_desired_state: bool = True
    max_tracking_error: float = 0.25

    def tracking(
        self,
        motion: CommandedMotion,
        measured: np.ndarray | None,
        measured_at: float,
        joints: Sequence[str],
    ) -> Tracking:
        """Compare ``measured`` (taken at ``measured_at``) with the command then."""
        then = motion.state_at(measured_at)
        if measured is None or then is None:
            return Tracking(np.zeros(len(joints)))
        offset = np.asarray(measured, dtype=np.float64) - then[0]
        j = int(np.argmax(np.abs(offset)))
        if abs(float(offset[j])) <= self.max_tracking_error:
            return Tracking(offset)
        return Tracking(
            offset,
            Refusal(
                f"the arm does not follow its command: joint {joints[j]!r} is at "
                f"{float(measured[j]):.4f}, {abs(float(offset[j])):.4f} from the "
                f"{float(then[0][j]):.4f} it was commanded when measured, more than "
                f"max_tracking_error {self.max_tracking_error:.4f} (stuck, stopped or "
                "e-stopped?); not commanding it further",
                "tracking",
            ),
        )

    def followed(
        self,
        motion: CommandedMotion,
        *,
        at: float,
        measured: np.ndarray | None,
        offset: np.ndarray,
    ) -> ControllerTrajectory | None:
        """What a trajectory taking effect at ``at`` continues from, over time: the
        commanded motion, or (measuring) the commanded motion shifted by the tracking
        ``offset``; standing at ``measured`` when nothing of ours was commanded (a
        start, a dry run: nothing it published moved the arm). Its state at ``at`` is
        :meth:`start`'s (a frozen controller's: standing, without its velocity).
        None when nothing is commanded and the arm is not measured."""
        trajectory = motion.trajectory
        if trajectory is None:
            if measured is None:
                return None
            return ControllerTrajectory.standing(at, measured)
        if self.interpolate_from_desired_state:
            return trajectory
        return trajectory.shifted(offset)

    def start(
        self,
        motion: CommandedMotion,
        t: float,
        *,
        measured: np.ndarray,
        offset: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(position, velocity)`` a trajectory taking effect at ``t`` starts from:
        the commanded state, or (measuring) the commanded state plus the tracking
        ``offset``, moving at the commanded velocity; ``measured`` standing when
        nothing of ours was commanded."""
        state = motion.state_at(t)
        if state is None:
            measured = np.asarray(measured, dtype=np.float64)
            return measured.copy(), np.zeros(measured.shape)
        position, velocity = state
        if self.interpolate_from_desired_state:
            return position, velocity
        return position + offset, velocity
