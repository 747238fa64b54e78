"""A simulated joint_trajectory_controller, without rclpy.

`TrajectoryFollower` behaves like one ros2_control ``joint_trajectory_controller``
(Humble and Jazzy, from their ``trajectory.cpp``) so that the policy node can be
tested end to end on a laptop. Messages are checked as the controller checks them
(`relay_ros.sim.trajectory_command`); what the robot experienced is measured from
its events by `relay_ros.sim.controller_measures` (``follower.measures``).

Controller rules reproduced here:

- A new accepted message replaces the running trajectory outright; it takes over
  on the first control cycle (``update``/``sample`` call) after its arrival.
- ``stamp == 0``: the trajectory starts at that first cycle. A future stamp does
  not wait: the command moves from the current state at that cycle to the first
  point at ``stamp + time_from_start[0]``. A past stamp jumps straight into the
  segment that contains "now".
- A segment is cubic (Hermite) when both of its points carry velocities, linear
  otherwise; after the last point the controller holds it.

Which state a new trajectory starts from, as the controller's parameters say:

- ``interpolate_from_desired_state: true`` (Jazzy; ``open_loop_control: true`` on
  Humble): the old trajectory's command at the adoption cycle, position and
  velocity (``last_commanded_state_``);
- ``false`` (the default of both): the measured joint state at that cycle (position
  and velocity), so an arm that lags its command is joined where it is, not where it
  was told to be: a lagging arm sees the new trajectory start behind the old one;
- ``allow_trajectory_replacement: true`` (ros2_controllers 2026, PR 2419,
  ``blend_with_active_trajectory``): when the running trajectory has more than one
  point, the new one is spliced into it instead. The "cursor" is where the
  controller sampled the old trajectory on the previous cycle; the new message
  starts at ``new_start`` = the cursor, or the cursor plus ``stamp - now`` when its
  stamp is in the future; the old points between cursor and ``new_start`` are kept,
  then a bridge point (the old trajectory sampled at ``new_start``, with its
  velocity), then the new points at ``new_start + time_from_start``, all re-timed
  from the adoption cycle (a stamp in the past is not honoured: the points are
  timed from the cycle that adopts them). Position and velocity are continuous at
  the bridge; the first segment after it is the cubic to the first new point.

The followed (measured) joint state tracks the command perfectly, or through a
first-order lag when ``tracking_time_constant_s > 0`` (a real arm under position
control trails its command by a few tens of ms).

Times are float seconds on one clock; positions in radians (or metres), velocities
per second.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from relay_ros.sim.controller_measures import ControllerMeasures
from relay_ros.sim.trajectory_command import (
    Acceptance,
    AcceptedTrajectory,
    TrajectoryCommand,
    check_command,
)

__all__ = [
    "DEFAULT_TRACKING_LAG_S",
    "FollowerConfigError",
    "FollowerSample",
    "TrajectoryFollower",
]

logger = logging.getLogger(__name__)

#: The simulated arm's tracking lag (first-order time constant, s) in sim_arm and the
#: streaming loop: a position-controlled arm trails its command by a few tens of ms.
#: The follower itself defaults to exact tracking.
DEFAULT_TRACKING_LAG_S = 0.04


class FollowerConfigError(ValueError):
    """The follower was constructed with inconsistent joints or positions."""


@dataclass(frozen=True)
class FollowerSample:
    """State of the controller at one control cycle.

    Attributes:
        t: Time of the cycle in seconds.
        positions: Followed (measured) joint positions, controller joint order.
        velocities: Followed joint velocities per second.
        commanded_positions: Positions commanded by the trajectory at ``t``.
        holding: True when there is no future trajectory point to follow.
    """

    t: float
    positions: np.ndarray
    velocities: np.ndarray
    commanded_positions: np.ndarray
    holding: bool


def _interpolate(
    t_a: float,
    p_a: np.ndarray,
    v_a: np.ndarray,
    t_b: float,
    p_b: np.ndarray,
    v_b: np.ndarray,
    t: float,
    cubic: bool,
) -> tuple[np.ndarray, np.ndarray]:
    """Interpolate as JTC's ``interpolate_between_points`` (linear or cubic Hermite)."""
    duration = t_b - t_a
    tau = t - t_a
    if tau < 0.0:
        tau, cubic = 0.0, False
    if tau > duration:
        tau, cubic = duration, False
    if duration <= 0.0:
        return p_a.copy(), np.zeros_like(p_a)
    if not cubic:
        slope = (p_b - p_a) / duration
        return p_a + slope * tau, slope
    c2 = (-3.0 * p_a + 3.0 * p_b - 2.0 * v_a * duration - v_b * duration) / duration**2
    c3 = (2.0 * p_a - 2.0 * p_b + v_a * duration + v_b * duration) / duration**3
    positions = p_a + v_a * tau + c2 * tau**2 + c3 * tau**3
    velocities = v_a + 2.0 * c2 * tau + 3.0 * c3 * tau**2
    return positions, velocities


