"""The network link emulator in a thread and on the command line.

:class:`LinkThread` runs a :class:`~relay_ros.sim.link_proxy.LinkProxy` (bandwidth,
delay with jitter, stalls between a policy client and its server) on its own event
loop in a daemon thread, for tests, benchmarks and the demo. Everything is bounded in
time: the proxy stops by itself after ``lifetime_s`` (default 600 s) unless stopped
before. From the command line::

    python -m relay_ros.sim.link --preset wan --listen 127.0.0.1:0 --target 127.0.0.1:8000
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import math
import sys
import threading
import time
from collections.abc import Sequence
from types import TracebackType
from urllib.parse import urlsplit, urlunsplit

from relay_ros.sim.link_profiles import PRESETS, LinkProfile, LinkProfileError, get_profile
from relay_ros.sim.link_proxy import LinkError, LinkProxy, LinkStats

__all__ = ["DEFAULT_LIFETIME_S", "LinkThread", "build_parser", "main", "parse_host_port"]

logger = logging.getLogger(__name__)

#: How long a proxy runs unless told otherwise, seconds.
DEFAULT_LIFETIME_S = 600.0


def _rewrite_netloc(url: str, host: str, port: int) -> str:
    parts = urlsplit(url)
    if not parts.scheme or not parts.netloc:
        raise LinkError(f"url {url!r} has no scheme://host:port part")
    return urlunsplit(parts._replace(netloc=f"{host}:{port}"))


class LinkThread:
    """A :class:`LinkProxy` on its own event loop in a daemon thread.

    ``start()`` returns once the proxy listens; ``stop()`` (or leaving the ``with``
    block) closes it; after ``lifetime_s`` it closes by itself.

    Args:
        profile: A :class:`LinkProfile` or a preset name (``"lan"``, ``"wan"``, ``"lte"``).
        target: (host, port) of the real server.
        listen: (host, port) to listen on (port 0: a free port).
        lifetime_s: Seconds after which the proxy stops by itself (> 0).
        seed: Seed of the jitter (None: from the OS).

    Example::

        with LinkThread("wan", ("127.0.0.1", server_port)) as link:
            client = PolicyClient("pi05", url=link.proxied_url(server_url))
    """

    def __init__(
        self,
        profile: LinkProfile | str,
        target: tuple[str, int],
        *,
        listen: tuple[str, int] = ("127.0.0.1", 0),
        lifetime_s: float = DEFAULT_LIFETIME_S,
        seed: int | None = None,
    ) -> None:
        if isinstance(profile, str):
            profile = get_profile(profile)
        if not (isinstance(lifetime_s, (int, float)) and math.isfinite(lifetime_s)):
            raise LinkError(f"lifetime_s is {lifetime_s!r}; expected a positive number")
        if lifetime_s <= 0:
            raise LinkError(f"lifetime_s is {lifetime_s!r}; expected a positive number")
        self.proxy = LinkProxy(profile, target, listen=listen, seed=seed)
        self.lifetime_s = float(lifetime_s)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread: threading.Thread | None = None
        self._started = threading.Event()
        self._failure: BaseException | None = None

    @property
    def profile(self) -> LinkProfile:
        return self.proxy.profile

    @property
    def port(self) -> int:
        """The port the proxy listens on (after ``start()``)."""
        if self.proxy.port is None:
            raise LinkError("the link is not started; call start() first")
        return self.proxy.port

    @property
    def host(self) -> str:
        return self.proxy.listen[0]

    def proxied_url(self, url: str) -> str:
        """``url`` with its host:port replaced by the proxy's: the same server, via the link."""
        return _rewrite_netloc(url, self.host, self.port)

    def stats(self) -> LinkStats:
        return self.proxy.stats()

    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self, timeout_s: float = 10.0) -> LinkThread:
        """Start the thread and wait until the proxy listens.

        Raises:
            LinkError: already started, cannot bind, or not listening within ``timeout_s``.
        """
        if self._thread is not None:
            raise LinkError("the link was already started")
        self._thread = threading.Thread(target=self._run, name="relay-link", daemon=True)
        self._thread.start()
        if not self._started.wait(timeout_s):
            raise LinkError(f"the link did not start within {timeout_s:g} s")
        if self._failure is not None:
            raise LinkError(f"the link did not start: {self._failure}") from self._failure
        return self

    def _run(self) -> None:
        async def main() -> None:
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()
            try:
                await self.proxy.start()
            except BaseException as exc:
                self._failure = exc
                self._started.set()
                return
            self._started.set()
            try:
                await asyncio.wait_for(self._stop.wait(), self.lifetime_s)
            except asyncio.TimeoutError:
                logger.info("link stops after its lifetime of %g s", self.lifetime_s)
            finally:
                await self.proxy.close()

        try:
            asyncio.run(main())
        except BaseException as exc:  # reported by start() or logged
            if not self._started.is_set():
                self._failure = exc
            else:
                logger.error("link thread failed", exc_info=True)
        finally:
            self._started.set()

    def stop(self, timeout_s: float = 5.0) -> None:
        """Close the proxy and join its thread (idempotent)."""
        thread = self._thread
        if thread is None:
            return
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None and thread.is_alive():
            with contextlib.suppress(RuntimeError):  # the loop may have just finished
                loop.call_soon_threadsafe(stop.set)
        thread.join(timeout_s)
        if thread.is_alive():
            logger.warning("link thread did not stop within %g s", timeout_s)

    def __enter__(self) -> LinkThread:
        if self._thread is None:
            self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def parse_host_port(text: str) -> tuple[str, int]:
    """``"127.0.0.1:8000"`` -> ``("127.0.0.1", 8000)``; port 0 is allowed.

    Raises:
        ValueError: no ``host:port`` form, or a port outside 0..65535.
    """
    host, sep, port_text = text.rpartition(":")
    if not sep or not host:
        raise ValueError(f"{text!r} is not host:port")
    try:
        port = int(port_text)
    except ValueError:
        raise ValueError(f"{text!r}: port {port_text!r} is not an integer") from None
    if not 0 <= port <= 65535:
        raise ValueError(f"{text!r}: port {port} is outside 0..65535")
    return host.strip("[]"), port


