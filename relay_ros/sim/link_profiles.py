"""Network link presets for the link emulator (:mod:`relay_ros.sim.link`).

A :class:`LinkProfile` says what the emulated link between robot and policy server
does to the bytes: bandwidth per direction (uplink = robot -> server), one-way
delay with uniform jitter, and optional periodic stalls (nothing is delivered in
either direction for a while, as during a cellular handover or a Wi-Fi roam).

The presets (``PRESETS``):

- ``lan``: a wired gigabit LAN to a GPU box in the same building. 1000 Mbit/s each
  way, 0.25 ms one way (0.5 ms RTT), 0.05 ms jitter.
- ``wan``: a robot on an office or lab uplink talking to a cloud GPU service.
  20 Mbit/s up, 100 Mbit/s down, 40 ms RTT +- 10 ms (20 ms one way, +- 5 ms per
  direction).
- ``lte``: a robot on a cellular modem. 10 Mbit/s up, 30 Mbit/s down, 60 ms RTT
  +- 20 ms, and a 150 ms stall every 10 s. Where the numbers come from: the public
  "4G" preset of the Loadero test service
  (https://wiki.loadero.com/test-creation/participant-configuration/network-conditions/)
  is 100/50 Mbit/s, 45 ms latency and 5/15 ms jitter; that is a good cell. A robot
  indoors, at the cell edge or sharing the cell, sees a fraction of it, and the
  uplink is the direction LTE is weakest in, so we took a tenth of the uplink and a
  third of the downlink, and a slightly longer, more variable RTT. The stall is our
  assumption, not a measurement: a periodic short outage that exercises the node's
  recovery, of the order of a handover's interruption plus the TCP retransmission
  it causes.

Delays and jitter here are per direction; ``rtt_ms`` is the sum of both.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

__all__ = ["PRESETS", "LinkProfile", "LinkProfileError", "get_profile"]


class LinkProfileError(ValueError):
    """A link profile value is out of range, or a preset name is unknown."""


def _check(name: str, value: Any) -> None:
    """``value`` must be a finite number >= 0."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise LinkProfileError(f"{name} is {value!r}; expected a finite number")
    if value < 0:
        raise LinkProfileError(f"{name} is {value!r}; expected a number >= 0")


@dataclass(frozen=True)
class LinkProfile:
    """What the emulated link does to the bytes, per direction.

    Attributes:
        name: Label shown in tables and logs.
        up_mbit_s: Uplink (client -> server) bandwidth in Mbit/s (10^6 bit/s);
            None = unlimited.
        down_mbit_s: Downlink (server -> client) bandwidth in Mbit/s; None = unlimited.
        delay_ms: One-way propagation delay in ms, the same in both directions.
        jitter_ms: Each burst's one-way delay is ``delay_ms`` + uniform in
            [-jitter_ms, +jitter_ms] (clipped at 0). Byte order is always kept.
        stall_every_s: Start a stall every this many seconds (None = no stalls);
            the first one starts ``stall_every_s`` after the proxy starts.
        stall_ms: Length of each stall in ms: nothing is delivered in either
            direction until it ends (data is held, not lost, as TCP would
            retransmit it).
        burst_bytes: Token bucket depth per direction: how many bytes may leave
            back to back at line rate after the link was idle.
    """

    name: str
    up_mbit_s: float | None
    down_mbit_s: float | None
    delay_ms: float
    jitter_ms: float = 0.0
    stall_every_s: float | None = None
    stall_ms: float = 0.0
    burst_bytes: int = 16 * 1024

    def __post_init__(self) -> None:
        for field in ("up_mbit_s", "down_mbit_s"):
            value = getattr(self, field)
            if value is not None:
                _check(field, value)
                if value <= 0:
                    raise LinkProfileError(f"{field} is {value!r}; expected > 0 or None")
        _check("delay_ms", self.delay_ms)
        _check("jitter_ms", self.jitter_ms)
        _check("stall_ms", self.stall_ms)
        if self.stall_every_s is not None:
            _check("stall_every_s", self.stall_every_s)
            if self.stall_every_s * 1000.0 <= self.stall_ms:
                raise LinkProfileError(
                    f"stall_every_s {self.stall_every_s!r} must be longer than "
                    f"stall_ms {self.stall_ms!r} ms"
                )
        if isinstance(self.burst_bytes, bool) or not isinstance(self.burst_bytes, int):
            raise LinkProfileError(f"burst_bytes is {self.burst_bytes!r}; expected an integer")
        if self.burst_bytes < 1500:
            raise LinkProfileError(
                f"burst_bytes is {self.burst_bytes}; expected at least one packet (1500)"
            )

    @property
    def rtt_ms(self) -> float:
        """Mean round-trip propagation time, ms (without transmission time)."""
        return 2.0 * self.delay_ms

    def with_overrides(self, **changes: Any) -> LinkProfile:
        """A copy with some fields changed (validated again); None values are ignored."""
        given = {k: v for k, v in changes.items() if v is not None}
        return replace(self, **given)

    def describe(self) -> str:
        """One line: bandwidths, RTT, jitter, stalls."""

        def rate(value: float | None) -> str:
            return "unlimited" if value is None else f"{value:g} Mbit/s"

        text = (
            f"{self.name}: up {rate(self.up_mbit_s)}, down {rate(self.down_mbit_s)}, "
            f"RTT {self.rtt_ms:g} ms +- {2 * self.jitter_ms:g} ms"
        )
        if self.stall_every_s is not None and self.stall_ms > 0:
            text += f", {self.stall_ms:g} ms stall every {self.stall_every_s:g} s"
        return text


#: Named presets; see the module docstring for where the numbers come from.
PRESETS: dict[str, LinkProfile] = {
    "lan": LinkProfile("lan", up_mbit_s=1000.0, down_mbit_s=1000.0, delay_ms=0.25, jitter_ms=0.05),
    "wan": LinkProfile("wan", up_mbit_s=20.0, down_mbit_s=100.0, delay_ms=20.0, jitter_ms=5.0),
    "lte": LinkProfile(
        "lte",
        up_mbit_s=10.0,
        down_mbit_s=30.0,
        delay_ms=30.0,
        jitter_ms=10.0,
        stall_every_s=10.0,
        stall_ms=150.0,
    ),
}


def get_profile(name: str) -> LinkProfile:
    """The preset called ``name``.

    Raises:
        LinkProfileError: ``name`` is not one of ``PRESETS`` (the message lists them).
    """
    try:
        return PRESETS[name]
    except KeyError:
        raise LinkProfileError(
            f"link preset {name!r} is unknown; expected one of {sorted(PRESETS)}"
        ) from None
