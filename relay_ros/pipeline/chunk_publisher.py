"""Publishing the due chunk: checked by the gate, then sent to each controller.

Each tick the scheduler may have a publication due. :class:`ChunkPublisher` asks the
:class:`~relay_ros.pipeline.publication_check.PublicationGate` (the one place
publication checks go) and either returns the refusal, for the core to hold on, or
sends the accepted, maybe clamped, publication as one message per controller (or
``~/preview`` in ``dry_run``, :mod:`~relay_ros.pipeline.controller_messages`), which
ends any hold. What clamp mode changed is logged at most every few seconds.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from relay_ros.pipeline.controller_messages import TrajectoryMessage, chunk_messages
from relay_ros.pipeline.holding import Holding
from relay_ros.pipeline.publication_check import PublicationGate
from relay_ros.pipeline.safety import Refusal
from relay_ros.pipeline.server_session import ServerSession
from relay_ros.pipeline.settings import StreamingSettings
from relay_ros.pipeline.streaming_counts import StreamingCounts

__all__ = ["CLAMP_WARNING_PERIOD_S", "ChunkPublisher"]

#: What clamp mode changed is logged at most this often (``last_clamp`` always has it).
CLAMP_WARNING_PERIOD_S = 5.0


class ChunkPublisher:
    """Publishes the scheduler's due publication when the gate accepts it.

    Args:
        gate: Checks each publication and records what the controllers follow.
        holding: Told when a chunk is published (the hold is over).
        counts: ``chunks_published``.
        publish: Sends one trajectory message.
        warning: Writes a WARN line (the core's logger).
    """

    def __init__(
        self,
        gate: PublicationGate,
        holding: Holding,
        counts: StreamingCounts,
        *,
        publish: Callable[[TrajectoryMessage], None],
        warning: Callable[[str], Any],
    ) -> None:
        self._gate = gate
        self._holding = holding
        self._counts = counts
        self._publish = publish
        self._warning = warning
        self._clamp_warned_at = -math.inf

    def publish_due(
        self,
        session: ServerSession,
        now: float,
        settings: StreamingSettings,
        measured: np.ndarray | None,
        measured_at: float | None = None,
    ) -> Refusal | None:
        """Publish what is due at ``now`` if it passes the checks; the refusal if not
        (nothing was sent then); None also when nothing is due. ``measured``: the
        commanded joints' measured positions (None: missing or stale), measured at
        ``measured_at``."""
        verdict = self._gate.publish_due(
            session.scheduler, now, settings=settings, measured=measured, measured_at=measured_at
        )
        if verdict is None:
            return None
        if verdict.refusal is not None or verdict.publication is None:
            assert verdict.refusal is not None
            return verdict.refusal
        if verdict.note is not None and now - self._clamp_warned_at >= CLAMP_WARNING_PERIOD_S:
            self._clamp_warned_at = now
            self._warning(verdict.note)
        for message in chunk_messages(
            verdict.publication,
            session.outputs,
            settings.commanded_joints,
            dry_run=settings.dry_run,
        ):
            self._publish(message)
        self._counts.chunks_published += 1
        self._holding.streaming()
        return None
