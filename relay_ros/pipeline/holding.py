"""Holding position: why the robot is held, and whether a hold must be sent.

When anything goes wrong (an input stale or missing, a refused chunk, an error
reply, a lost connection, a reset, ``~/enable`` false) the streaming core stops
following chunks. :class:`Holding` keeps what that needs, so the core can say it
once and act once:

- the reason, always the latest (``/diagnostics`` shows it), and its *kind*, which
  groups reasons whose text changes from tick to tick (a stale input's age): a new
  hold, or a hold of another kind, is logged; a repeat only updates the reason;
- whether a trajectory of ours has moved the robot since the last hold message:
  the controllers are sent the current commanded position only then, once per hold
  (nothing of ours moving the robot: nothing to stop).
"""

from __future__ import annotations

__all__ = ["Holding"]


class Holding:
    """The hold state of the streaming core (see the module docstring)."""

    def __init__(self) -> None:
        self._reason: str | None = None
        self._kind: str | None = None
        self._moving = False

    @property
    def reason(self) -> str | None:
        """Why the robot is held now, or None while streaming."""
        return self._reason

    @property
    def moving(self) -> bool:
        """A chunk of ours was published since the last hold message went out."""
        return self._moving

    def hold(self, reason: str, kind: str) -> bool:
        """Hold for ``reason``; True when this is news (a new hold or another kind):
        log it, count it and stop the robot; False for a repeat."""
        repeated = self._kind == kind and self._reason is not None
        self._reason = reason
        self._kind = kind
        return not repeated

    def stopped(self) -> None:
        """A hold message went out: nothing of ours moves the robot any more."""
        self._moving = False

    def streaming(self) -> str | None:
        """A chunk was published: the hold (if any) is over; returns its reason."""
        ended = self._reason
        self._moving = True
        self._reason = self._kind = None
        return ended

    def clear(self) -> None:
        """Forget the hold without publishing anything (``~/enable`` true)."""
        self._reason = self._kind = None

    def forget_motion(self) -> None:
        """What was published did not move the robot (it went to ``~/preview``)."""
        self._moving = False
