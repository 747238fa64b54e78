"""When ``PolicyConnection`` tries to connect again: a backoff with jitter, and a cheap
TCP probe that cuts the wait short when a server that was down is back.

A full attempt (TCP, TLS, the WebSocket upgrade, the metadata) against a server that
is down costs the server (or its proxy) a request each time, so attempts back off:
``initial_s``, times ``factor`` per failure, at most ``max_s``. But a robot waiting in
a 5 s backoff when its server restarts would stand still for up to 5 s after the
server is back. So while it waits, :class:`RetryWait` probes the server's port: one
TCP connect (a SYN; a closed port answers RST) every ``probe_s`` seconds, to the
addresses the name resolved to once for the wait. The first probe that connects
after a probe of the same wait found the port closed ends the wait, and the full
attempt follows at once.

What the probe never does is hammer a server that is up: when the port accepts
connections but the attempt failed anyway (a proxy whose backend is down, an HTTP
503, bad metadata), the probe has nothing to learn, so it stops for the rest of that
wait and the backoff alone decides. Each wait then costs at most one probe
connection. Against a closed port the probes are ``1 / probe_s`` SYNs a second.

Jitter: each wait is the backoff delay times a random factor in ``[1 - jitter, 1]``,
and each probe interval varies by the same, so robots that lost the same server at
the same instant do not retry in lockstep; a wait is never longer than ``max_s``.
"""

from __future__ import annotations

import errno
import random
import threading
import time
from typing import TypeGuard

from relay_ros.wire.deadline import Deadline
from relay_ros.wire.errors import OpenCancelled
from relay_ros.wire.tcp import Address, connect, refused_by, resolve

__all__ = ["DEFAULT_PROBE_S", "Backoff", "RetryWait", "WaitEnd", "port_closed"]

#: Seconds between TCP probes while waiting to reconnect.
DEFAULT_PROBE_S = 0.25
#: Relative jitter of waits and probe intervals.
DEFAULT_JITTER = 0.2
# Errors of a TCP connect that mean nothing listens there (or cannot be reached).
_CLOSED_ERRNOS = frozenset({errno.ECONNREFUSED, errno.EHOSTUNREACH, errno.ENETUNREACH})


def port_closed(exc: BaseException | None) -> TypeGuard[OSError]:
    """True when ``exc`` (from an open) says the server's port does not accept
    connections: refused, or host or network unreachable."""
    return isinstance(exc, OSError) and exc.errno in _CLOSED_ERRNOS


class Backoff:
    """Retry delays: ``initial_s``, times ``factor`` after each failure, at most
    ``max_s``; each one jittered down by up to ``jitter`` (a fraction; None:
    :data:`DEFAULT_JITTER`, read when the backoff is made).

    Raises:
        ValueError: a delay is not positive, ``factor`` < 1 or ``jitter`` not in [0, 1).
    """

    def __init__(
        self,
        initial_s: float,
        max_s: float,
        factor: float,
        *,
        jitter: float | None = None,
        rng: random.Random | None = None,
    ) -> None:
        jitter = DEFAULT_JITTER if jitter is None else jitter
        for name, value in (("reconnect_initial_s", initial_s), ("reconnect_max_s", max_s)):
            if not value > 0:
                raise ValueError(f"{name}={value!r} must be a positive number of seconds")
        if not factor >= 1:
            raise ValueError(f"reconnect_factor={factor!r} must be >= 1")
        if not 0 <= jitter < 1:
            raise ValueError(f"jitter={jitter!r} must be in [0, 1)")
        self.initial_s = initial_s
        self.max_s = max_s
        self.factor = factor
        self.jitter = jitter
        self._rng = rng or random.Random()
        self._delay = initial_s

    def next(self) -> float:
        """The wait before the next attempt (s); the one after it grows."""
        delay = min(self._delay, self.max_s)
        self._delay = min(self._delay * self.factor, self.max_s)
        return delay * (1.0 - self.jitter * self._rng.random())

    def reset(self) -> None:
        """A connection opened: the next failure waits ``initial_s`` again."""
        self._delay = self.initial_s


class WaitEnd:
    """Why :meth:`RetryWait.wait` returned."""

    STOPPED = "stopped"  # the stop event was set
    ELAPSED = "elapsed"  # the whole delay passed
    REACHABLE = "reachable"  # the port accepts connections again: retry now


