"""Action spaces: what the numbers of a chunk mean, and how the node executes them.

ros2_control's joint_trajectory_controller follows joint *positions*. A chunk's
columns come in runs of one action space each (:class:`ActionPart`):

- ``joint_position``: absolute joint positions, executed as they are;
- ``joint_velocity``: joint velocities (rad/s), as the published DROID checkpoints
  return for the arm (openpi's ``examples/droid/main.py`` steps a
  ``RobotEnv(action_space="joint_velocity", gripper_action_space="position")``).
  :func:`integrate_velocities` turns them into positions from where the controller
  is commanded to be at the observation time: action ``i`` is held over the step
  from ``t_obs + i*dt`` to ``t_obs + (i+1)*dt``, so the position commanded at
  ``t_obs + i*dt`` is the start plus ``dt`` times the velocities before it. Each
  step stops at the joint's position limits, as the robot's own velocity controller
  would; the velocity and acceleration checks then apply as to any chunk.

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
    "integrate_velocities",
    "velocity_columns",
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
    """

    name: str
    start: int
    width: int
    space: str

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


def velocity_columns(parts: Sequence[ActionPart]) -> tuple[int, ...]:
    """The chunk columns that hold joint velocities."""
    return tuple(c for part in parts if part.space == "joint_velocity" for c in part.columns)


def integrate_velocities(
    chunk: np.ndarray,
    columns: Sequence[int],
    start: np.ndarray,
    dt: float,
    bounds: Mapping[int, tuple[float, float]] | None = None,
) -> np.ndarray:
    """``chunk`` with its velocity ``columns`` turned into positions.

    Args:
        chunk: ``(H, D)`` actions; ``columns`` hold velocities (rad/s or m/s).
        columns: The velocity columns, in the order of ``start``.
        start: Position of each of those joints at action 0 (the commanded position
            at the observation time).
        dt: Seconds per action.
        bounds: Column -> (lower, upper) position limits; each step stops there.

    Returns:
        A new float32 chunk: column ``c`` row ``i`` is ``start + dt * sum(v[:i])``,
        limited step by step; other columns unchanged.
    """
    out = np.array(chunk, dtype=np.float64)
    bounds = bounds or {}
    for k, column in enumerate(columns):
        low, high = bounds.get(column, (-np.inf, np.inf))
        position = float(start[k])
        velocities = out[:, column].copy()
        for i in range(out.shape[0]):
            out[i, column] = position
            position = min(max(position + dt * velocities[i], low), high)
    return out.astype(np.float32)
