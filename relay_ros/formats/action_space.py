"""Action spaces: what the numbers of a chunk mean, and how the node executes them.

ros2_control's joint_trajectory_controller follows joint *positions*. A chunk's
columns come in runs of one action space each (:class:`ActionPart`):

- ``joint_position``: absolute joint positions, executed as they are;
- ``joint_velocity``: joint velocities, as the published DROID checkpoints return
  for the arm (openpi's ``examples/droid/main.py`` steps a
  ``RobotEnv(action_space="joint_velocity", gripper_action_space="position")``).
  A part says how a value becomes a position step: ``step_scale`` (position change
  per action at value 1; DROID: 0.2 rad, its ``RobotIKSolver.max_joint_delta``, on
  values the example clips to [-1, 1], ``clip: 1.0``); without it the values are
  rad/s and one step is ``value * dt``. :func:`integrate_velocities` turns them into
  positions from where the controller is commanded to be at the observation time:
  action ``i`` is held over the step from ``t_obs + i*dt`` to ``t_obs + (i+1)*dt``,
  so the position commanded at ``t_obs + i*dt`` is the start plus the steps before
  it. Each step stops at the joint's position limits, as the robot's own velocity
  controller would; the velocity and acceleration checks then apply as to any chunk.

Any other space (end-effector deltas such as LIBERO's ``eef_delta``, Cartesian
poses) has no joint positions to command without the robot's kinematics:
:func:`check_action_space` refuses it, at start-up, with a sentence saying so.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

__all__ = [
    "EXECUTABLE_SPACES",
    "ActionPart",
    "check_action_space",
    "differentiate_positions",
    "integrate_velocities",
]

#: The action spaces the node executes on joint trajectory controllers.
EXECUTABLE_SPACES: tuple[str, ...] = ("joint_position", "joint_velocity")

#: Why a known non-joint space cannot run (the rest get a generic sentence).
_WHY = {
    "eef_delta": "end-effector deltas (a Cartesian step per action)",
    "eef_pose": "end-effector poses",
    "cartesian_position": "Cartesian poses",
    "cartesian_velocity": "Cartesian velocities",
}


@dataclass(frozen=True)
class ActionPart:
    """``width`` chunk columns from ``start`` in one action space.

    Attributes:
        name: The part's name (``joint_velocity``, ``gripper_position``, ...).
        start: First column in the flat chunk.
        width: Number of columns.
        space: One of :data:`EXECUTABLE_SPACES` (a layout with another is refused).
        step_scale: ``joint_velocity`` only: position change per action at value 1
            (None: the values are rad/s, one step is ``value * dt``).
        clip: ``joint_velocity`` only: values are clipped to ``[-clip, clip]`` first.
    """

    name: str
    start: int
    width: int
    space: str
    step_scale: float | None = None
    clip: float | None = None

    def steps(self, values: np.ndarray, dt: float) -> np.ndarray:
        """Position steps of velocity ``values`` (this part's convention)."""
        if self.clip is not None:
            values = np.clip(values, -self.clip, self.clip)
        return values * (dt if self.step_scale is None else self.step_scale)

    def values(self, steps: np.ndarray, dt: float) -> np.ndarray:
        """The velocity values that make position ``steps`` (the inverse of :meth:`steps`)."""
        return steps / (dt if self.step_scale is None else self.step_scale)

    @property
    def columns(self) -> range:
        """The part's chunk columns."""
        return range(self.start, self.start + self.width)


def check_action_space(space: str, where: str) -> str | None:
    """None when the node can execute ``space``; else the start-up refusal for
    ``where`` (e.g. ``"layout 'libero' action part 'actions'"``)."""
    if space in EXECUTABLE_SPACES:
        return None
    what = _WHY.get(space, f"action space {space!r}")
    return (
        f"{where} is {what}: joint trajectory controllers execute joint positions only "
        f"(the node executes {list(EXECUTABLE_SPACES)}); this needs the robot's own "
        "Cartesian controller, not relay_ros"
    )


def integrate_velocities(
    chunk: np.ndarray,
    parts: Sequence[ActionPart],
    start: Mapping[int, float],
    dt: float,
    bounds: Mapping[int, tuple[float, float]] | None = None,
) -> np.ndarray:
    """``chunk`` with the columns of its ``joint_velocity`` parts turned into positions.

    Args:
        chunk: ``(H, D)`` actions.
        parts: The chunk's action parts.
        start: Column -> position at action 0 (the commanded position at the
            observation time), for every velocity column.
        dt: Seconds per action.
        bounds: Column -> (lower, upper) position limits; each step stops there.

    Returns:
        A new float32 chunk: row ``i`` of a velocity column is the start plus the
        steps of the actions before it, limited step by step; other columns unchanged.
    """
    out = np.array(chunk, dtype=np.float64)
    bounds = bounds or {}
    for part in parts:
        if part.space != "joint_velocity":
            continue
        steps = part.steps(out[:, part.columns], dt)
        for k, column in enumerate(part.columns):
            low, high = bounds.get(column, (-np.inf, np.inf))
            position = float(start[column])
            for i in range(out.shape[0]):
                out[i, column] = position
                position = min(max(position + float(steps[i, k]), low), high)
    return out.astype(np.float32)


def differentiate_positions(
    chunk: np.ndarray, parts: Sequence[ActionPart], dt: float
) -> np.ndarray:
    """The inverse of :func:`integrate_velocities` without limits: the velocity values
    that, integrated from row 0, give ``chunk``'s positions back (the last action
    repeats the one before it). For a server that plans positions."""
    out = np.array(chunk, dtype=np.float32)
    for part in parts:
        if part.space != "joint_velocity":
            continue
        cols = list(part.columns)
        steps = np.diff(out[:, cols], axis=0)
        if steps.shape[0] == 0:
            out[:, cols] = 0.0
            continue
        steps = np.vstack([steps, steps[-1:]])
        out[:, cols] = part.values(steps, dt)
    return out
