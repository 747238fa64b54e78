"""``SessionTable``: one connection's sessions, at most ``limit``, least recently used
evicted first.

A session holds the random stream of a ``session_id``'s unseeded requests and its
step count (docs/protocol.md, "Sessions and seeds"). A client chooses the ids, so
without a bound every new id would cost the server memory (about 1 KiB each) until
the client resets or disconnects. At the bound, a new id evicts the session used
longest ago rather than refusing the observation: a robot that starts a session per
episode and never resets keeps running, and a session in use is never the one
evicted while an older one is kept. An evicted id that comes back starts a fresh
random stream, as after a reset.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from relay_ros.logsafe import shorten

__all__ = ["Session", "SessionTable"]

logger = logging.getLogger(__name__)


@dataclass
class Session:
    """Per-session state: the random stream of unseeded requests and a step count."""

    rng: np.random.Generator = field(default_factory=np.random.default_rng)
    steps: int = 0


class SessionTable:
    """The sessions of one connection, keyed by ``session_id`` (None: the default one).

    Args:
        limit: most sessions kept (>= 1).
        make: builds a new session (the server seeds its random stream).
        label: who the table belongs to, for log lines (peer and model).
        on_evict: called once per evicted session (the server's counter).
    """

    def __init__(
        self,
        limit: int,
        make: Callable[[], Session],
        label: str,
        on_evict: Callable[[], None] | None = None,
    ) -> None:
        self.limit = limit
        self.evicted = 0
        self._make = make
        self._label = label
        self._on_evict = on_evict
        self._sessions: OrderedDict[str | None, Session] = OrderedDict()

    def __len__(self) -> int:
        return len(self._sessions)

    def get(self, session_id: str | None) -> Session:
        """The session for ``session_id``, now the most recently used; a new one when
        unknown, evicting the least recently used past ``limit`` (logged at WARNING
        the first time on this connection, DEBUG afterwards)."""
        sessions = self._sessions
        session = sessions.get(session_id)
        if session is not None:
            sessions.move_to_end(session_id)
            return session
        session = sessions[session_id] = self._make()
        if len(sessions) > self.limit:
            old_id, old = sessions.popitem(last=False)
            self.evicted += 1
            if self._on_evict is not None:
                self._on_evict()
            first = self.evicted == 1
            logger.log(
                logging.WARNING if first else logging.DEBUG,
                "%s: more than %d sessions on this connection; evicted the least recently "
                "used one, %s (%d steps)%s",
                self._label,
                self.limit,
                "the default session" if old_id is None else shorten(repr(old_id), 80),
                old.steps,
                "; further evictions on this connection are logged at DEBUG" if first else "",
            )
        return session

    def clear(self) -> int:
        """Drop every session (a reset); returns how many there were."""
        count = len(self._sessions)
        self._sessions.clear()
        return count
