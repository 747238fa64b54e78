"""Where one request's time went: upload, server, download, total, and bytes.

The troubleshooting guide asks users to "separate network time from inference
time". The client sees four instants of each request (``time.perf_counter``):
when it started sending, when the last byte was handed to the socket, when the
first byte of the reply arrived and when the reply was complete; the server
reports its own time in the reply's ``server_timing`` (``infer_ms``: from the
moment it had the whole observation to the reply, decoding and validation
included). From these:

- **server**: ``server_timing["infer_ms"]``;
- **download**: first reply byte -> reply complete (the reply's transfer time);
- **upload**: send start -> first reply byte, minus the server time: the request's
  transfer plus the propagation delay both ways. Without synchronized clocks the
  client cannot split the round trip's propagation between the two directions,
  so it is counted here, with the direction that dominates a robot's traffic;
- **total**: send start -> reply complete.

"Handed to the socket" (``send_done``) is when ``sendall`` returned: the kernel's
send buffer (megabytes) usually takes a whole request at once, so it says little
about when the bytes left; it is kept for completeness.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["RequestTiming", "server_seconds"]


def server_seconds(server_timing: Mapping[str, Any] | None) -> float | None:
    """``server_timing["infer_ms"]`` in seconds, or None when absent or not a number."""
    if not isinstance(server_timing, Mapping):
        return None
    value = server_timing.get("infer_ms")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if not value >= 0:  # NaN too
        return None
    return float(value) / 1000.0


@dataclass(frozen=True)
class RequestTiming:
    """Timestamps and sizes of one request, seen from the client.

    Attributes:
        bytes_sent: Bytes of the request written to the socket (WebSocket framing included).
        bytes_received: Bytes read from the socket until the reply was complete.
        send_start: ``perf_counter()`` before the request was encoded and sent.
        send_done: ``perf_counter()`` when ``sendall`` returned.
        first_byte: ``perf_counter()`` when the first byte after sending arrived.
        reply_done: ``perf_counter()`` when the reply message was complete.
        server_s: The server's own time from its ``server_timing``, seconds, or None.
    """

    bytes_sent: int
    bytes_received: int
    send_start: float
    send_done: float
    first_byte: float
    reply_done: float
    server_s: float | None = None

    @property
    def total_s(self) -> float:
        """Send start to reply complete."""
        return self.reply_done - self.send_start

    @property
    def download_s(self) -> float:
        """The reply's transfer: first byte to complete."""
        return max(0.0, self.reply_done - self.first_byte)

    @property
    def upload_s(self) -> float:
        """Send start to the first reply byte, without the server's time: the
        request's transfer and the propagation both ways."""
        before_reply = self.first_byte - self.send_start
        return max(0.0, before_reply - (self.server_s or 0.0))

    def split(self) -> dict[str, float | None]:
        """``{"upload_s", "server_s", "download_s", "total_s"}`` of this request."""
        return {
            "upload_s": self.upload_s,
            "server_s": self.server_s,
            "download_s": self.download_s,
            "total_s": self.total_s,
        }
