"""Request lead and execute horizon that follow the measured latency (no rclpy).

The scheduler needs two numbers per chunk: how long before the switch the next
observation is sent (the lead) and how many of a chunk's actions run before the
next chunk takes over (E). Both were fixed by hand (a lead at the p95 latency plus
50 ms, E = H/2), so a slow link ran stale observations: at 80 ms inference the
observation behind an executed action was 411 ms old (median), against about 90 ms
that inference, the round trip and one control period need. When the user leaves
them automatic (``request_lead_s: auto``, ``execute_horizon: 0``), the scheduler asks
these rules instead, with the latency the node measured (``RequestClock.estimate``:
request -> reply, each connection's warm-up reply left out):

- **lead** = the median latency + ``margin_s`` (:func:`adaptive_lead`): half the
  replies come a little after the switch and are published on arrival, while the
  robot follows the rest of the running chunk (early mode publishes all of it);
  the observation is younger by the spread the p95 lead waited for;
- **E** = ``ceil(factor * median latency / dt)`` actions, ``factor`` 1.5
  (:func:`adaptive_execute_horizon`),
  at least ``minimum`` and at most the cap (the server's ``H / 2``, or the
  ``execute_horizon`` the user set as the ceiling). One request is in flight at a
  time, so a new chunk can come at most once per latency; an executed part about as
  long as that keeps the pipeline full (the next request goes out as soon as the
  last chunk is published) and the observation age within about twice its physical
  bound (the latency plus one control period).

Both are bounded (the lead by ``(H-1)*dt - min_lead_s``, the scheduler's cap; E by
``[minimum, cap]``) and re-read at every request and publication, so they follow a
link that gets slower or faster. A value the user sets wins (``request_lead_s``
seconds, ``execute_horizon`` > 0), live too (``ros2 param set``). E stays at the cap
in sync mode (openpi's broker) and with the server's prefix (the server sizes its
soft region from E: at E = 6 the reference server's cross-fade is 3 rows, and the
prefix read 1,718 rad/s^3 of jerk against 254 at E = 25). The constants are chosen by
``bench/motion.py`` (docs/streaming.md, docs/benchmarks.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["AdaptiveTiming", "adaptive_execute_horizon", "adaptive_lead"]


@dataclass(frozen=True)
class AdaptiveTiming:
    """The rules' constants (module docstring).

    Attributes:
        lead_percentile: Latency percentile the lead starts from (0 < q <= 100).
        lead_margin_s: Added to it (s, >= 0).
        horizon_factor: E covers this many latencies (> 0).
        min_execute_horizon: Fewest actions per chunk (>= 1).
    """

    lead_percentile: float = 50.0
    lead_margin_s: float = 0.0
    horizon_factor: float = 1.5
    min_execute_horizon: int = 4

    def __post_init__(self) -> None:
        if not 0.0 < self.lead_percentile <= 100.0:
            raise ValueError(f"lead_percentile {self.lead_percentile!r} must be in (0, 100]")
        if not (math.isfinite(self.lead_margin_s) and self.lead_margin_s >= 0.0):
            raise ValueError(f"lead_margin_s {self.lead_margin_s!r} must be a number >= 0")
        if not (math.isfinite(self.horizon_factor) and self.horizon_factor > 0.0):
            raise ValueError(f"horizon_factor {self.horizon_factor!r} must be a number > 0")
        minimum = self.min_execute_horizon
        if isinstance(minimum, bool) or not isinstance(minimum, int) or minimum < 1:
            raise ValueError(f"min_execute_horizon {minimum!r} must be an integer >= 1")


def adaptive_lead(latency_s: float | None, rule: AdaptiveTiming) -> float:
    """The automatic lead (s) for a latency estimate at ``rule.lead_percentile``
    (``None`` before the first reply: 0, an early request is always timed from a
    published chunk, whose reply was measured)."""
    return (0.0 if latency_s is None else latency_s) + rule.lead_margin_s


def adaptive_execute_horizon(
    latency_s: float | None, dt: float, cap: int, rule: AdaptiveTiming
) -> int:
    """The automatic execute horizon for the median latency ``latency_s`` (s), action
    period ``dt`` (s) and the largest allowed ``cap``: ``cap`` before the first reply."""
    if latency_s is None:
        return cap
    wanted = math.ceil(rule.horizon_factor * latency_s / dt - 1e-9)
    return max(1, min(cap, max(rule.min_execute_horizon, wanted)))
