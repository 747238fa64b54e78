"""What the core's collaborators decide, as values: publish, hold, or refuse.

The request, reply and publication jobs of :class:`~relay_ros.pipeline.streaming.StreamingCore`
return one of these instead of calling back into the core; the core acts on each in
one place (``StreamingCore._act``), so no path reaches the controllers around the
:class:`~relay_ros.pipeline.gate.gate.Gate`:

- :class:`Publish`: the messages of a chunk the gate accepted;
- :class:`Hold`: stop following chunks, for a reason (an input missing or stale, an
  error reply, a lost connection, ``~/enable`` false, a reset, a clock jump);
- :class:`Refuse`: something was refused (a chunk, a malformed reply): counted as a
  refusal, then a hold with the same reason.
"""

from __future__ import annotations

from dataclasses import dataclass

from relay_ros.pipeline.gate.messages import TrajectoryMessage

__all__ = ["Decision", "Hold", "Publish", "Refuse"]


@dataclass(frozen=True, eq=False)
class Publish:
    """Send ``messages`` (one per controller, and ``~/preview``): an accepted chunk.

    ``note`` says what clamp mode changed in it (None: nothing)."""

    messages: tuple[TrajectoryMessage, ...]
    note: str | None = None


@dataclass(frozen=True)
class Hold:
    """Hold position because of ``reason`` (a sentence); ``kind`` groups reasons whose
    text changes from tick to tick (a stale input's age). ``refusal``: an observation
    was refused (stale or missing joint states, stale frames), counted once per hold."""

    reason: str
    kind: str
    refusal: bool = False


@dataclass(frozen=True)
class Refuse:
    """``reason`` refused something (kind ``kind``): count it, then hold with it."""

    reason: str
    kind: str


#: What a collaborator of the core returns (None: nothing to do).
Decision = Publish | Hold | Refuse