class TrajectoryFollower:
    """One simulated joint_trajectory_controller; its measures are `measures`.

    Thread-safe: ``receive``, ``update``/``sample`` and the measures' reads may be
    called from different threads (a ROS subscription, a timer and a demo loop).

    Args:
        joint_names: The controller's joints, in command order.
        initial_positions: Start positions, one per joint.
        name: Controller name used in messages and metrics.
        allow_partial_joints: Accept trajectories for a subset of the joints (JTC
            ``allow_partial_joints_goal``); missing joints hold their current command.
        allow_nonzero_velocity_at_end: Accept a non-zero last velocity (JTC
            ``allow_nonzero_velocity_at_trajectory_end``; false on Jazzy, true on Humble).
        tracking_time_constant_s: 0 = the joints follow the command exactly; > 0 = a
            first-order lag with this time constant in seconds.
        interpolate_from_desired_state: A new trajectory starts from the last command
            (True) or from the measured state (False, JTC's default); see the module
            docstring.
        allow_trajectory_replacement: Splice a new trajectory into the running one
            (ros2_controllers 2026; module docstring).
        history_length: Control cycles kept for the measures' history.
        log_rejections: Log each rejection at WARNING on this module's logger (a node
            that logs them through ROS passes False).

    Raises:
        FollowerConfigError: No joints, duplicate joints, a position count that differs
            from the joint count, non-finite positions, or negative constants.
    """

    def __init__(
        self,
        joint_names: Sequence[str],
        initial_positions: Sequence[float],
        *,
        name: str = "controller",
        allow_partial_joints: bool = False,
        allow_nonzero_velocity_at_end: bool = False,
        tracking_time_constant_s: float = 0.0,
        interpolate_from_desired_state: bool = True,
        allow_trajectory_replacement: bool = False,
        history_length: int = 60_000,
        log_rejections: bool = True,
    ) -> None:
        names = tuple(str(n) for n in joint_names)
        if not names:
            raise FollowerConfigError(f"controller {name!r} has no joints; expected at least one")
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise FollowerConfigError(
                f"controller {name!r} lists joints {duplicates} more than once; "
                "expected unique joint names"
            )
        initial = np.asarray(initial_positions, dtype=np.float64).reshape(-1)
        if initial.shape != (len(names),):
            raise FollowerConfigError(
                f"controller {name!r} has {initial.size} initial positions for "
                f"{len(names)} joints {list(names)}; expected {len(names)}"
            )
        if not np.all(np.isfinite(initial)):
            raise FollowerConfigError(
                f"controller {name!r} initial positions {initial.tolist()} are not all finite"
            )
        if not tracking_time_constant_s >= 0.0:
            raise FollowerConfigError(
                f"tracking_time_constant_s {tracking_time_constant_s!r} must be >= 0 seconds"
            )
        if history_length < 1:
            raise FollowerConfigError(f"history_length {history_length!r} must be >= 1")

        self._name = str(name)
        self._joint_names = names
        self._index = {n: i for i, n in enumerate(names)}
        self._allow_partial = bool(allow_partial_joints)
        self._allow_nonzero_end = bool(allow_nonzero_velocity_at_end)
        self._tau = float(tracking_time_constant_s)
        self._from_desired = bool(interpolate_from_desired_state)
        self._replacement = bool(allow_trajectory_replacement)
        self._log_rejections = bool(log_rejections)
        self._lock = threading.RLock()

        dof = len(names)
        self._cmd_pos = initial.copy()
        self._cmd_vel = np.zeros(dof)
        self._pos = initial.copy()
        self._vel = np.zeros(dof)
        self._last_update: float | None = None
        self._active: AcceptedTrajectory | None = None
        self._pending: AcceptedTrajectory | None = None

        self.measures = ControllerMeasures(self._name, names, int(history_length))

    # ------------------------------------------------------------------ properties

    @property
    def name(self) -> str:
        """Controller name."""
        return self._name

    @property
    def joint_names(self) -> tuple[str, ...]:
        """The controller's joints, in command order."""
        return self._joint_names

    @property
    def tracking_time_constant_s(self) -> float:
        """The arm's first-order lag behind its command (s; 0: exact)."""
        return self._tau

    @property
    def interpolate_from_desired_state(self) -> bool:
        """A new trajectory starts from the last command (else the measured state)."""
        return self._from_desired

    @property
    def allow_trajectory_replacement(self) -> bool:
        """A new trajectory is spliced into the running one (ros2_controllers 2026)."""
        return self._replacement

    @property
    def positions(self) -> np.ndarray:
        """Followed joint positions at the last update (a copy)."""
        with self._lock:
            return self._pos.copy()

    @property
    def commanded_positions(self) -> np.ndarray:
        """Commanded joint positions at the last update (a copy)."""
        with self._lock:
            return self._cmd_pos.copy()

    # ------------------------------------------------------------------ commands

    def receive(
        self, command: TrajectoryCommand, now: float, *, t_obs: float | None = None
    ) -> Acceptance:
        """Validate a trajectory that arrived at ``now`` and, if valid, make it replace
        the running one from the next `update`.

        Args:
            command: The trajectory.
            now: Arrival time in seconds.
            t_obs: Observation time (s) the actions came from; overrides ``command.t_obs``.

        Returns:
            `Acceptance`; a rejection leaves the running trajectory untouched.
        """
        now = float(now)
        with self._lock:
            checked = check_command(
                command,
                now,
                controller=self._name,
                joint_index=self._index,
                allow_partial_joints=self._allow_partial,
                allow_nonzero_velocity_at_end=self._allow_nonzero_end,
            )
            if isinstance(checked, Acceptance):
                self.measures.rejected(str(checked.code), str(checked.reason))
                if self._log_rejections:
                    logger.warning("rejected a trajectory: %s", checked.reason)
                return checked
            checked.t_obs = t_obs if t_obs is not None else command.t_obs
            self.measures.advance(now, self._governing_end())
            self.measures.accepted(now, supersedes=self._pending is not None)
            self._pending = checked
            return Acceptance(True)

    def update(self, now: float) -> FollowerSample:
        """Run one control cycle at ``now`` (s): adopt a new trajectory, sample, measure."""
        now = float(now)
        with self._lock:
            self.measures.advance(now, self._governing_end())
            if self._pending is not None:
                self._adopt(self._pending, now)
                self._pending = None
            if self._active is not None:
                cmd_pos, cmd_vel = self._evaluate(self._active, now)
                self._cmd_pos, self._cmd_vel = cmd_pos, cmd_vel
            holding = self._active is None or now >= self._active.end_time()
            dt = 0.0 if self._last_update is None else max(0.0, now - self._last_update)
            if self._tau <= 0.0:
                self._pos = self._cmd_pos.copy()
                self._vel = self._cmd_vel.copy()
            else:
                alpha = 1.0 - math.exp(-dt / self._tau)
                self._pos = self._pos + alpha * (self._cmd_pos - self._pos)
                self._vel = (self._cmd_pos - self._pos) / self._tau
            self._last_update = now
            t_obs = self._active.t_obs if self._active is not None else None
            self.measures.cycle(
                now, self._cmd_pos, self._pos, t_obs, self._active is not None and holding
            )
            return FollowerSample(
                t=now,
                positions=self._pos.copy(),
                velocities=self._vel.copy(),
                commanded_positions=self._cmd_pos.copy(),
                holding=holding,
            )

    def sample(self, now: float) -> np.ndarray:
        """Run one control cycle at ``now`` (s) and return the followed positions."""
        return self.update(now).positions

    # ------------------------------------------------------------------ internals

    def _governing_end(self) -> float:
        """End of the trajectory that governs the time until the next cycle (-inf: none)."""
        governing = self._pending if self._pending is not None else self._active
        return governing.end_time() if governing is not None else -math.inf

    def _adopt(self, new: AcceptedTrajectory, now: float) -> None:
        """Make ``new`` the running trajectory at control cycle ``now``."""
        old = self._active
        if old is not None:
            commanded_pos, commanded_vel = self._evaluate(old, now)
        else:
            commanded_pos, commanded_vel = self._cmd_pos.copy(), self._cmd_vel.copy()
        if self._from_desired:
            before_pos, before_vel = commanded_pos, commanded_vel
        else:
            before_pos, before_vel = self._pos.copy(), self._vel.copy()
        # Joints missing from a partial goal hold their current command (JTC fill_partial_goal).
        missing = np.isnan(new.positions[0])
        if np.any(missing):
            new.positions[:, missing] = commanded_pos[missing]
        spliced = (
            self._replacement
            and old is not None
            and len(old.times) > 1
            and not np.any(missing)
            and self._last_update is not None
        )
        own = len(new.times)  # the message's own points come last (after a splice's)
        if spliced:
            assert old is not None and self._last_update is not None
            self._splice(old, new, now, self._last_update)
        else:
            new.start = now if new.stamp == 0.0 else new.stamp
        new.before_time = now
        new.before_positions = before_pos
        new.before_velocities = before_vel
        self._active = new
        if old is None:
            self.measures.adopted(
                now,
                first=True,
                positions=new.positions,
                before=commanded_pos,
                at=now,
                ahead=new.positions[0],
                old=(commanded_pos, commanded_vel),
                new=(commanded_pos, commanded_vel),
                old_speed=0.0,
            )
            return
        assert new.start is not None  # set just above, or by _splice
        first_own = len(new.times) - own
        ahead = first_own + np.flatnonzero(new.start + new.times[first_own:] >= now)
        k = int(ahead[0]) if ahead.size else len(new.times) - 1
        at = max(now, new.start + float(new.times[k]))
        self.measures.adopted(
            now,
            first=False,
            positions=new.positions,
            before=commanded_pos,
            at=at,
            ahead=new.positions[k],
            old=self._evaluate(old, at),
            new=(new.positions[k], self._point_velocity(new, k)),
            old_speed=float(np.max(np.abs(commanded_vel))),
        )

    def _splice(
        self, old: AcceptedTrajectory, new: AcceptedTrajectory, now: float, cursor: float
    ) -> None:
        """``new`` spliced into ``old`` as ``blend_with_active_trajectory`` does (module
        docstring): kept old points, the bridge, the new points, timed from ``now``."""
        new_start = cursor + (new.stamp - now if new.stamp > now else 0.0)
        bridge_pos, bridge_vel = self._evaluate(old, new_start)
        old_times = old.start + old.times
        keep = (old_times > cursor) & (old_times < new_start)
        times = [old_times[keep] - cursor]
        positions = [old.positions[keep]]
        velocities = [old.velocities[keep]]
        has_velocity = [old.has_velocity[keep]]
        new_times = new_start + new.times - cursor
        if new_start - cursor < new_times[0]:
            times.append(np.array([new_start - cursor]))
            positions.append(bridge_pos[None, :])
            velocities.append(bridge_vel[None, :])
            has_velocity.append(np.array([True]))
        new.times = np.concatenate(times + [new_times])
        new.positions = np.vstack(positions + [new.positions])
        new.velocities = np.vstack(velocities + [new.velocities])
        new.has_velocity = np.concatenate(has_velocity + [new.has_velocity])
        new.start = now

    @staticmethod
    def _point_velocity(traj: AcceptedTrajectory, k: int) -> np.ndarray:
        """Velocity of point ``k``: its own, else the slope of its segment (to the next
        point, or from the previous one at the end; 0 for a single point)."""
        if traj.has_velocity[k]:
            return traj.velocities[k].copy()
        n = len(traj.times)
        if n == 1:
            return np.zeros_like(traj.positions[k])
        a, b = (k, k + 1) if k + 1 < n else (k - 1, k)
        return (traj.positions[b] - traj.positions[a]) / float(traj.times[b] - traj.times[a])

    def _evaluate(self, traj: AcceptedTrajectory, t: float) -> tuple[np.ndarray, np.ndarray]:
        """Commanded positions and velocities of an adopted trajectory at ``t`` (JTC sample)."""
        assert traj.start is not None
        if t < traj.before_time:
            return traj.before_positions.copy(), traj.before_velocities.copy()
        first_time = traj.start + float(traj.times[0])
        if t < first_time:
            return _interpolate(
                traj.before_time,
                traj.before_positions,
                traj.before_velocities,
                first_time,
                traj.positions[0],
                traj.velocities[0],
                t,
                bool(traj.has_velocity[0]),
            )
        return self._segment(traj, traj.start + traj.times, t)

    @staticmethod
    def _segment(
        traj: AcceptedTrajectory, absolute: np.ndarray, t: float
    ) -> tuple[np.ndarray, np.ndarray]:
        """The segment of ``traj`` (absolute point times) that contains ``t`` at ``t``."""
        i = int(np.searchsorted(absolute, t, side="right")) - 1
        if i >= len(absolute) - 1:
            return traj.positions[-1].copy(), traj.velocities[-1].copy()
        return _interpolate(
            float(absolute[i]),
            traj.positions[i],
            traj.velocities[i],
            float(absolute[i + 1]),
            traj.positions[i + 1],
            traj.velocities[i + 1],
            t,
            bool(traj.has_velocity[i] and traj.has_velocity[i + 1]),
        )
