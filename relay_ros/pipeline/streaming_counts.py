"""What the streaming core counts: requests, chunks, errors, refusals, and the last refusal.

One owner for each number ``/diagnostics`` and the tests read from
:attr:`~relay_ros.pipeline.streaming.StreamingCore.counts`. A reconnect or a clock jump
replaces the chunk scheduler; :meth:`StreamingCounts.retire` keeps the stall time and
the late drops of the replaced one, so the totals cover the whole run. Times are not
kept here: they belong to the :class:`~relay_ros.pipeline.request_clock.RequestClock`.
"""

from __future__ import annotations

from relay_ros.pipeline.scheduler import ChunkScheduler

__all__ = ["StreamingCounts"]


class StreamingCounts:
    """The core's counters (plain attributes, incremented by the core)."""

    def __init__(self) -> None:
        self.requests = 0
        self.chunks_received = 0
        self.chunks_published = 0
        self.error_replies = 0
        self.refusals = 0
        self.connection_errors = 0
        self.replies_before_clock_jump = 0
        self._last_refusal: str | None = None
        self._stall_before_s = 0.0
        self._dropped_before = 0

    @property
    def last_refusal(self) -> str | None:
        """Why the last refusal (chunk, observation, frame or joint state message)
        was made, in a sentence; it changes exactly when ``refusals`` grows."""
        return self._last_refusal

    def refused(self, reason: str) -> None:
        """Count one refusal and keep its sentence."""
        self.refusals += 1
        self._last_refusal = reason

    def retire(self, scheduler: ChunkScheduler, until: float) -> None:
        """``scheduler`` is replaced: keep its stall time up to ``until`` and its late drops."""
        self._stall_before_s += scheduler.stall_time(until)
        self._dropped_before += scheduler.chunks_dropped_late

    def stall_time(self, scheduler: ChunkScheduler | None, now: float) -> float:
        """Stall seconds of the retired schedulers plus ``scheduler``'s (if any)."""
        current = 0.0 if scheduler is None else scheduler.stall_time(now)
        return self._stall_before_s + current

    def dropped_late(self, scheduler: ChunkScheduler | None) -> int:
        """Chunks dropped late by the retired schedulers plus ``scheduler`` (if any)."""
        current = 0 if scheduler is None else scheduler.chunks_dropped_late
        return self._dropped_before + current

    def as_dict(self) -> dict[str, int]:
        """The counters by name."""
        return {
            "requests": self.requests,
            "chunks_received": self.chunks_received,
            "chunks_published": self.chunks_published,
            "error_replies": self.error_replies,
            "refusals": self.refusals,
            "connection_errors": self.connection_errors,
            "replies_before_clock_jump": self.replies_before_clock_jump,
        }
