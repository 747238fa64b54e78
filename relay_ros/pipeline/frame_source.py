"""Where the streaming core takes camera frames from: one source per camera, pulled.

The core reads its cameras when it needs them (in the window before a request, see
``StreamingCore.wants_frames``), not on every message: a :class:`FrameSource` hands
over the newest frame that came since the last take, with its reception time on the
node clock. policy_node's polled subscriptions implement it
(``relay_ros.node.polled.PolledSubscription.take_newest``); a test or the simulated
loop uses :class:`LatestFrame`, fed with plain arrays.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

__all__ = ["ArrivedFrame", "FrameSource", "LatestFrame"]


@dataclass(frozen=True)
class ArrivedFrame:
    """One frame a source handed over.

    Attributes:
        msg: A serialized or message ``sensor_msgs/Image``, a ``CompressedImage``,
            or an (H, W, 3) uint8 RGB array.
        received: When it arrived, node clock (s): the freshness checks and the
            observation's time are measured from it.
    """

    msg: Any
    received: float


class FrameSource(Protocol):
    """One camera, read on demand."""

    def take_newest(self, now: float) -> ArrivedFrame | None:
        """The newest frame that came since the last take (older ones are dropped),
        or None when none came; ``now`` is the node clock."""
        ...


class LatestFrame:
    """A :class:`FrameSource` fed by hand: :meth:`put` a frame, the next take gets it once."""

    def __init__(self) -> None:
        self._frame: ArrivedFrame | None = None

    def put(self, msg: Any, received: float) -> None:
        """Make ``msg`` (received at ``received``, node clock) the newest frame."""
        self._frame = ArrivedFrame(msg, received)

    def take_newest(self, now: float) -> ArrivedFrame | None:
        """The frame put since the last take, or None."""
        frame, self._frame = self._frame, None
        return frame
