"""Jumps of the node clock (``use_sim_time``: a simulator or bag that restarts or skips).

Every time the streaming core keeps is on the node clock: the observation times,
the publication stamps, the switch and retry deadlines, the stall. When that clock
jumps (``/clock`` back 10 s or forward 100 s), they all point to the wrong moment:
backwards, the next request waits for a deadline 10 s away while ``/diagnostics``
says OK; forwards, the whole jump counts as stall time. rclpy reports the jump
(``Clock.create_jump_handler``); the core then restarts its timeline
(:func:`restarted_scheduler`: a new scheduler with the same settings and latency
measurements, the old one's stall counted up to the jump), forgets the camera
frames and joint states (a joint state from before a jump back would stay the
newest, freezing every observation at the jump), drops a reply to a request sent
before the jump (a new ``timeline``: its latency would be negative, its actions for
the old time), holds (the gate's stop from the controller's state, on the same clock:
back, its last command before the jump; forward, the end of its trajectory), and
:class:`ClockJumps` keeps a WARN on ``/diagnostics`` for :data:`NOTICE_S` seconds.

Plain Python, no rclpy.
"""

from __future__ import annotations

from relay_ros.pipeline.scheduler import ChunkScheduler
from relay_ros.pipeline.server_session import ServerSession
from relay_ros.pipeline.streaming_counts import StreamingCounts

__all__ = ["NOTICE_S", "ClockJumps", "describe_jump", "restart_timeline", "restarted_scheduler"]

#: How long after a jump ``/diagnostics`` still reports it (WARN), seconds.
NOTICE_S = 5.0


def describe_jump(delta_s: float) -> str:
    """The sentence for a jump of ``delta_s`` seconds, for the log and the hold reason."""
    direction = "back" if delta_s < 0 else "forward"
    return (
        f"the node clock jumped {direction} {abs(delta_s):.3f} s (use_sim_time: /clock): "
        "schedule reset, holding until a chunk for the new time comes"
    )


def restarted_scheduler(scheduler: ChunkScheduler) -> ChunkScheduler:
    """A new scheduler with ``scheduler``'s settings and latency measurements: no
    current or held chunk, no retry deadline, no stall (all on the old timeline)."""
    return ChunkScheduler(scheduler.config, scheduler.latencies)


def restart_timeline(
    session: ServerSession, counts: StreamingCounts, delta_s: float, now: float
) -> None:
    """Give ``session`` a :func:`restarted_scheduler` and a new ``timeline`` after a
    jump of ``delta_s`` seconds seen at ``now`` (a reply to a request sent before it is
    dropped); the old one's stall counts up to the jump (not the jump itself)."""
    old = session.scheduler
    counts.retire(old, now - delta_s)
    session.scheduler = restarted_scheduler(old)
    session.timeline += 1


class ClockJumps:
    """The jumps seen so far, and the notice ``/diagnostics`` shows after one."""

    def __init__(self) -> None:
        self.count = 0
        self._reason: str | None = None
        self._at: float | None = None

    def jumped(self, delta_s: float, now: float) -> str:
        """A jump of ``delta_s`` seconds, seen at ``now`` (the new time); returns its sentence."""
        self.count += 1
        self._reason = describe_jump(delta_s)
        self._at = now
        return self._reason

    def notice(self, now: float) -> str | None:
        """The last jump's sentence for :data:`NOTICE_S` seconds after it, else None."""
        if self._at is None or not (self._at <= now < self._at + NOTICE_S):
            return None
        return self._reason

    @property
    def last(self) -> str | None:
        """The last jump's sentence, or None."""
        return self._reason