class RetryWait:
    """Waits out a backoff delay while probing ``host:port`` (see the module docstring).

    Args:
        host, port: the server's address (from its URL).
        stop: when set, the wait ends at once (within 50 ms, also inside a probe).
        probe_s: seconds between probes; None: no probes (plain backoff).
        jitter: relative jitter of the probe interval (None: :data:`DEFAULT_JITTER`).
        rng: random source of the jitter.

    Attributes:
        probes: TCP probes sent so far (for benchmarks and diagnostics).
        shortcuts: waits a probe ended early (the port accepted connections again).
    """

    def __init__(
        self,
        host: str,
        port: int,
        stop: threading.Event,
        *,
        probe_s: float | None = DEFAULT_PROBE_S,
        jitter: float | None = None,
        rng: random.Random | None = None,
    ) -> None:
        jitter = DEFAULT_JITTER if jitter is None else jitter
        if probe_s is not None and not probe_s > 0:
            raise ValueError(
                f"reconnect_probe_s={probe_s!r} must be a positive number of seconds or None"
            )
        self.host = host
        self.port = port
        self.probes = 0
        self.shortcuts = 0
        self._stop = stop
        self._probe_s = probe_s
        self._jitter = jitter
        self._rng = rng or random.Random()
        self._what = f"{host}:{port}"

    @property
    def probing(self) -> bool:
        """True when waits probe the port (``probe_s`` is not None)."""
        return self._probe_s is not None

    def wait(self, delay_s: float, *, failure: BaseException | None = None) -> str:
        """Wait up to ``delay_s`` seconds (the backoff delay); a :class:`WaitEnd` value.

        ``failure``: why the attempt before this wait failed. When this very
        ``host:port`` refused it, the port counts as seen closed, so a server that
        comes up before the wait's first probe ends the wait too (on a loaded machine
        a restart can fall between the two). A refusal elsewhere (a direct route to
        another port or host) does not count: this port may be open all along, and
        ending every wait at its first probe would retry at the probe rate.
        """
        closed = port_closed(failure) and refused_by(failure) == (self.host, self.port)
        end = time.monotonic() + delay_s
        if self._probe_s is None:
            return WaitEnd.STOPPED if self._stop.wait(delay_s) else WaitEnd.ELAPSED
        addresses = self._resolve(end)
        if addresses is None:  # stopped, or the name does not resolve: no probes
            return self._sleep_until(end)
        while True:
            started = time.monotonic()
            if started >= end:
                return WaitEnd.ELAPSED
            interval = self._probe_s * (1.0 - self._jitter * self._rng.random())
            state = self._probe(addresses, Deadline(min(interval, end - started)))
            if state is None:
                return WaitEnd.STOPPED
            if state == "closed":
                closed = True
            elif state == "open":
                if closed:
                    self.shortcuts += 1
                    return WaitEnd.REACHABLE
                # The port accepts connections and the attempt failed anyway: a probe
                # has nothing more to tell this wait; the backoff decides alone.
                return self._sleep_until(end)
            # "unknown" (no answer within the interval): probe again.
            if self._stop.wait(max(0.0, min(started + interval, end) - time.monotonic())):
                return WaitEnd.STOPPED

    def _resolve(self, end: float) -> list[Address] | None:
        try:
            return resolve(
                self.host, self.port, Deadline(end - time.monotonic()), self._stop, self._what
            )
        except (OpenCancelled, OSError):
            return None

    def _probe(self, addresses: list[Address], deadline: Deadline) -> str | None:
        """One TCP connect: ``"open"`` (it connected), ``"closed"`` (refused or
        unreachable), ``"unknown"`` (no answer in time, or another error), None when
        stopped. A probe without an answer never counts as closed: a slow link must
        not turn its late answers into reconnect shortcuts."""
        self.probes += 1
        try:
            sock = connect(addresses, self.host, self.port, deadline, self._stop, self._what)
        except OpenCancelled:
            return None
        except OSError as exc:
            return "closed" if port_closed(exc) else "unknown"
        sock.close()
        return "open"

    def _sleep_until(self, end: float) -> str:
        if self._stop.wait(max(0.0, end - time.monotonic())):
            return WaitEnd.STOPPED
        return WaitEnd.ELAPSED
