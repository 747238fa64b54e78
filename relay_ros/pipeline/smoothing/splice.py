"""The splice: from the commanded motion into the new chunk, inside the limits.

Two chunks of a sampled policy disagree, so the new chunk's first point is not where
the old trajectory is at the switch, nor moving the same way. joint_trajectory_controller
(with ``interpolate_from_desired_state``, or the 2026 ``allow_trajectory_replacement``
bridge) joins them with one cubic segment from its commanded state, over the first
``min_lead_s``: a 0.1 rad gap in 20 ms is 5 rad/s, which the node's publication check
refuses (a hold), or the robot jerks. The splice removes the gap on the client,
without anything from the server. It is a time-aligned cross-fade whose length
follows the disagreement:

- the old motion is the trajectory the controllers follow, as they sample it (cubic
  Hermite through the published velocities, from the state commanded at its stamp;
  its last point held after its end): ``o(t)``; the new chunk's rows are ``c(t)`` at
  the published times;
- the published points are ``x = o + w (c - o)``, ``w(t) = s(t / T)`` with the quintic
  smoothstep ``s(u) = 10u^3 - 15u^4 + 6u^5`` (0 before, 1 after): at the switch the
  new command equals the old in position, velocity and acceleration, so the first
  point 20-40 ms in is within a small fraction of a step of where the old command
  would have been, and from ``T`` on the points are the new chunk's own;
- ``T`` is the shortest window (in whole action periods, at least
  ``min_window_steps``, at most the executed part) over which the fade adds at most
  the acceleration budget (``|s''| <= 5.78/T^2`` times the gap ``|c - o|``, plus
  ``2 |s'| <= 3.75/T`` times its rate of change) and at most the velocity budget
  (``|s'| <= 1.875/T`` times the gap), the gap's largest value over the window: a
  small disagreement is absorbed in a few points, a large one over more.

**Inside the limits by construction.** The published trajectory is then checked
exactly as the controller will run it, by the publication check's own motion check
(:func:`~relay_ros.pipeline.gate.motion.check_motion`: cubic segments through the
node's monotone velocities, from the commanded state, and the default bound on the
points' second differences where a joint has no acceleration limit). When the fade
put a segment over a joint's position range, velocity or acceleration limit (a chunk
near the velocity limit, a large disagreement, a reversal), the points are passed
through a limiter from the commanded state: each step's secant at most 2/3 of the
velocity limit, its change at most 1/6 of the acceleration limit per second
(monotone velocities keep a cubic segment within 1.5x its fastest neighbouring
secant, and its acceleration within 6x the neighbouring secants' change over its
length) and at most the bound on the second differences, and the positions inside
the range; the limited trajectory lags the chunk where needed, and catches up. A chunk
that is itself over the limits between its own points (a jump, an oscillation) is
not limited: the splice does not hide a policy's failure, the publication check
refuses it (or clamps it, in ``limits_mode: clamp``) as it would without smoothing.

Plain NumPy, no clock of its own.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from relay_ros.pipeline.gate.motion import MotionLimits, check_motion
from relay_ros.pipeline.gate.retiming import braked_tail
from relay_ros.pipeline.interpolation import ControllerTrajectory, finite_difference_velocities
from relay_ros.pipeline.smoothing.switch import Smoothed, Smoothing, Switch, changed_rows

__all__ = [
    "DEFAULT_ACCELERATION_BUDGET",
    "DEFAULT_MAX_WINDOW_S",
    "DEFAULT_MIN_WINDOW_STEPS",
    "DEFAULT_VELOCITY_SHARE",
    "Splice",
    "fade_weights",
    "splice_positions",
    "within_limits",
]

#: Largest acceleration (rad/s^2) the fade may add where a joint has no acceleration
#: limit (bench/motion.py: docs/streaming.md).
DEFAULT_ACCELERATION_BUDGET = 5.0
#: Largest velocity (as a share of each joint's limit) the fade may add.
DEFAULT_VELOCITY_SHARE = 0.2
#: Shortest window, in action periods.
DEFAULT_MIN_WINDOW_STEPS = 3
#: Longest window (s) unless the executed part is longer: a fade that outlasts a few
#: switches keeps the robot on old plans (bench/motion.py: docs/streaming.md).
DEFAULT_MAX_WINDOW_S = 0.4
#: The limiter's budgets as fractions of the limits: a monotone cubic segment peaks at
#: 1.5x its fastest neighbouring secant, its acceleration at 6x their change over it.
_SECANT_SHARE = 2.0 / 3.0
_SECANT_CHANGE_SHARE = 1.0 / 6.0


def within_limits(
    start: np.ndarray,
    start_velocity: np.ndarray,
    positions: np.ndarray,
    time_from_start: np.ndarray,
    limits: MotionLimits,
) -> bool:
    """Whether the trajectory the controller runs from ``(start, start_velocity)`` at
    time 0 through ``positions`` at ``time_from_start`` passes the publication check's
    motion check (:func:`~relay_ros.pipeline.gate.motion.check_motion`): every joint's
    position range, velocity and acceleration limit, and the default bound on the
    points' second differences; with its tail braked as the gate publishes it where a
    joint has an acceleration limit (:func:`~relay_ros.pipeline.gate.retiming.braked_tail`)."""
    braked = braked_tail(positions, time_from_start, limits)
    if braked is not None:
        positions, time_from_start = braked
    return check_motion(start, positions, time_from_start, limits, start_velocity=start_velocity).ok


#: Peaks of the quintic smoothstep's derivatives on [0, 1]: s' = 30u^2 (1-u)^2 peaks at
#: 15/8, s'' = 60u (1 - 3u + 2u^2) at 10/sqrt(3).
_FADE_SLOPE = 15.0 / 8.0
_FADE_CURVATURE = 10.0 / math.sqrt(3.0)


def fade_weights(t: np.ndarray, window: float) -> np.ndarray:
    """The quintic smoothstep ``s(t / window)``, 0 before 0 and 1 after ``window``."""
    u = np.clip(np.asarray(t, dtype=np.float64) / window, 0.0, 1.0)
    return u * u * u * (10.0 + u * (-15.0 + 6.0 * u))


def _window(
    gap: np.ndarray,
    rate: np.ndarray,
    tfs: np.ndarray,
    acceleration: np.ndarray,
    velocity: np.ndarray,
    steps: tuple[int, int],
    dt: float,
) -> float:
    """The shortest window of whole action periods in ``steps`` (fewest, most) within
    the budgets (module docstring) for the gap ``gap`` (N, D) and its rate ``rate`` at
    the published times ``tfs``; the longest when none is."""
    shortest, longest = steps
    for count in range(shortest, max(shortest, longest) + 1):
        window = count * dt
        inside = tfs <= window + 1e-9
        g = np.abs(gap[inside]).max(axis=0, initial=0.0)
        r = np.abs(rate[inside]).max(axis=0, initial=0.0)
        added_acceleration = _FADE_CURVATURE * g / window**2 + 2.0 * _FADE_SLOPE * r / window
        added_velocity = _FADE_SLOPE * g / window
        if (added_acceleration <= acceleration).all() and (added_velocity <= velocity).all():
            return window
    return max(shortest, longest) * dt


def _limited(
    start: np.ndarray,
    start_velocity: np.ndarray,
    positions: np.ndarray,
    tfs: np.ndarray,
    limits: MotionLimits,
    share: float,
) -> np.ndarray:
    """``positions`` followed from ``(start, start_velocity)`` with every secant within
    ``share`` of the limiter's velocity budget and its change within ``share`` of the
    acceleration budgets (module docstring), inside the position range."""
    speed = limits.max_velocity * _SECANT_SHARE * share
    # Per second: the cubic's acceleration limit (inf if none), and the bound on the
    # points' second differences (the default bound where no limit is set).
    assert limits.action_acceleration is not None
    change = (
        np.minimum(limits.max_acceleration * _SECANT_CHANGE_SHARE, limits.action_acceleration)
        * share
    )
    target = np.clip(positions, limits.lower, limits.upper)
    out = np.empty_like(target)
    previous, secant, t_previous = start.copy(), np.asarray(start_velocity, float), 0.0
    for j in range(target.shape[0]):
        h = float(tfs[j] - t_previous)
        wanted = (target[j] - previous) / h
        wanted = np.clip(wanted, secant - change * h, secant + change * h)
        # Down to the speed budget no faster than the change allows: a controller
        # moving faster than it at the stamp slows down, it does not jump.
        bound = np.maximum(speed, np.abs(secant) - change * h)
        secant = np.clip(wanted, -bound, bound)
        previous = np.clip(previous + secant * h, limits.lower, limits.upper)
        out[j] = previous
        t_previous = float(tfs[j])
    return out


def splice_positions(
    old: ControllerTrajectory,
    stamp: float,
    time_from_start: np.ndarray,
    positions: np.ndarray,
    *,
    dt: float,
    acceleration_budget: np.ndarray,
    velocity_budget: np.ndarray,
    window_steps: tuple[int, int],
    limits: MotionLimits | None = None,
) -> np.ndarray:
    """The published points that fade from the commanded motion ``old`` into the new
    rows ``positions`` (N, D) at ``stamp + time_from_start`` (module docstring).

    Args:
        old: What the controllers follow.
        stamp: The publication's stamp (s).
        time_from_start: (N,) seconds after the stamp, increasing, first > 0.
        positions: (N, D) the new chunk's rows for those times.
        dt: The action period (s): windows are whole periods.
        acceleration_budget: (D,) rad/s^2 the fade may add (> 0).
        velocity_budget: (D,) rad/s the fade may add (> 0).
        window_steps: Fewest and most action periods of the window.
        limits: The joints' limits; None: no limiter (nothing to hold them against).

    Returns:
        (N, D) float64.
    """
    tfs = np.asarray(time_from_start, dtype=np.float64)
    rows = np.asarray(positions, dtype=np.float64)
    o, _, _ = old.state(stamp + tfs)
    p0, v0, _ = old.state(stamp)
    gap = rows - o
    spans = np.diff(np.concatenate(([0.0], tfs)))[:, None]
    rate = np.diff(np.vstack((gap[:1], gap)), axis=0) / spans  # the gap's change per second
    window = _window(gap, rate, tfs, acceleration_budget, velocity_budget, window_steps, dt)
    w = fade_weights(tfs, window)[:, None]
    out = np.where(w >= 1.0, rows, o + w * gap)  # the chunk's own rows, exactly, from T
    if limits is None or within_limits(p0, v0, out, tfs, limits):
        return out
    if len(tfs) > 1 and not within_limits(
        rows[0],
        finite_difference_velocities(rows, tfs, limits.centred)[0],
        rows[1:],
        tfs[1:] - tfs[0],
        limits,
    ):
        return out  # the chunk itself is over the limits: for the publication check
    limited = out
    for share in (1.0, 0.8, 0.6, 0.4):
        limited = _limited(p0, v0, out, tfs, limits, share)
        if within_limits(p0, v0, limited, tfs, limits):
            return limited
    return limited


@dataclass(frozen=True)
class Splice(Smoothing):
    """Fades each chunk in from the commanded motion (module docstring).

    Attributes:
        limits: The commanded joints' limits, in chunk columns; None: no limiter.
        acceleration_budget_rad_s2: The fade's acceleration budget where a joint has
            no acceleration limit; half the limit where it has one (the chunks' own
            motion keeps the other half).
        velocity_share: The fade's velocity budget, a share of each joint's
            velocity limit (of 2 rad/s without limits).
        min_window_steps: Shortest window in action periods (>= 1).
        max_window_s: Longest window (s), unless the executed part is longer; never
            past the published points.
    """

    name: ClassVar[str] = "splice"
    continuous: ClassVar[bool] = True
    limits: MotionLimits | None = None
    acceleration_budget_rad_s2: float = DEFAULT_ACCELERATION_BUDGET
    velocity_share: float = DEFAULT_VELOCITY_SHARE
    min_window_steps: int = DEFAULT_MIN_WINDOW_STEPS
    max_window_s: float = DEFAULT_MAX_WINDOW_S

    def __post_init__(self) -> None:
        budget = self.acceleration_budget_rad_s2
        if not (math.isfinite(budget) and budget > 0.0):
            raise ValueError(f"acceleration_budget_rad_s2 {budget!r} must be a finite number > 0")
        if not (math.isfinite(self.velocity_share) and self.velocity_share > 0.0):
            raise ValueError(f"velocity_share {self.velocity_share!r} must be a number > 0")
        if not (math.isfinite(self.max_window_s) and self.max_window_s > 0.0):
            raise ValueError(f"max_window_s {self.max_window_s!r} must be a number > 0")
        steps = self.min_window_steps
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
            raise ValueError(f"min_window_steps {steps!r} must be an integer >= 1")

    def smooth(self, switch: Switch) -> Smoothed:
        original = np.array(switch.positions, dtype=np.float64)
        previous = switch.previous
        if previous is None or previous.followed is None:
            return Smoothed(original, 0)  # the arm stands, or nothing known to join
        width = original.shape[1]
        # At most max_window_s (or the executed part, if longer), within the points.
        longest = max(switch.execute_horizon, math.floor(self.max_window_s / switch.dt + 1e-9))
        longest = min(longest, len(original))
        acceleration = np.full(width, self.acceleration_budget_rad_s2)
        velocity = np.full(width, 2.0 * self.velocity_share)
        if self.limits is not None:
            acceleration = np.minimum(acceleration, 0.5 * self.limits.max_acceleration)
            velocity = self.velocity_share * self.limits.max_velocity
        positions = splice_positions(
            previous.followed,
            switch.stamp,
            switch.time_from_start,
            original,
            dt=switch.dt,
            acceleration_budget=acceleration,
            velocity_budget=velocity,
            window_steps=(self.min_window_steps, max(self.min_window_steps, longest)),
            limits=self.limits,
        )
        return Smoothed(positions, changed_rows(original, positions))

    def describe(self) -> str:
        return (
            f"splice (fade adds <= {self.acceleration_budget_rad_s2:g} rad/s^2 and "
            f"{self.velocity_share:g} of the velocity limit, {self.min_window_steps} steps to "
            f"{self.max_window_s:g} s)"
        )
