"""Watching policy_node during a replay: hold periods and refusal grouping.

:class:`ReplayMonitor` samples the node's hold reason, refusal counter and
counters (on the executor thread, on wall time) and turns them into
:class:`~relay_ros.bag.replay_report.HoldPeriod` intervals and refusal counts
per reason. Reasons differ in their numbers (ages, positions), so refusals are
grouped with those numbers replaced by ``#`` and consecutive hold reasons with
the same head ("stale observation: ...") make one period.

Plain Python: the node is used through its attributes only.
"""

from __future__ import annotations

import re
import threading
from typing import Any

from relay_ros.bag.replay_report import HoldPeriod

__all__ = ["ReplayMonitor"]

# Numbers that change from message to message (ages, positions, steps, counts);
# digits inside names (joint4, base_0_rgb) are kept.
_NUMBER = re.compile(r"(?<![\w.'])-?\d+(?:\.\d+)?(?:e-?\d+)?(?![\w'])")


def _normalise(reason: str) -> str:
    """A reason with its changing numbers (ages, positions) replaced by ``#``."""
    return _NUMBER.sub("#", reason)


def _hold_key(reason: str) -> str:
    """What makes two hold reasons one hold period: the text before the first ':'.

    "stale observation: stale input: ..." and "stale observation: stale inputs: ..."
    (a second camera going stale) are one period; a reason without ':' counts
    with its changing numbers replaced (:func:`_normalise`).
    """
    head, sep, _rest = reason.partition(": ")
    return head if sep else _normalise(reason)


class ReplayMonitor:
    """Samples the node's hold reason, refusals and counters on the executor thread."""

    def __init__(self, node: Any, bag_start_s: float) -> None:
        self._node = node
        self._start = bag_start_s
        self._lock = threading.Lock()
        self.periods: list[HoldPeriod] = []
        self._open: tuple[str, str, float] | None = None  # (normalised, text, start)
        self.refusals: dict[str, int] = {}
        self._refusal_count = 0
        self._last_refusal: str | None = None
        self.counts: dict[str, int] = dict(node.counts)
        self.hold_reason: str | None = None

    def sample(self) -> None:
        node = self._node
        now = node.get_clock().now().nanoseconds / 1e9 - self._start
        counts = node.counts
        reason = node.hold_reason
        refusal = node.last_refusal
        with self._lock:
            self.counts = counts
            self.hold_reason = reason
            new = counts["refusals"] - self._refusal_count
            if new > 0 and refusal is not None:
                kind = _normalise(refusal)
                self.refusals[kind] = self.refusals.get(kind, 0) + new
            self._refusal_count = counts["refusals"]
            self._last_refusal = refusal
            key = _hold_key(reason) if reason is not None else None
            if self._open is not None and self._open[0] != key:
                self.periods.append(HoldPeriod(self._open[1], self._open[2], max(now, 0.0)))
                self._open = None
            if key is not None and self._open is None:
                self._open = (key, reason, max(now, 0.0))

    def finish(self) -> list[HoldPeriod]:
        with self._lock:
            periods = list(self.periods)
            if self._open is not None:
                periods.append(HoldPeriod(self._open[1], self._open[2], None))
            return periods
