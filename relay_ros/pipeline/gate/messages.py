"""The trajectories the gate sends: one per output controller, plus ``~/preview``.

A :class:`~relay_ros.pipeline.publication.Publication` (a chunk) becomes one
:class:`TrajectoryMessage` per output controller with that controller's columns and
joints, and one on ``~/preview`` with every commanded joint; in dry run the
per-controller messages go to ``~/preview`` too and nothing reaches a controller. A
hold (:mod:`~relay_ros.pipeline.gate.stops`) becomes one single-point message per
controller, zero velocity, **stamped zero**: joint_trajectory_controller starts a
zero-stamped trajectory on its first control cycle after the message arrives, from
its own state then, and never rejects it as ending in the past, however late it
arrives (docs/node.md, "Holds"). The node turns each into a
``trajectory_msgs/JointTrajectory``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from relay_ros.pipeline.publication import Publication
from relay_ros.pipeline.trajectory import TrajectoryPoints, build_points, format_t_obs

__all__ = ["HOLD_STAMP", "TrajectoryMessage", "chunk_messages", "hold_messages"]

#: ``header.stamp`` of every hold: zero, "start on the first control cycle after arrival".
HOLD_STAMP = 0.0


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
    position: np.ndarray, outputs: Sequence[Output], *, duration: float, dry_run: bool
) -> list[TrajectoryMessage]:
    """One single-point message per output that stops at ``position`` (all commanded
    joints, in output order) ``duration`` seconds after the controller takes it,
    stamped :data:`HOLD_STAMP`."""
    tfs = np.array([float(duration)])
    messages = []
    column = 0
    for output in outputs:
        width = len(output.joints)
        positions = position[column : column + width].reshape(1, width)
        column += width
        points = TrajectoryPoints(positions, np.zeros_like(positions), tfs, HOLD_STAMP)
        target = None if dry_run else output.name
        messages.append(TrajectoryMessage(target, "", tuple(output.joints), points))
    return messages
