"""What the streaming core does with each request's outcome: time it, judge it, act on it.

:func:`~relay_ros.pipeline.replies.judge_reply` says what a reply is (pure);
:class:`ReplyHandler` acts on that: the request is timed on the
:class:`~relay_ros.pipeline.request_clock.RequestClock`, a reply from before a
reconnect is dropped (its scheduler is gone), a safe chunk goes to the scheduler,
and anything else frees the request slot (with the retry delay) and, except for a
reply from before the episode reset, holds position with the reason: a lost
connection, the server's error reply (each distinct message logged once), a
malformed reply or an unsafe chunk (both counted as refusals).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from relay_ros.pipeline.observation_request import RequestTag
from relay_ros.pipeline.replies import ReplyVerdict, judge_reply
from relay_ros.pipeline.request_clock import RequestClock
from relay_ros.pipeline.scheduler import ChunkScheduler
from relay_ros.pipeline.server_session import ServerSession
from relay_ros.pipeline.settings import StreamingSettings
from relay_ros.pipeline.stats import MessageCounter
from relay_ros.pipeline.streaming_counts import StreamingCounts

__all__ = ["ReplyHandler"]

#: hold(reason, kind, now) or refuse(reason, kind, now) of the streaming core.
HoldCall = Callable[[str, str, float], None]


class ReplyHandler:
    """Acts on each outcome of a submitted observation (module docstring).

    Args:
        clock: Where the request is timed (every outcome) and its latency kept
            (every action reply, refused ones too).
        counts: ``chunks_received``, ``error_replies`` and ``connection_errors``.
        log_error: Writes an ERROR line (the core's logger).
        hold: Holds position for a reason (the core's hold).
        refuse: Counts a refusal, then holds (the core's refuse).
    """

    def __init__(
        self,
        clock: RequestClock,
        counts: StreamingCounts,
        *,
        log_error: Callable[[str], Any],
        hold: HoldCall,
        refuse: HoldCall,
    ) -> None:
        self._clock = clock
        self._counts = counts
        self._log_error = log_error
        self._hold = hold
        self._refuse = refuse
        self._error_messages = MessageCounter()  # bounded: each distinct error logged once

    def handle(
        self,
        outcome: Any,
        session: ServerSession | None,
        now: float,
        *,
        session_id: str,
        settings: StreamingSettings,
    ) -> None:
        """Time, judge and act on ``outcome`` (a ``wire.connection.InferOutcome``);
        ``session`` is the server connected now (None: none)."""
        tag = outcome.tag
        if not isinstance(tag, RequestTag):
            return
        self._clock.finished(tag.start, outcome)
        if session is None or tag.generation != session.generation:
            return  # a reply from before a reconnect: that scheduler is gone
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
            self._failed(session.scheduler, verdict, now)
            return
        session.scheduler.chunk_received(verdict.chunk, tag.t_obs, now)

    def _failed(self, scheduler: ChunkScheduler, verdict: ReplyVerdict, now: float) -> None:
        """No chunk from this reply: free the request slot (with the retry delay) and,
        except for a reply from before the reset, hold and say why."""
        reason = verdict.reason
        if verdict.kind == "before_reset":
            # Sent before the episode reset: never executed; the slot is free again.
            if scheduler.request_in_flight:
                scheduler.request_failed(now, reason)
            return
        scheduler.request_failed(now, reason)
        if verdict.kind == "connection":
            self._counts.connection_errors += 1
            self._hold(f"connection lost during a request: {reason}", "connection", now)
        elif verdict.kind == "error_reply":
            self._counts.error_replies += 1
            if self._error_messages.add(reason):
                self._log_error(f"server refused the observation: {reason}")
            self._hold(f"error reply from the server: {reason}", "error_reply", now)
        elif verdict.kind == "malformed_reply":
            self._counts.error_replies += 1
            self._refuse(f"malformed reply: {reason}", "malformed_reply", now)
        else:
            self._refuse(reason, "unsafe_chunk", now)
