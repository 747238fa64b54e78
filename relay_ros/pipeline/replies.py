"""What became of a request, judged: a safe chunk to schedule, or why there is none.

:func:`judge_reply` reads one ``wire.connection.InferOutcome`` in three steps:

1. **classify**: a reply to an observation from before the episode reset, a
   connection error, the server's error reply, or an action reply;
2. **decode**: the action reply into one flat ``(H, D)`` chunk
   (:func:`~relay_ros.pipeline.observation.reply_to_chunk`) wide enough for every
   output's dimensions, joint velocities integrated into positions from the
   request's commanded position (:mod:`relay_ros.formats.action_space`);
3. **check**: NaN/Inf anywhere in it (padding dimensions included: they mean the
   model's output is broken) and the joint limits of the commanded dimensions
   (:func:`~relay_ros.pipeline.safety.check_chunk`, refuse or clamp).

The streaming core then schedules the chunk or holds and says why; the first-step
check comes later, at publication, when the first point is known. Pure: no clock,
no state.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, cast

import numpy as np

from relay_ros.formats.action_space import ActionPart, integrate_velocities
from relay_ros.logsafe import shorten
from relay_ros.pipeline.joint_limits import JointLimit
from relay_ros.pipeline.observation import reply_to_chunk
from relay_ros.pipeline.safety import JointLimits, LimitsMode, check_chunk
from relay_ros.pipeline.server_spec import ServerSpec

__all__ = ["ReplyKind", "ReplyReader", "ReplyVerdict", "judge_reply"]

ReplyKind = Literal[
    "chunk", "before_reset", "connection", "error_reply", "malformed_reply", "unsafe_chunk"
]


@dataclass(frozen=True, eq=False)
class ReplyVerdict:
    """One outcome, judged.

    Attributes:
        kind: ``"chunk"`` (schedule ``chunk``), ``"before_reset"`` (sent before the
            episode reset: never executed), ``"connection"`` (the request failed on
            the connection), ``"error_reply"`` (the server refused the observation),
            ``"malformed_reply"`` or ``"unsafe_chunk"`` (NaN/Inf, joint limits).
        reason: Why there is no chunk, in a sentence (the server's text bounded).
        chunk: The checked chunk's commanded columns (kind ``"chunk"`` only).
    """

    kind: ReplyKind
    reason: str = ""
    chunk: np.ndarray | None = None

    @property
    def is_action_reply(self) -> bool:
        """The server answered with actions (usable or not): its latency counts."""
        return self.kind in ("chunk", "malformed_reply", "unsafe_chunk")


@dataclass(frozen=True)
class ReplyReader:
    """What decoding and checking a reply needs from the server and the outputs
    (fixed for a connection; the limits, which may change live, are passed in).

    Attributes:
        spec: The connected server.
        used_dims: The chunk columns the outputs drive, in output order.
        dim_joints: Chunk column -> configured joint name (commanded columns only).
        dt: Seconds per action (velocity actions are integrated over it).
    """

    spec: ServerSpec
    used_dims: np.ndarray
    dim_joints: Mapping[int, str]
    dt: float = 0.02

    @property
    def parts(self) -> tuple[ActionPart, ...]:
        """The chunk's columns by action space (the server's format says)."""
        return self.spec.format.action_parts(self.spec)

    @property
    def integrates(self) -> bool:
        """Whether some commanded column holds joint velocities."""
        used = set(self.used_dims.tolist())
        return any(p.space == "joint_velocity" and used.intersection(p.columns) for p in self.parts)

    def limits(self, width: int, joint_limits: Mapping[str, JointLimit]) -> JointLimits:
        """Per-column limits of a ``width``-wide chunk: ``joint_limits`` on the
        commanded columns, unbounded elsewhere."""
        names: Sequence[str | None] = [self.dim_joints.get(d) for d in range(width)]
        return JointLimits.from_mapping(joint_limits, names)


def judge_reply(
    outcome: Any,
    *,
    session_id: str,
    reader: ReplyReader,
    joint_limits: Mapping[str, JointLimit],
    limits_mode: str,
) -> ReplyVerdict:
    """Classify, decode and check one outcome; ``session_id`` is the episode now,
    ``joint_limits`` and ``limits_mode`` the configured ones."""
    if outcome.tag.session_id != session_id:
        return ReplyVerdict("before_reset", "reply to an observation from before the reset")
    if outcome.connection_error is not None:
        return ReplyVerdict("connection", str(outcome.connection_error))
    reply = outcome.reply
    if isinstance(reply, dict) and reply.get("type") == "error":
        return ReplyVerdict("error_reply", shorten(reply.get("message")))
    try:
        chunk = _decode(reply, reader)
    except ValueError as exc:
        return ReplyVerdict("malformed_reply", str(exc))
    limits = reader.limits(chunk.shape[1], joint_limits)
    origin = outcome.tag.origin
    if reader.integrates:
        if origin is None:
            return ReplyVerdict(
                "malformed_reply", "velocity actions, but the request had no commanded position"
            )
        start = {int(d): float(q) for d, q in zip(reader.used_dims, origin)}
        chunk = integrate_velocities(
            chunk,
            reader.parts,
            start={c: start.get(c, 0.0) for c in range(chunk.shape[1])},
            dt=reader.dt,
            bounds={c: (limits.lower[c], limits.upper[c]) for c in start},
        )
    checked = check_chunk(
        chunk,
        limits,
        mode=cast(LimitsMode, limits_mode),
        horizon=reader.spec.action_horizon,
    )
    if checked.refusal is not None or checked.chunk is None:
        reason = checked.refusal.reason if checked.refusal else "refused"
        return ReplyVerdict("unsafe_chunk", reason)
    return ReplyVerdict("chunk", chunk=checked.chunk[:, reader.used_dims])


def _decode(reply: Any, reader: ReplyReader) -> np.ndarray:
    chunk = reply_to_chunk(reply, reader.spec)
    widest = int(reader.used_dims.max())
    if chunk.shape[1] <= widest:
        raise ValueError(
            f"actions have {chunk.shape[1]} dimensions; the outputs use dimension {widest}"
        )
    return chunk
