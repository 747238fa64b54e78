"""The node's health for ``/diagnostics``: one level, one sentence, the details.

:func:`assess` reads a :class:`~relay_ros.pipeline.streaming.StreamingCore` and the
connection state. The level says what a robot team acts on:

- ERROR: not connected to the policy server, the configuration does not fit it, or
  a commanded joint has no limits (waiting for the URDF);
- WARN: stopped by a switch (``~/enable``, the lifecycle state, the dead-man
  switch: its reason), holding position (the reason follows), a clock jump in the last
  few seconds, or waiting for a chunk with nothing left to follow: a robot standing
  still is never OK;
- OK ("streaming"): the controllers have points ahead.

The values carry the latency percentiles, the stall time, the counters, the last
refusal, the smoothing in force with the execute horizon and request lead it runs
with (the latency's when automatic), the pipeline timing and the per-request
latency split (upload, server, download, total, request bytes), as strings
(``diagnostic_msgs/KeyValue``).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from relay_ros.pipeline.server_session import lora_text

if TYPE_CHECKING:
    from relay_ros.pipeline.streaming import StreamingCore

__all__ = ["Health", "Level", "assess"]


class Level(enum.IntEnum):
    """``diagnostic_msgs/DiagnosticStatus`` levels."""

    OK = 0
    WARN = 1
    ERROR = 2


@dataclass(frozen=True)
class Health:
    """The node's health: a level, one sentence, and the key/value details."""

    level: Level
    message: str
    values: dict[str, str]


def _ms(seconds: float | None, digits: int) -> str:
    return "" if seconds is None else f"{seconds * 1000:.{digits}f}"


def assess(
    core: StreamingCore[Any], now: float, *, connected: bool, connection_error: str | None
) -> Health:
    """The health of ``core`` at ``now`` (node clock) with the connection's state."""
    hold = core.hold_reason
    limits_problem = core.config.limits_problem
    if core.config_error is not None:
        level, message = Level.ERROR, core.config_error
    elif limits_problem is not None:
        level, message = Level.ERROR, f"cannot command: {limits_problem}"
    elif not connected:
        level = Level.ERROR
        message = "not connected to the policy server" + (
            f": {connection_error}" if connection_error else ""
        )
    elif not core.enabled:
        level, message = Level.WARN, core.stop_reason or "disabled"
    elif hold is not None:
        level, message = Level.WARN, f"holding position: {hold}"
    elif (jump := core.clock_notice(now)) is not None:
        level, message = Level.WARN, jump
    else:
        stalled = core.stalled(now)
        level, message = (Level.OK, "streaming") if stalled is None else (Level.WARN, stalled)
    values = {
        "connected": str(connected),
        "enabled": str(core.enabled),
        "dry_run": str(core.config.dry_run),
        "session_id": core.session_id,
        "lora": lora_text(core.config.lora, core.config.lora_scale),
        "latency_p50_ms": _ms(core.latency.percentile(50), 1),
        "latency_p99_ms": _ms(core.latency.percentile(99), 1),
        "stall_time_s": f"{core.stall_time(now):.3f}",
        "last_refusal": core.last_refusal or "",
        "last_clamp": core.last_clamp or "",
        "hold_reason": hold or "",
        "smoothing": core.smoothing or "",
        "execute_horizon": "" if (execute := core.execute_horizon) is None else str(execute),
        "request_lead_ms": _ms(core.request_lead_s, 1),
        **{key: str(value) for key, value in core.counts.items()},
    }
    for name, stats in core.pipeline_timing.items():
        for q in (50, 99):
            values[f"{name}_p{q}_ms"] = _ms(stats.percentile(q), 2)
    # Where each request's time went (docs/network.md): upload, server, download, total.
    network = core.network_timing
    for name in ("upload", "server", "download", "total"):
        values[f"{name}_p50_ms"] = _ms(network[name].percentile(50), 1)
    size = network["request_bytes"].percentile(50)
    values["request_bytes_p50"] = "" if size is None else f"{size:.0f}"
    values["image_encoding"] = core.frames.encoding
    return Health(level, message, values)
