"""``Deadline``: one absolute deadline shared by every step of an operation.

An open (DNS, TCP, TLS, the upgrade, the metadata frame, the direct route, and the
close of an attempt that failed) or one request (send and reply) runs under one
deadline, so that its steps together take at most ``timeout`` seconds: a step never
starts a timeout of its own. :func:`wait_slice` is the one step of every wait under
a deadline and a cancel event (socket readiness, name resolution, a reply).
"""

from __future__ import annotations

import errno
import threading
import time
from collections.abc import Callable

from relay_ros.wire.errors import OpenCancelled

__all__ = ["CANCEL_POLL_S", "Deadline", "timeout_error", "wait_slice"]

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


def wait_slice(
    deadline: Deadline | None,
    cancel: threading.Event | None,
    what: str,
    next_event: Callable[[], float | None] | None = None,
) -> float | None:
    """How long one blocking wait may take now (seconds; None: no bound), for a loop
    that waits under ``deadline`` and ``cancel``.

    The time left, cut to ``next_event()`` (seconds until the caller has something
    to do, e.g. a keepalive ping; asked only when neither ends the wait) and, while a
    cancel event applies, to :data:`CANCEL_POLL_S` so that cancelling is noticed.

    Raises:
        OpenCancelled: ``cancel`` is set (``what`` names what was being waited for).
        TimeoutError: the deadline passed (see :func:`timeout_error`).
    """
    if cancel is not None and cancel.is_set():
        raise OpenCancelled(what)
    timeout = None if deadline is None else deadline.remaining()
    if timeout is not None and timeout <= 0:
        raise timeout_error(deadline, what)  # type: ignore[arg-type]
    if next_event is not None:
        event = next_event()
        if event is not None:
            timeout = event if timeout is None else min(timeout, event)
    if cancel is not None:
        timeout = CANCEL_POLL_S if timeout is None else min(timeout, CANCEL_POLL_S)
    return timeout
