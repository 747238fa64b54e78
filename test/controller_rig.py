"""CoreRig with simulated joint_trajectory_controllers, late delivery and a check of what runs.

:class:`ControllerRig` replaces CoreRig's linear stand-in for the controllers with the
project's JTC model (:class:`~relay_ros.sim.trajectory_follower.TrajectoryFollower`,
one per output: its message checks, replace on arrival, zero stamps started on the
first cycle after arrival, the new trajectory from the last command), updated every
millisecond of the synthetic clock. A chunk reaches its controller ``delivery_s``
after it was published, a hold ``hold_delivery_s`` after (a loaded executor, a slow
network: a hold must be obeyed however late it comes; a chunk is stamped for prompt
delivery, which is not what this rig tests), and the joint states the core reads are
the controllers' followed positions (a first-order lag of ``lag_s`` when given).

:class:`ExecutedChecker` is the instrument: it samples each controller's *commanded*
position every millisecond, as the controller runs it, and records the largest speed
(difference quotients over 1 ms: each equals the speed at a moment inside the step,
so it never exceeds the true peak and misses it by at most half a millisecond of
acceleration), the positions outside the ranges, the largest acceleration while a hold
is the running trajectory (second differences over 1 ms: below the peak at most by the
jerk times 1 ms), and every message a controller rejected. Proven on inputs with a
known answer in ``test/test_hold_matrix.py``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from streaming_rig import CoreRig

from relay_ros.pipeline.gate.messages import TrajectoryMessage
from relay_ros.sim.trajectory_command import TrajectoryCommand
from relay_ros.sim.trajectory_follower import TrajectoryFollower

#: The controllers' cycle on the synthetic clock (s).
CYCLE_S = 0.001
#: Rounding slack on the limits: 1 ms difference quotients of float64 positions.
SLACK = 1e-6


@dataclass
class _Track:
    """What one controller ran: the last two commanded samples and the worst values."""

    joints: tuple[str, ...]
    vmax: np.ndarray
    amax: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    last: tuple[float, np.ndarray] | None = None
    since: list[tuple[float, np.ndarray]] = field(default_factory=list)  # this trajectory's
    holding: bool = False


class ExecutedChecker:
    """The worst of what each controller commanded (module docstring).

    Args:
        limits: Joint -> an object with ``min_position``, ``max_position``,
            ``max_velocity``; ``hold_acceleration`` joint -> the bound a hold's stop
            must keep.
    """

    def __init__(self, limits: Mapping[str, Any], hold_acceleration: Mapping[str, float]) -> None:
        self._limits = limits
        self._hold_acceleration = dict(hold_acceleration)
        self._tracks: dict[str, _Track] = {}
        self.worst_speed_ratio = 0.0
        self.worst_speed = ""
        self.worst_hold_acceleration_ratio = 0.0
        self.worst_hold_acceleration = ""
        self.outside: list[str] = []
        self.rejections: list[str] = []
        self.holds_adopted = 0
        self.samples = 0

    def track(self, name: str, joints: Sequence[str]) -> None:
        """Check controller ``name`` of ``joints``."""
        limits = [self._limits[j] for j in joints]
        self._tracks[name] = _Track(
            tuple(joints),
            np.array([lim.max_velocity for lim in limits]),
            np.array([self._hold_acceleration[j] for j in joints]),
            np.array([lim.min_position for lim in limits]),
            np.array([lim.max_position for lim in limits]),
        )

    def adopted(self, name: str, hold: bool) -> None:
        """Controller ``name`` starts a new trajectory on its next cycle (a hold or not)."""
        track = self._tracks[name]
        track.holding = hold
        track.since = []  # a hold's acceleration from its own start on
        self.holds_adopted += int(hold)

    def rejected(self, name: str, reason: str) -> None:
        self.rejections.append(f"{name}: {reason}")

    def sample(self, name: str, t: float, commanded: np.ndarray) -> None:
        """Controller ``name`` commands ``commanded`` at ``t``."""
        track = self._tracks[name]
        self.samples += 1
        below = commanded < track.lower - 1e-9
        above = commanded > track.upper + 1e-9
        if below.any() or above.any():
            j = int(np.argmax(below | above))
            self.outside.append(f"{name}: {track.joints[j]} at {commanded[j]:.4f}, t = {t:.3f}")
        if track.last is not None:
            t0, p0 = track.last
            speed = np.abs(commanded - p0) / (t - t0)
            ratio = speed / track.vmax
            if float(ratio.max()) > self.worst_speed_ratio:
                j = int(np.argmax(ratio))
                self.worst_speed_ratio = float(ratio.max())
                self.worst_speed = (
                    f"{name}: {track.joints[j]} at {speed[j]:.3f}/s at t = {t:.3f} "
                    f"(limit {track.vmax[j]:.3f}/s)"
                )
        if track.holding and len(track.since) >= 2:
            (ta, pa), (tb, pb) = track.since
            acceleration = np.abs((commanded - pb) / (t - tb) - (pb - pa) / (tb - ta)) / (
                0.5 * (t - ta)
            )
            ratio = acceleration / track.amax
            if float(ratio.max()) > self.worst_hold_acceleration_ratio:
                j = int(np.argmax(ratio))
                self.worst_hold_acceleration_ratio = float(ratio.max())
                self.worst_hold_acceleration = (
                    f"{name}: {track.joints[j]} at {acceleration[j]:.1f}/s^2 at t = {t:.3f} "
                    f"during a hold (bound {track.amax[j]:.1f}/s^2)"
                )
        track.last = (t, commanded.copy())
        track.since = [*track.since[-1:], track.last]

    def problems(self) -> list[str]:
        """Everything over a limit, or rejected; empty when all was within."""
        found = [f"rejected: {r}" for r in self.rejections] + [
            f"outside: {o}" for o in self.outside
        ]
        if self.worst_speed_ratio > 1.0 + SLACK:
            found.append(f"speed {self.worst_speed_ratio:.3f} x the limit: {self.worst_speed}")
        if self.worst_hold_acceleration_ratio > 1.0 + SLACK:
            found.append(
                f"hold acceleration {self.worst_hold_acceleration_ratio:.3f} x the bound: "
                f"{self.worst_hold_acceleration}"
            )
        return found


@dataclass
class ControllerRig(CoreRig):
    """CoreRig driving TrajectoryFollowers (module docstring)."""

    delivery_s: float = 0.001
    hold_delivery_s: float = 0.001
    lag_s: float = 0.0
    hold_acceleration: Mapping[str, float] | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        self.follow = True
        self.queue: list[tuple[float, TrajectoryMessage]] = []
        self.followers: dict[str, TrajectoryFollower] = {}
        self.columns: dict[str, list[int]] = {}
        dt = 1.0 / float(self.metadata["control_hz"])  # type: ignore[index]
        bound = self.hold_acceleration or {
            joint: (
                limit.max_acceleration
                if math.isfinite(limit.max_acceleration)
                else limit.max_velocity / dt
            )
            for joint, limit in self.config.joint_limits.items()
        }
        self.executed = ExecutedChecker(self.config.joint_limits, bound)
        self.stuck = False  # True: the arm stops following (the joint states stand still)
        for output in self.config.outputs:
            joints = list(output.joints)
            columns = [self.joints.index(j) for j in joints]
            self.columns[output.name] = columns
            self.followers[output.name] = TrajectoryFollower(
                joints,
                self.state[columns],
                name=output.name,
                tracking_time_constant_s=self.lag_s,
                history_length=1,
                log_rejections=False,
            )
            self.executed.track(output.name, joints)
        self._cycle_at = 0.0

    def _published(self, msg: TrajectoryMessage) -> None:
        self.published.append((self.now, msg))
        if msg.output is not None:
            delay = self.delivery_s if msg.frame_id else self.hold_delivery_s
            # One topic per controller, reliable: delivered in the order published.
            before = [t for t, m in self.queue if m.output == msg.output]
            self.queue.append((max([self.now + delay, *before]), msg))

    def _follow(self) -> None:
        """Run every controller cycle up to ``now``, delivering what is due first."""
        while self._cycle_at + CYCLE_S <= self.now + 1e-9:
            self._cycle_at = round(self._cycle_at + CYCLE_S, 9)
            self.cycle(self._cycle_at)

    def cycle(self, t: float) -> None:
        """One controller cycle at ``t``: deliveries due by then, then every update."""
        due = [item for item in self.queue if item[0] <= t + 1e-12]
        self.queue = [item for item in self.queue if item[0] > t + 1e-12]
        for _, msg in due:
            assert msg.output is not None
            points = msg.points
            command = TrajectoryCommand(
                points.stamp,
                list(msg.joint_names),
                [
                    (float(tfs), list(map(float, p)), list(map(float, v)))
                    for tfs, p, v in zip(
                        points.time_from_start, points.positions, points.velocities
                    )
                ],
            )
            accepted = self.followers[msg.output].receive(command, t)
            if accepted:
                self.executed.adopted(msg.output, hold=not msg.frame_id)
            else:
                self.executed.rejected(msg.output, str(accepted.reason))
        for name, follower in self.followers.items():
            sample = follower.update(t)
            self.executed.sample(name, t, sample.commanded_positions)
            if not self.stuck:
                self.state[self.columns[name]] = sample.positions

    def jump_clock(self, delta_s: float) -> None:
        """The node clock (and the controllers', on the same clock) jumps forward by
        ``delta_s``: the controllers' next cycle is on the new time, the request in
        flight arrives when it would have, now from before the jump."""
        assert delta_s > 0, "the controllers model a forward jump (JTC's state then is defined)"
        self.now = round(self.now + delta_s, 9)
        self._cycle_at = round(self._cycle_at + delta_s, 9)
        self.queue = [(t + delta_s, msg) for t, msg in self.queue]
        self.core.clock_jumped(delta_s, self.now)
