"""The robot the reference server's built-in policy stands in for: speed, acceleration, rest.

A policy trained on a robot's demonstrations moves the way that robot moved: its
chunks stay within the robot's speed and acceleration, and what it does not move it
keeps near the robot's rest pose, inside the joints' ranges. The reference server's
plans do not know a robot, so :class:`PolicyRobot` holds the one they stand in for,
per action dimension: :attr:`PolicyRobot.rest` is where the plans' idle dimensions
go (the visual plan's joints 3 on, the flow's circles' centre; 0 by default, inside
the simulated arm's ranges but not the Franka's joint 4), and
:meth:`PolicyRobot.apply` takes every chunk (plan, noise and the prefix's cross-fade
included) within its bounds:

- the visual plan's default is 1.6 rad/s on every dimension (the simulated arm's
  2.5 rad/s: joint_trajectory_controller's cubic segments through the node's monotone
  velocities peak at up to 1.5x the secant next to them, 2.4 rad/s);
- ``relay-policy-server --max-speed``, ``--max-acceleration`` and ``--rest-pose``
  give another robot's (``make demo`` passes those of the robot it simulates, a
  layout's Franka or ALOHA included: docs/demo.md).

The rows follow the plan where it is within the bounds, exactly; where it is not,
they lag it, each step's speed within ``max_speed`` and its change within
``max_acceleration`` per second, and catch up as fast as the bounds allow, braking in
time (the speed towards the plan at most ``sqrt(2 a |lag|)``) so as not to overshoot.

Plain NumPy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = ["VISUAL_MAX_SPEED", "PolicyRobot"]

#: The visual plan's speed bound without others given (rad/s), the simulated arm's.
VISUAL_MAX_SPEED = 1.6


def _checked(name: str, values: tuple[float, ...], *, positive: bool = True) -> tuple[float, ...]:
    out = []
    for value in values:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"{name} {values!r}: {value!r} is not a number")
        if not math.isfinite(value) or (positive and not value > 0.0):
            wanted = "a finite number > 0" if positive else "a finite number"
            raise ValueError(f"{name} {values!r}: {value!r} is not {wanted}")
        out.append(float(value))
    return tuple(out)


@dataclass(frozen=True)
class PolicyRobot:
    """The robot a built-in policy stands in for, per action dimension (module docstring).

    Attributes:
        max_speed: Largest speed per action dimension (rad/s or the unit per second);
            a list shorter than the action repeats its last value for the rest; empty:
            no bound.
        max_acceleration: Largest change of speed per second, per action dimension,
            the same way; empty: no bound.
        rest: The rest pose per action dimension, the same way; empty: 0.

    Raises:
        ValueError: a bound that is not a finite number > 0, or a rest position that
            is not finite (names it).
    """

    max_speed: tuple[float, ...] = ()
    max_acceleration: tuple[float, ...] = ()
    rest: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "max_speed", _checked("max_speed", tuple(self.max_speed)))
        object.__setattr__(
            self, "max_acceleration", _checked("max_acceleration", tuple(self.max_acceleration))
        )
        object.__setattr__(self, "rest", _checked("rest", tuple(self.rest), positive=False))

    def rest_pose(self, width: int) -> np.ndarray:
        """The rest pose of a ``width``-wide action (0 where none is given)."""
        out = np.zeros(width)
        if self.rest:
            n = min(width, len(self.rest))
            out[:n] = self.rest[:n]
            out[n:] = self.rest[-1]
        return out

    @property
    def bounded(self) -> bool:
        """Whether any bound is given."""
        return bool(self.max_speed or self.max_acceleration)

    @staticmethod
    def _per_dimension(values: tuple[float, ...], width: int) -> np.ndarray:
        """Bounds per dimension (inf where none)."""
        out = np.full(width, math.inf)
        if values:
            n = min(width, len(values))
            out[:n] = values[:n]
            out[n:] = values[-1]
        return out

    def apply(self, chunk: np.ndarray, first: int, dt: float) -> np.ndarray:
        """``chunk`` (H, D) within the bounds from row ``first`` on (rows before it, and
        row 0, kept exactly: the committed actions of a prefix, the start); a new
        float64 array."""
        out = np.array(chunk, dtype=np.float64)
        if not self.bounded:
            return out
        horizon, width = out.shape
        speed = self._per_dimension(self.max_speed, width)
        acceleration = self._per_dimension(self.max_acceleration, width)
        braking = np.isfinite(acceleration)
        begin = max(1, int(first))
        if not braking.any():  # a speed bound only: each row at most that far from the last
            for i in range(begin, horizon):
                out[i] = out[i - 1] + np.clip(out[i] - out[i - 1], -speed * dt, speed * dt)
            return out
        plan = out.copy()
        previous = None if begin < 2 else (out[begin - 1] - out[begin - 2]) / dt
        for i in range(begin, horizon):
            lag = plan[i - 1] - out[i - 1]
            towards = np.abs(lag) / dt
            towards[braking] = np.minimum(
                towards[braking], np.sqrt(2.0 * acceleration[braking] * np.abs(lag[braking]))
            )
            velocity = (plan[i] - plan[i - 1]) / dt + np.sign(lag) * towards
            if previous is not None:
                change = acceleration * dt
                velocity = np.clip(velocity, previous - change, previous + change)
            velocity = np.clip(velocity, -speed, speed)
            out[i] = out[i - 1] + velocity * dt
            previous = velocity
        return out
