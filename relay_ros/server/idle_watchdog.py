"""``IdleWatchdog``: closes a server connection that sent no frame for a while."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from websockets.asyncio.server import ServerConnection

__all__ = ["IdleWatchdog"]

logger = logging.getLogger(__name__)


class IdleWatchdog:
    """Closes one connection after ``idle_s`` without a frame, with a single timer.

    The handler sets :attr:`busy` when a frame arrives and calls :meth:`idle` once its
    reply is sent; the timer, armed for the earliest possible deadline, re-arms itself
    when it finds the connection busy or active since. So a frame costs two attribute
    writes and one clock read, not a timeout context around every ``recv()``. As before,
    the idle time counts from the last reply (or the metadata), not while a request
    runs; the close is code 1000 with reason ``"idle for N s"``.
    """

    __slots__ = ("_idle_s", "_loop", "_peer", "_timer", "_ws", "busy", "closing", "since")

    def __init__(self, ws: ServerConnection, idle_s: float, peer: str) -> None:
        self._loop = asyncio.get_running_loop()
        self._ws = ws
        self._idle_s = idle_s
        self._peer = peer
        self.busy = False
        self.since = self._loop.time()
        self.closing: asyncio.Task[None] | None = None
        self._timer = self._loop.call_at(self.since + idle_s, self._check)

    def idle(self) -> None:
        """The reply is sent: the idle time starts now."""
        self.since = self._loop.time()
        self.busy = False

    def _check(self) -> None:
        now = self._loop.time()
        if self.busy:
            due = now + self._idle_s
        else:
            due = self.since + self._idle_s
            if due <= now:
                logger.info("%s idle for %.1f s; closing", self._peer, self._idle_s)
                self.closing = asyncio.ensure_future(
                    self._ws.close(1000, f"idle for {self._idle_s:g} s")
                )
                return
        self._timer = self._loop.call_at(due, self._check)

    async def stop(self) -> None:
        """Disarm the timer and let an idle close that started finish."""
        self._timer.cancel()
        if self.closing is not None:
            with contextlib.suppress(Exception):
                await self.closing
