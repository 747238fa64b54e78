"""Run a reference policy server in a background thread, for tests, the demo and benchmarks.

:func:`run_server_in_thread` starts a :class:`~relay_ros.server.policy_server.PolicyServer`
on its own event loop in a daemon thread and yields a :class:`ServerHandle` (its
port, URLs and live counters) once the socket listens.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Iterator

from relay_ros.server.options import ServerOptions, ServerStartError
from relay_ros.server.policy_server import PolicyServer
from relay_ros.server.stats import ServerStats

__all__ = ["ServerHandle", "run_server_in_thread"]

logger = logging.getLogger(__name__)


class ServerHandle:
    """A server running in a background thread (from :func:`run_server_in_thread`)."""

    def __init__(
        self, server: PolicyServer, thread: threading.Thread, failure: list[BaseException]
    ):
        self.server = server
        self._thread = thread
        self._failure = failure
        assert server.port is not None
        self.port: int = server.port
        host = server.options.host
        self.host: str = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)

    def url(self, model: str = "pi05") -> str:
        """``ws://HOST:PORT/{model}`` of this server (wildcard hosts become loopback)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"ws://{host}:{self.port}/{model}"

    @property
    def url_template(self) -> str:
        """A ``WALLE_URL`` value for this server: ``ws://HOST:PORT/{model}``."""
        return self.url("{model}")

    @property
    def stats(self) -> ServerStats:
        """Live counters."""
        return self.server.stats

    def wait_closed_connections(self, count: int, timeout: float = 5.0) -> bool:
        """Block until at least ``count`` connections have closed, or ``timeout`` (s)."""
        return self.server.stats.wait_for(lambda s: s.connections_closed >= count, timeout)

    def stop(self, timeout: float = 10.0) -> None:
        """Close every connection and stop the server; idempotent.

        Raises:
            ServerStartError: the policy factory had failed while loading.
        """
        self.server.request_stop()
        self._thread.join(timeout)
        if self._failure:
            failure = self._failure.pop()
            raise failure


@contextlib.contextmanager
def run_server_in_thread(options: ServerOptions | None = None) -> Iterator[ServerHandle]:
    """Run a :class:`PolicyServer` on its own event loop in a daemon thread.

    Yields once the socket listens (metadata may still wait for ``load_delay_s``);
    stops the server on exit.

    Raises:
        ServerStartError: bad options or the port cannot be bound.
    """
    server = PolicyServer(options or ServerOptions())
    bound = threading.Event()
    failure: list[BaseException] = []

    def run() -> None:
        try:
            asyncio.run(server.serve_forever(on_bound=lambda _port: bound.set()))
        except BaseException as exc:  # reported to the caller thread
            failure.append(exc)
            if not bound.is_set():
                logger.error("policy server failed to start", exc_info=True)
        finally:
            bound.set()

    thread = threading.Thread(target=run, name="relay-policy-server", daemon=True)
    thread.start()
    bound.wait()
    if server.port is None:
        thread.join()
        exc = failure.pop() if failure else None
        raise ServerStartError(f"policy server did not start: {exc}") from exc
    handle = ServerHandle(server, thread, failure)
    try:
        yield handle
    finally:
        handle.stop()
