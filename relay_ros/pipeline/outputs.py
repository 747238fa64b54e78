"""Output controllers: which action dimensions drive which trajectory controller.

A chunk from :func:`relay_ros.pipeline.observation.reply_to_chunk` is one (H, D) array. Each
ros2_control trajectory controller (arm, gripper, ...) gets the columns ``dims`` of it,
published as a ``JointTrajectory`` with its ``joints`` on its ``topic``.

The node passes the ``outputs`` parameters as a mapping name -> entry; which fields
an entry has and how they name chunk columns is the server's wire format's
(``ServerSpec.format.output_dims``, :mod:`relay_ros.formats`):

- π0 family and openpi layouts: ``{"topic": str, "joints": [names], "dims": [indices
  into 0..D-1]}``.
- GR00T: ``{"topic": str, "joints": [names], "action_key": "action.single_arm",
  "dims": [indices within that group]}`` (``dims`` optional: the whole group). The
  flat dims are computed from the group offsets in the chunk, i.e. the server's
  ``action_keys`` order with their widths (:attr:`ServerSpec.action_groups`).

Validation refuses: a missing/unknown field, a dims count that differs from the joint
count, dims out of range, a dim or joint used twice (also across controllers),
duplicate topics, an unknown ``action_key`` (the message names the allowed ones).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from relay_ros.formats import FormatError
from relay_ros.pipeline.server_spec import ServerSpec

__all__ = ["OutputController", "OutputsError", "load_outputs"]

logger = logging.getLogger(__name__)


class OutputsError(ValueError):
    """The output controller configuration is invalid; the message names the entry."""


@dataclass(frozen=True)
class OutputController:
    """One trajectory controller fed from the action chunk.

    Attributes:
        name: Config name, e.g. ``"arm"``.
        topic: ``JointTrajectory`` topic, e.g. ``"/arm_controller/joint_trajectory"``.
        joints: Joint names, in the order of ``dims``.
        dims: Column indices into the flat (H, D) chunk, one per joint.
    """

    name: str
    topic: str
    joints: tuple[str, ...]
    dims: tuple[int, ...]


def load_outputs(
    spec: Mapping[str, Mapping[str, Any]], server: ServerSpec
) -> list[OutputController]:
    """Validate the output controller config and compute flat chunk dims.

    Args:
        spec: Controller name -> entry (see the module docstring).
        server: The server: its wire format, chunk width and GR00T action groups.

    Returns:
        The controllers in ``spec`` order.

    Raises:
        OutputsError: Any invalid entry; the message names the entry and the
            expected values.
    """
    model = server.model
    if not spec:
        raise OutputsError("outputs is empty; expected at least one controller")
    fields = server.format.output_fields

    controllers: list[OutputController] = []
    dim_owner: dict[int, str] = {}
    joint_owner: dict[str, str] = {}
    topic_owner: dict[str, str] = {}
    for name, entry in spec.items():
        if not isinstance(entry, Mapping):
            raise OutputsError(f"output {name!r}: expected a mapping with {list(fields)}")
        unknown = [f for f in entry if f not in fields]
        if unknown:
            raise OutputsError(
                f"output {name!r}: unknown field {unknown[0]!r} for {model}; "
                f"expected fields: {list(fields)}"
            )
        topic = entry.get("topic")
        if not isinstance(topic, str) or not topic.strip():
            raise OutputsError(f"output {name!r}: topic must be a non-empty string, got {topic!r}")
        if topic in topic_owner:
            raise OutputsError(
                f"output {name!r}: topic {topic!r} is already used by {topic_owner[topic]!r}"
            )
        joints_raw = entry.get("joints")
        if isinstance(joints_raw, str) or not isinstance(joints_raw, Sequence) or not joints_raw:
            raise OutputsError(
                f"output {name!r}: joints must be a non-empty list of names, got {joints_raw!r}"
            )
        joints = tuple(str(j) for j in joints_raw)
        for joint in joints:
            if not joint:
                raise OutputsError(f"output {name!r}: empty joint name")
            if joint in joint_owner:
                where = "this output" if joint_owner[joint] == name else repr(joint_owner[joint])
                raise OutputsError(f"output {name!r}: joint {joint!r} is already driven by {where}")
            joint_owner[joint] = name

        try:
            dims = server.format.output_dims(str(name), entry, server)
        except FormatError as exc:
            raise OutputsError(str(exc)) from None
        if len(dims) != len(joints):
            raise OutputsError(
                f"output {name!r}: {len(dims)} dims for {len(joints)} joints; "
                "expected one dim per joint"
            )
        for d in dims:
            if d in dim_owner:
                where = "this output" if dim_owner[d] == name else repr(dim_owner[d])
                raise OutputsError(f"output {name!r}: action dim {d} is already used by {where}")
            dim_owner[d] = name
        topic_owner[topic] = name
        controllers.append(
            OutputController(name=str(name), topic=topic, joints=joints, dims=tuple(dims))
        )
    logger.debug("outputs: %s", controllers)
    return controllers
