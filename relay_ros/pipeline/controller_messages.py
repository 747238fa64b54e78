"""The trajectories the streaming core sends: one per output controller, plus ``~/preview``.

A :class:`~relay_ros.pipeline.publication.Publication` (a chunk) becomes one
:class:`TrajectoryMessage` per output controller with that controller's columns and
joints, and one on ``~/preview`` with every commanded joint; in dry run the
per-controller messages go to ``~/preview`` too and nothing reaches a controller. A
hold becomes one single-point message per controller (zero velocity). The node
turns each into a ``trajectory_msgs/JointTrajectory``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from relay_ros.pipeline.publication import Publication
from relay_ros.pipeline.trajectory import TrajectoryPoints, build_points, format_t_obs

__all__ = ["HOLD_TIME_S", "TrajectoryMessage", "chunk_messages", "hold_messages"]

#: time_from_start of the single point of a hold trajectory, at least one control period.
HOLD_TIME_S = 0.1


@dataclass(frozen=True, eq=False)
class TrajectoryMessage:
    """One ``JointTrajectory`` to publish.

    Attributes:
        output: The output controller's name, or None for ``~/preview``.
        frame_id: ``t_obs=<seconds>`` for a chunk, empty for a hold.
        joint_names: The controller's joints, in point order.
        points: Positions, velocities, ``time_from_start`` and the stamp.
    """

    output: str | None
    frame_id: str
    joint_names: tuple[str, ...]
    points: TrajectoryPoints


class Output(Protocol):
    """An output controller: its name and joints, in column order."""

    @property
    def name(self) -> str: ...
    @property
    def joints(self) -> Sequence[str]: ...


def chunk_messages(
    publication: Publication,
    outputs: Sequence[Output],
    commanded_joints: Sequence[str],
    *,
    dry_run: bool,
) -> list[TrajectoryMessage]:
    """The messages of one chunk: per output (its columns, in output order), then
    the whole chunk on ``~/preview`` (only when not in dry run: there the per-output
    ones go to ``~/preview`` already)."""
    # joint_trajectory_controller ignores header.frame_id; carrying the observation
    # time there lets the simulated arm (and bag readers) measure action age.
    tag = format_t_obs(publication.t_obs)
    messages = []
    column = 0
    for output in outputs:
        width = len(output.joints)
        points = build_points(publication, range(column, column + width))
        column += width
        target = None if dry_run else output.name
        messages.append(TrajectoryMessage(target, tag, tuple(output.joints), points))
    if not dry_run:
        points = build_points(publication, range(column))
        messages.append(TrajectoryMessage(None, tag, tuple(commanded_joints), points))
    return messages


def hold_messages(
    position: np.ndarray, outputs: Sequence[Output], *, dt: float, now: float, dry_run: bool
) -> list[TrajectoryMessage]:
    """One single-point message per output that holds ``position`` (all commanded
    joints, in output order), reached ``max(dt, HOLD_TIME_S)`` after ``now``."""
    # Reach the hold point over a few cycles, not one: a message that arrives a
    # little late must not already "end in the past" for the controller.
    tfs = np.array([max(dt, HOLD_TIME_S)])
    messages = []
    column = 0
    for output in outputs:
        width = len(output.joints)
        positions = position[column : column + width].reshape(1, width)
        column += width
        points = TrajectoryPoints(positions, np.zeros_like(positions), tfs, float(now))
        target = None if dry_run else output.name
        messages.append(TrajectoryMessage(target, "", tuple(output.joints), points))
    return messages
