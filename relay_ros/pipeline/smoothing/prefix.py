"""``prefix``: the server continues the committed actions (real-time chunking over the wire).

When the server advertises ``action_prefix`` (docs/protocol.md, "Action prefix"),
each observation carries the actions the robot follows while the server infers
(:mod:`~relay_ros.pipeline.action_prefix`), and the reply starts with them: the
chunk is smooth where it is made, and the server can keep the committed motion's
mode (the approach side of the reference visual policy), which no client-side
method can. The published rows are the reply's own; a reply that comes later than
expected joins the commanded motion through the scheduler's committed rows
(``ChunkScheduler.request_sent(committed_steps=d)``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from relay_ros.pipeline.smoothing.switch import Smoothed, Smoothing, Switch

__all__ = ["ServerPrefix"]


@dataclass(frozen=True)
class ServerPrefix(Smoothing):
    """The server's action prefix: publishes the reply's rows unchanged (module docstring)."""

    name: ClassVar[str] = "prefix"
    needs_prefix: ClassVar[bool] = True

    def smooth(self, switch: Switch) -> Smoothed:
        return Smoothed(np.array(switch.positions, dtype=np.float64), 0)

    def describe(self) -> str:
        return "prefix (the server continues the committed actions)"
