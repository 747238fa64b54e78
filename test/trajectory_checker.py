"""A subscriber-side check that no published trajectory exceeds a velocity limit.

:class:`VelocityChecker` sees what a controller would see: each trajectory as it
arrives (per controller topic), its points with their velocities, and where it
starts. It computes the largest speed of every cubic segment the controller
interpolates (the one from the controller's state to the first point included) and
keeps the worst ratio to each joint's velocity limit.

Where a trajectory starts is where the controller the node is configured for starts
it (:mod:`relay_ros.pipeline.gate.controller`), at its stamp (or on arrival for a zero
stamp): with ``interpolate_from_desired_state`` (the node's default), the previous
trajectory's state then; without, that state shifted by the arm's tracking offset,
the measured state less what was commanded **at the time it was measured**: a rig's
arm state is read when a trajectory's callback runs, under load up to a second after
the stamp, and compared with the command at the stamp a correct trajectory read 2-7
times the limit (test/test_trajectory_checker.py proves the instrument on inputs with
a known answer). Before the first trajectory: the measured state, at rest.

Limits: the robot's, as config/<model>.yaml ships them for the simulated arm, never
the ones a test raised in the node (:func:`robot_velocity_limits`): a test that
raises them to let faster chunks through must still not command the robot faster
than it can move. Every checker of the session is in :data:`CHECKERS`; conftest.py
judges those a test made when it ends, passed or failed, and prints the total.

It also keeps every trajectory, so that :meth:`VelocityChecker.peaks` gives the
largest speed and acceleration each joint was commanded over a window of time (the
gentle start's measure, test/test_ramp_in.py), from the trajectory in force at each
instant: each from its start (stamp, or arrival) until the next one replaces it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import yaml

from relay_ros.paths import config_dir
from relay_ros.pipeline.interpolation import segment_extremes

#: Rounding slack on the limit (float32 positions on the wire, ns stamps).
SLACK = 1e-6

#: Every checker of this test session, for conftest.py.
CHECKERS: list[VelocityChecker] = []

#: A measured arm: joint name -> position, and the time (stamp clock) it was measured.
Measured = tuple[Mapping[str, float], float]


def robot_velocity_limits(config: str) -> dict[str, float]:
    """Joint -> velocity limit of the simulated robot of ``config``, a model or a layout
    (config/<config>.yaml; a model's limits are the sim URDF's: test_sim_urdf.py)."""
    shipped = yaml.safe_load((config_dir() / f"{config}.yaml").read_text())
    limits = shipped["/**"]["ros__parameters"]["joint_limits"]
    return {joint: float(limit["max_velocity"]) for joint, limit in limits.items()}


@dataclass
class _Last:
    times: np.ndarray  # absolute, first = stamp
    positions: np.ndarray
    velocities: np.ndarray
    joint_names: tuple[str, ...] = ()


def _segment_peaks(last: _Last, lo: float, hi: float) -> tuple[np.ndarray, np.ndarray]:
    """Largest |velocity| and |acceleration| per joint of ``last`` over ``[lo, hi]``
    (within its segments; at rest after its last point), exact on each cubic."""
    times, points, velocities = last.times, last.positions, last.velocities
    speed = np.zeros(points.shape[1])
    accel = np.zeros(points.shape[1])
    for j in range(len(times) - 1):
        a, b = max(lo, times[j]), min(hi, times[j + 1])
        if a > b:
            continue
        span = times[j + 1] - times[j]
        p0, p1, v0, v1 = points[j], points[j + 1], velocities[j], velocities[j + 1]
        c2 = (3.0 * (p1 - p0) - (2.0 * v0 + v1) * span) / span**2
        c3 = (-2.0 * (p1 - p0) + (v0 + v1) * span) / span**3
        taus = [np.full_like(c2, a - times[j]), np.full_like(c2, b - times[j])]
        with np.errstate(divide="ignore", invalid="ignore"):
            vertex = np.where(c3 != 0.0, -c2 / (3.0 * c3), -1.0)
        inside = (vertex > a - times[j]) & (vertex < b - times[j])
        taus.append(np.where(inside, vertex, taus[0]))
        for tau in taus:
            speed = np.maximum(speed, np.abs(v0 + 2.0 * c2 * tau + 3.0 * c3 * tau**2))
        for tau in taus[:2]:
            accel = np.maximum(accel, np.abs(2.0 * c2 + 6.0 * c3 * tau))
    return speed, accel


def _sample(last: _Last, t: float) -> tuple[np.ndarray, np.ndarray]:
    times, points, velocities = last.times, last.positions, last.velocities
    if t >= times[-1]:
        return points[-1], np.zeros(points.shape[1])
    if t <= times[0]:
        return points[0], velocities[0]
    j = int(np.searchsorted(times, t, side="right")) - 1
    span, tau = times[j + 1] - times[j], t - times[j]
    p0, p1, v0, v1 = points[j], points[j + 1], velocities[j], velocities[j + 1]
    c2 = (3.0 * (p1 - p0) - (2.0 * v0 + v1) * span) / span**2
    c3 = (-2.0 * (p1 - p0) + (v0 + v1) * span) / span**3
    return (
        p0 + v0 * tau + c2 * tau**2 + c3 * tau**3,
        v0 + 2.0 * c2 * tau + 3.0 * c3 * tau**2,
    )


class VelocityChecker:
    """Worst speed / velocity-limit ratio over every trajectory given to :meth:`add`.

    Args:
        max_velocity: Joint name -> velocity limit (rad/s or m/s): the robot's.
        measured: Returns the measured state and when it was measured (the rig's
            arm), asked as each trajectory arrives.
        name: Which rig, for the report.
        judged: Whether conftest.py fails the test when this checker saw a trajectory
            over a limit (False: a test of the instrument, which asserts itself).
        from_desired_state: The controller's ``interpolate_from_desired_state``: a new
            trajectory starts from the commanded state (True), or from it shifted by
            the arm's measured tracking offset (False).

    Trajectories are told apart by topic and joint names (a dry run's ``~/preview``
    carries one message per controller).
    """

    def __init__(
        self,
        max_velocity: Mapping[str, float],
        measured: Callable[[], Measured],
        name: str = "",
        *,
        judged: bool = True,
        from_desired_state: bool = True,
    ) -> None:
        self._vmax = dict(max_velocity)
        self._from_desired_state = from_desired_state
        self._measured = measured
        self._last: dict[tuple[str, tuple[str, ...]], _Last] = {}
        self._history: dict[str, list[_Last]] = {}
        self._lock = threading.Lock()
        self.name = name
        self.judged = judged
        self.trajectories = 0
        self.worst_ratio = 0.0
        self.worst: str = ""
        CHECKERS.append(self)

    def add(
        self,
        topic: str,
        joint_names: Sequence[str],
        stamp: float,
        time_from_start: np.ndarray,
        positions: np.ndarray,
        velocities: np.ndarray,
        received: float | None = None,
    ) -> None:
        """One trajectory received on ``topic`` (a controller's) at ``received`` (the
        start of a zero-stamped one: the controller starts it on arrival)."""
        if stamp == 0.0 and received is not None:
            stamp = received
        tfs = np.asarray(time_from_start, dtype=np.float64)
        pos = np.asarray(positions, dtype=np.float64)
        vel = np.asarray(velocities, dtype=np.float64)
        key = (topic, tuple(joint_names))
        with self._lock:
            last = self._last.get(key)
            state, measured_at = self._measured()
            start = np.array([state[j] for j in joint_names], dtype=np.float64)
            start_velocity = np.zeros(len(joint_names))
            if last is not None and stamp >= last.times[0]:  # (else the clock jumped back)
                commanded, start_velocity = _sample(last, stamp)
                if self._from_desired_state:
                    start = commanded
                else:  # from the measured state: the arm's offset when it was measured
                    then, _ = _sample(last, measured_at)
                    start = commanded + (start - then)
            points = np.vstack((start[None], pos))
            speeds = np.vstack((start_velocity[None], vel))
            times = np.concatenate(([stamp], stamp + tfs))
            ext = segment_extremes(points[:-1], speeds[:-1], points[1:], speeds[1:], np.diff(times))
            vmax = np.array([self._vmax[j] for j in joint_names])
            ratio = ext.speed / vmax
            self.trajectories += 1
            if ratio.size and float(ratio.max()) > self.worst_ratio:
                s, j = np.unravel_index(int(np.argmax(ratio)), ratio.shape)
                self.worst_ratio = float(ratio.max())
                self.worst = (
                    f"{topic}: joint {joint_names[j]!r} at {ext.speed[s, j]:.3f}/s on segment "
                    f"{s} of the trajectory stamped {stamp:.3f} (limit {vmax[j]:.3f}/s)"
                )
            self._last[key] = _Last(times, points, speeds, tuple(joint_names))
            self._history.setdefault(topic, []).append(self._last[key])

    @property
    def over(self) -> bool:
        """Whether some trajectory exceeded a velocity limit (rounding aside)."""
        with self._lock:
            return self.worst_ratio > 1.0 + SLACK

    def peaks(
        self, topic: str, start: float, end: float
    ) -> tuple[dict[str, float], dict[str, float]]:
        """The largest speed and acceleration each joint on ``topic`` was commanded
        between ``start`` and ``end`` (stamp clock), as its controller interpolates the
        trajectory in force at each instant (joint name -> value, both dicts)."""
        with self._lock:
            history = list(self._history.get(topic, []))
        speed: dict[str, float] = {}
        accel: dict[str, float] = {}
        for k, last in enumerate(history):
            until = history[k + 1].times[0] if k + 1 < len(history) else np.inf
            lo, hi = max(start, last.times[0]), min(end, until)
            if lo > hi:
                continue
            v, a = _segment_peaks(last, lo, hi)
            for i, joint in enumerate(last.joint_names):
                speed[joint] = max(speed.get(joint, 0.0), float(v[i]))
                accel[joint] = max(accel.get(joint, 0.0), float(a[i]))
        return speed, accel

    def assert_within(self) -> None:
        """No trajectory so far exceeded a velocity limit (rounding aside)."""
        assert not self.over, self.worst
