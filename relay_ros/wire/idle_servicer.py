"""``IdleServicer``: the one thread that services a client's socket between calls.

A client reads its socket only while a call waits for a reply. Between calls,
this thread, every ``interval_s`` seconds, processes what arrived: it answers the
server's pings and closing handshake, sends a keepalive ping when one is due and
fails a connection whose ping went unanswered, so that an idle client behaves
like websockets' own. It never waits for the client's lock: while a call runs,
that call reads the socket itself, so replies never pass through this thread.

When it finds the connection closed it calls ``on_close`` (``PolicyConnection``
wakes its worker with it, so a server's idle close is noticed at once). It holds
only a weak reference to the client, so a client dropped without ``close()`` is
closed here instead of keeping its socket and this thread alive.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Callable
from typing import Any, Protocol

from relay_ros.wire.transport import Transport

__all__ = ["DEFAULT_IDLE_POLL_S", "IdleServicer"]

_module_logger = logging.getLogger(__name__)

#: Default seconds between two services of an idle connection.
DEFAULT_IDLE_POLL_S = 0.5


class _Owner(Protocol):
    _closed: bool


class IdleServicer:
    """Services ``transport`` every ``interval_s`` s while ``lock`` is free (a thread).

    Args:
        owner: the client; weakly referenced, its ``_closed`` flag ends the service.
        transport: the connection serviced.
        lock: the client's call lock, taken without waiting.
        interval_s: seconds between two services.
        on_close: called on this thread, without the lock, once the connection is
            found closed (by the server, the network or an unanswered ping).
        logger: where to log (a ``logging.Logger``-like object).
    """

    def __init__(
        self,
        owner: _Owner,
        transport: Transport,
        lock: threading.Lock,
        *,
        interval_s: float = DEFAULT_IDLE_POLL_S,
        on_close: Callable[[], None] | None = None,
        logger: Any = None,
    ) -> None:
        self._stop = threading.Event()
        self._log = logger if logger is not None else _module_logger
        self._thread = threading.Thread(
            target=self._run,
            args=(weakref.ref(owner), transport, lock, interval_s, on_close),
            name="relay-client-keepalive",
            daemon=True,
        )
        self._thread.start()

    def stop(self) -> None:
        """Ask the thread to end (it is idle or ends its service soon)."""
        self._stop.set()

    def join(self) -> None:
        """Wait for the thread to end (no-op when called from the thread itself)."""
        if self._thread is not threading.current_thread():
            self._thread.join()

    def _run(
        self,
        owner_ref: weakref.ref[_Owner],
        transport: Transport,
        lock: threading.Lock,
        interval_s: float,
        on_close: Callable[[], None] | None,
    ) -> None:
        while not self._stop.wait(interval_s):
            if not lock.acquire(blocking=False):
                continue  # a running call reads the socket itself
            try:
                owner = owner_ref()
                if owner is None:
                    transport.close()
                    return
                closed = owner._closed
                del owner
                if closed:
                    return
                if not transport.poll():
                    break
            except Exception:  # the helper thread must never die noisily
                self._log.debug("idle service of %s failed", transport.display_url, exc_info=True)
                break
            finally:
                lock.release()
        else:
            return  # stopped
        if on_close is not None:
            try:
                on_close()
            except Exception:
                self._log.exception("on_close callback %r failed", on_close)