def build_parser() -> argparse.ArgumentParser:
    """The ``python -m relay_ros.sim.link`` argument parser."""

    def host_port(text: str) -> tuple[str, int]:
        try:
            return parse_host_port(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    p = argparse.ArgumentParser(
        prog="python -m relay_ros.sim.link",
        description="Emulate a network link between a policy client and server: a TCP "
        "proxy with bandwidth, delay, jitter and stalls.",
    )
    p.add_argument("--preset", choices=sorted(PRESETS), default="wan", help="(default %(default)s)")
    p.add_argument("--listen", type=host_port, default=("127.0.0.1", 0), help="host:port")
    p.add_argument("--target", type=host_port, required=True, help="host:port of the server")
    p.add_argument("--up-mbit", type=float, help="override the uplink bandwidth, Mbit/s")
    p.add_argument("--down-mbit", type=float, help="override the downlink bandwidth, Mbit/s")
    p.add_argument("--delay-ms", type=float, help="override the one-way delay, ms")
    p.add_argument("--jitter-ms", type=float, help="override the one-way jitter, ms")
    p.add_argument("--stall-every-s", type=float, help="start a stall every S seconds")
    p.add_argument("--stall-ms", type=float, help="length of each stall, ms")
    p.add_argument(
        "--duration",
        type=float,
        default=3600.0,
        help="stop after this many seconds (default %(default)g)",
    )
    p.add_argument("--seed", type=int, help="seed of the jitter")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run the proxy until Ctrl-C or ``--duration``; exit 0, 2 on bad arguments, 1 on failure."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        profile = get_profile(args.preset).with_overrides(
            up_mbit_s=args.up_mbit,
            down_mbit_s=args.down_mbit,
            delay_ms=args.delay_ms,
            jitter_ms=args.jitter_ms,
            stall_every_s=args.stall_every_s,
            stall_ms=args.stall_ms,
        )
        link = LinkThread(
            profile, args.target, listen=args.listen, lifetime_s=args.duration, seed=args.seed
        )
    except (LinkProfileError, LinkError) as exc:
        sys.stderr.write(f"error: {exc}\n")
        return 2
    try:
        link.start()
    except LinkError as exc:
        sys.stderr.write(f"error: {exc}\n")
        return 1
    sys.stdout.write(f"listening on {link.host}:{link.port} ({profile.describe()})\n")
    sys.stdout.flush()
    try:
        while link.running():
            time.sleep(0.2)
    except KeyboardInterrupt:
        pass
    finally:
        link.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
