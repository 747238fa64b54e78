"""What the streaming core does with each request's outcome: time it, judge it, decide.

:func:`~relay_ros.pipeline.replies.judge_reply` says what a reply is (pure);
:class:`ReplyHandler` acts on the scheduler and returns the core's decision: the
request is timed on the :class:`~relay_ros.pipeline.request_clock.RequestClock`, a
reply from before a reconnect is dropped (its scheduler is gone), so is one from
before a jump of the node clock (counted and logged: its times are on the old
timeline), a safe chunk goes to the scheduler, and anything else frees the request
slot (with the retry delay) and, except for a reply from before the episode reset,
is a :class:`~relay_ros.pipeline.gate.decisions.Hold` with the reason (a lost
connection, the server's error reply, each distinct message logged once) or a
:class:`~relay_ros.pipeline.gate.decisions.Refuse` (a malformed reply, an unsafe chunk).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from relay_ros.pipeline.gate.decisions import Hold, Refuse
from relay_ros.pipeline.observation_request import RequestTag
from relay_ros.pipeline.replies import ReplyVerdict, judge_reply
from relay_ros.pipeline.request_clock import RequestClock
from relay_ros.pipeline.scheduler import ChunkScheduler
from relay_ros.pipeline.server_session import ServerSession
from relay_ros.pipeline.settings import StreamingSettings
from relay_ros.pipeline.stats import MessageCounter
from relay_ros.pipeline.streaming_counts import StreamingCounts

__all__ = ["ReplyHandler"]


class ReplyHandler:
    """Acts on each outcome of a submitted observation (module docstring).

    Args:
        clock: Where the request is timed (every outcome) and its latency kept
            (every action reply, refused ones too).
        counts: ``chunks_received``, ``error_replies``, ``connection_errors`` and
            ``replies_before_clock_jump``.
        log_error: Writes an ERROR line (the core's logger).
        log_warning: Writes a WARN line.
    """

    def __init__(
        self,
        clock: RequestClock,
        counts: StreamingCounts,
        *,
        log_error: Callable[[str], Any],
        log_warning: Callable[[str], Any],
    ) -> None:
        self._clock = clock
        self._counts = counts
        self._log_error = log_error
        self._log_warning = log_warning
        self._error_messages = MessageCounter()  # bounded: each distinct error logged once

    def handle(
        self,
        outcome: Any,
        session: ServerSession | None,
        now: float,
        *,
        session_id: str,
        settings: StreamingSettings,
    ) -> Hold | Refuse | None:
        """Time, judge and act on ``outcome`` (a ``wire.connection.InferOutcome``);
        ``session`` is the server connected now (None: none). Returns the hold or
        refusal to act on, or None."""
        tag = outcome.tag
        if not isinstance(tag, RequestTag):
            return None
        self._clock.finished(tag.start, outcome)
        if session is None or tag.generation != session.generation:
            return None  # a reply from before a reconnect: that scheduler is gone
        if tag.timeline != session.timeline or now < tag.t_obs:
            self._before_clock_jump(session, tag, now)
            return None
        verdict = judge_reply(
            outcome,
            session_id=session_id,
            reader=session.reader,
            joint_limits=settings.joint_limits,
            limits_mode=settings.limits_mode,
        )
        if verdict.is_action_reply:
            self._clock.replied(tag.t_obs, tag.start, now)
            self._counts.chunks_received += 1
        if verdict.chunk is None:
            return self._failed(session.scheduler, verdict, now)
        session.scheduler.chunk_received(verdict.chunk, tag.t_obs, now)
        return None

    def _before_clock_jump(self, session: ServerSession, tag: RequestTag, now: float) -> None:
        """A reply to an observation taken before the node clock jumped: its times are
        on the old timeline (its latency would be negative after a jump back), so it
        is dropped, counted and logged, never scheduled. The scheduler that sent it
        was replaced at the jump; if the jump is not handled yet (the reply came
        first), its request slot is freed."""
        self._counts.replies_before_clock_jump += 1
        scheduler = session.scheduler
        if tag.timeline == session.timeline and scheduler.request_in_flight:
            scheduler.request_failed(now, "reply from before a clock jump")
        self._log_warning(
            f"dropped a reply to the observation taken at {tag.t_obs:.3f} s: the node clock "
            f"jumped since (now {now:.3f} s), its actions are for the old timeline"
        )

    def _failed(
        self, scheduler: ChunkScheduler, verdict: ReplyVerdict, now: float
    ) -> Hold | Refuse | None:
        """No chunk from this reply: free the request slot (with the retry delay) and,
        except for a reply from before the reset, hold or refuse and say why."""
        reason = verdict.reason
        if verdict.kind == "before_reset":
            # Sent before the episode reset: never executed; the slot is free again.
            if scheduler.request_in_flight:
                scheduler.request_failed(now, reason)
            return None
        scheduler.request_failed(now, reason)
        if verdict.kind == "connection":
            self._counts.connection_errors += 1
            return Hold(f"connection lost during a request: {reason}", "connection")
        if verdict.kind == "error_reply":
            self._counts.error_replies += 1
            if self._error_messages.add(reason):
                self._log_error(f"server refused the observation: {reason}")
            return Hold(f"error reply from the server: {reason}", "error_reply")
        if verdict.kind == "malformed_reply":
            self._counts.error_replies += 1
            return Refuse(f"malformed reply: {reason}", "malformed_reply")
        return Refuse(reason, "unsafe_chunk")
