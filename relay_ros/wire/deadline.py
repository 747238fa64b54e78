"""``Deadline``: one absolute deadline shared by every step of an operation.

An open (DNS, TCP, TLS, the upgrade, the metadata frame, the direct route, and the
close of an attempt that failed) or one request (send and reply) runs under one
deadline, so that its steps together take at most ``timeout`` seconds: a step never
starts a timeout of its own.
"""

from __future__ import annotations

import errno
import time

__all__ = ["CANCEL_POLL_S", "Deadline", "timeout_error"]

#: While a cancel event applies, blocking waits are cut into slices this long
#: (seconds) so that cancellation is noticed promptly.
CANCEL_POLL_S = 0.05


class Deadline:
    """An absolute deadline on the monotonic clock; ``timeout=None`` means none."""

    def __init__(self, timeout: float | None) -> None:
        self._end = None if timeout is None else time.monotonic() + timeout
        self.timeout = timeout

    def remaining(self) -> float | None:
        """Seconds left (<= 0 once passed); None without a deadline."""
        if self._end is None:
            return None
        return self._end - time.monotonic()

    def capped(self, seconds: float) -> Deadline:
        """A deadline ``seconds`` from now, or this one if it ends sooner: for a step
        that has a bound of its own (a closing handshake) inside this operation."""
        remaining = self.remaining()
        if remaining is not None and remaining < seconds:
            return self
        return Deadline(seconds)


def timeout_error(deadline: Deadline, what: str) -> TimeoutError:
    """The ``TimeoutError`` for ``deadline`` passing while waiting for ``what``."""
    return TimeoutError(errno.ETIMEDOUT, f"timed out after {deadline.timeout} s waiting for {what}")
