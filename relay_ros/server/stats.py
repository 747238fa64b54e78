"""``ServerStats``: the reference server's connection and frame counters.

Tests and benchmarks read them (``ServerHandle.stats``) and wait on them
(:meth:`ServerStats.wait_for`) instead of sleeping.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

__all__ = ["ServerStats"]


class ServerStats:
    """Connection counters, readable from any thread (updated on the server loop).

    Only the server's loop thread writes the counters, so a bump is a plain increment;
    the condition is taken only while some thread waits in :meth:`wait_for`.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._waiting = 0
        self.connections_opened = 0
        self.connections_closed = 0
        self.frames = 0
        self.errors = 0
        self.sessions_evicted = 0

    @property
    def open_connections(self) -> int:
        """WebSocket connections whose handler is running."""
        with self._cond:
            return self.connections_opened - self.connections_closed

    def bump(self, name: str) -> None:
        """Add one to counter ``name``; only the server's loop thread calls this."""
        setattr(self, name, getattr(self, name) + 1)
        # A waiter registers under the lock before it first evaluates its predicate, so
        # either it sees this increment or this check sees it and wakes it.
        if self._waiting:
            with self._cond:
                self._cond.notify_all()

    def wait_for(self, predicate: Callable[[ServerStats], bool], timeout: float) -> bool:
        """Block until ``predicate(self)`` holds or ``timeout`` (s) passes; its last value."""
        with self._cond:
            self._waiting += 1
            try:
                return self._cond.wait_for(lambda: predicate(self), timeout)
            finally:
                self._waiting -= 1
