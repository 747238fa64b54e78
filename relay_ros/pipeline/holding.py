"""Holding position: why the robot is held, whether that is news, and the hold message.

When anything goes wrong (an input stale or missing, a refused chunk, an error
reply, a lost connection, a reset, ``~/enable`` false) the streaming core stops
following chunks and calls :meth:`Holding.hold`, so it says it once and acts once:

- the reason, always the latest (``/diagnostics`` shows it), and its *kind*, which
  groups reasons whose text changes from tick to tick (a stale input's age): a new
  hold, or a hold of another kind, is logged; a repeat only updates the reason;
- the scheduler is reset, so the next chunk starts from where the robot is;
- the controllers are sent the current commanded position (through the
  :class:`~relay_ros.pipeline.publication_check.PublicationGate`, which records it
  as what they follow) only when a trajectory of ours has moved the robot since the
  last hold message: once per hold, and nothing when nothing of ours moves it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from relay_ros.pipeline.controller_messages import TrajectoryMessage
from relay_ros.pipeline.publication_check import PublicationGate
from relay_ros.pipeline.scheduler import ChunkScheduler
from relay_ros.pipeline.settings import StreamingSettings
from relay_ros.pipeline.streaming_counts import StreamingCounts

__all__ = ["Holding"]

#: Hold kinds that are expected before the first chunk (inputs not there yet): logged
#: at INFO as waiting, not as a fault.
_STARTUP_KINDS = ("missing_input", "joint_states")


class Holding:
    """The hold state of the streaming core, and the act of holding (module docstring).

    Args:
        counts: The core's counters (a refused observation is counted here; the
            first published chunk ends the start-up).
        gate: Builds the hold messages and records what the controllers follow.
        publish: Sends one trajectory message.
        info: Writes an INFO line (the core's logger).
        warning: Writes a WARN line.
    """

    def __init__(
        self,
        *,
        counts: StreamingCounts,
        gate: PublicationGate,
        publish: Callable[[TrajectoryMessage], None],
        info: Callable[[str], Any],
        warning: Callable[[str], Any],
    ) -> None:
        self._counts = counts
        self._gate = gate
        self._publish = publish
        self._info = info
        self._warning = warning
        self._reason: str | None = None
        self._kind: str | None = None
        self._moving = False

    @property
    def reason(self) -> str | None:
        """Why the robot is held now, or None while streaming."""
        return self._reason

    def hold(
        self,
        reason: str,
        kind: str,
        now: float,
        *,
        settings: StreamingSettings,
        scheduler: ChunkScheduler | None,
        measured: Callable[[], np.ndarray | None],
        refusal: bool = False,
        commanded: np.ndarray | None = None,
    ) -> None:
        """Stop following chunks: say why, reset ``scheduler``, command the current position.

        A repeat of the same ``kind`` only updates the reason. ``refusal``: the
        observation was refused (stale or missing joint states, stale frames);
        counted once per hold, with ``last_refusal`` set, except before the first
        chunk, when inputs not there yet are expected, not a fault. The position
        held is ``commanded``, else what ``scheduler`` commands now, else
        ``measured()`` (None: nothing is sent).
        """
        if self._kind == kind and self._reason is not None:
            self._reason = reason
            return
        self._reason = reason
        self._kind = kind
        startup = self._counts.chunks_published == 0
        if refusal and not startup:
            self._counts.refused(reason)
        if startup and kind in _STARTUP_KINDS:
            self._info(f"waiting before the first request: {reason}")
        else:
            self._warning(f"holding position: {reason}")
        if scheduler is not None:
            if commanded is None:
                commanded = scheduler.last_commanded(now)
            scheduler.reset()
        if not self._moving:
            return  # nothing of ours is moving the robot
        if commanded is None:
            commanded = measured()
        if commanded is None:
            return
        self._moving = False
        dt = 0.0 if scheduler is None else scheduler.config.dt
        for message in self._gate.hold(
            commanded, settings.outputs, dt=dt, now=now, dry_run=settings.dry_run
        ):
            self._publish(message)

    def streaming(self) -> None:
        """A chunk was published: the hold (if any) is over, and said so."""
        ended = self._reason
        self._moving = True
        self._reason = self._kind = None
        if ended is not None:
            self._info(f"streaming again after: {ended}")

    def clear(self) -> None:
        """Forget the hold without publishing anything (``~/enable`` true)."""
        self._reason = self._kind = None

    def forget_motion(self) -> None:
        """What was published did not move the robot (it went to ``~/preview``)."""
        self._moving = False
        self._gate.motion.forget()
