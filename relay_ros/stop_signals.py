"""How relay_ros programs stop on SIGINT and SIGTERM: once, and never in the middle of cleanup.

Ctrl-C in a terminal sends SIGINT to every process of the foreground group; ``ros2
launch`` without a terminal on stdin (``--noninteractive``, the default then) sends each
process SIGINT as well, and SIGTERM 5 s later if it still runs. Python's default turns
every SIGINT into a ``KeyboardInterrupt`` wherever the main thread happens to be, so the
second one lands inside the cleanup the first one started (a traceback in
``destroy_node``, exit code -2), and rclpy's own handler shuts the context down from
another thread while the main thread may be using it (``RCLError ... wait set``).

Two ways out, one per kind of program:

- :class:`StopSignals` (:func:`stop_signals`, :func:`take_stop_signals`) for programs
  that run an event loop (the nodes, the reference server): Python's handlers for
  SIGINT and SIGTERM do nothing, and one thread reads the signal numbers from the
  wakeup fd. The first one marks the stop as requested and runs the stop callbacks
  (which wake the loop); later ones are counted and otherwise ignored. Nothing is ever
  interrupted: the main thread stops when its loop sees the request and then cleans up
  at its own pace (``ros2 launch`` still ends it with SIGKILL 10 s after its first
  signal if cleanup hangs).
- :func:`interrupt_once` for sequential command lines (the demo, ``relay-ros replay``):
  the first SIGINT or SIGTERM raises ``KeyboardInterrupt`` in the main thread as usual,
  so every wait is cut short; later ones are ignored, so the cleanup it starts runs to
  its end. A cleanup that must not be cut even by the first one runs under
  :func:`deferred_interrupts`, which holds the signal until the cleanup is done.

POSIX only, as ROS 2 Jazzy here. Before a program's first line runs (the interpreter's
own start-up, a few tens of ms) a signal still gets Python's default behaviour;
docs/reliability.md gives the figures.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import threading
from collections.abc import Callable, Iterable, Iterator
from signal import Signals
from typing import Any

__all__ = [
    "STOP_SIGNALS",
    "StopSignals",
    "deferred_interrupts",
    "interrupt_once",
    "stop_signals",
    "take_stop_signals",
]

#: The signals that stop a relay_ros program: Ctrl-C and a polite kill (launch, systemd).
STOP_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGINT, signal.SIGTERM)


class StopSignals:
    """SIGINT and SIGTERM turned into a stop request, taken by one thread.

    Python's handler for both is replaced by one that does nothing in the main thread
    (so nothing there is ever interrupted); the signal numbers reach a reader thread
    through ``signal.set_wakeup_fd``, which works whichever thread the kernel picked
    (native threads of NumPy or DDS included) and leaves child processes with the
    default behaviour. Create it with :func:`take_stop_signals` (for the rest of the
    process) or :func:`stop_signals` (for a ``with`` block), in the main thread.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._requested = threading.Event()
        self._first: signal.Signals | None = None
        self._ignored: list[signal.Signals] = []
        self._callbacks: dict[int, Callable[[], None]] = {}
        self._next_id = 0
        self._thread: threading.Thread | None = None
        self._pipe: tuple[int, int] | None = None
        self._previous_handlers: dict[signal.Signals, Any] = {}
        self._previous_wakeup_fd = -1
        self._closing = False

    # ------------------------------------------------------------------ state
    @property
    def requested(self) -> bool:
        """True once a stop signal arrived."""
        return self._requested.is_set()

    @property
    def signal(self) -> signal.Signals | None:
        """The first stop signal, or None."""
        return self._first

    @property
    def ignored(self) -> tuple[Signals, ...]:  # here `signal` is the property
        """The stop signals that arrived after the first one (ignored)."""
        with self._lock:
            return tuple(self._ignored)

    @property
    def active(self) -> bool:
        """True while a thread takes the signals (False when not started in the main thread)."""
        return self._thread is not None and not self._closing

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until a stop is requested or ``timeout`` seconds pass; True if requested."""
        return self._requested.wait(timeout)

    def describe(self) -> str:
        """What stopped the program, e.g. ``"SIGINT (1 more signal ignored while stopping)"``."""
        if self._first is None:
            return "no stop signal"
        ignored = self.ignored
        if not ignored:
            return self._first.name
        more = "signal" if len(ignored) == 1 else "signals"
        return f"{self._first.name} ({len(ignored)} more {more} ignored while stopping)"

    def on_stop(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Run ``callback`` (thread-safe, short) when the stop is requested.

        It runs on the signal thread, or at once here if the stop was already
        requested. Returns a function that removes it (call it before whatever the
        callback touches is gone).
        """
        with self._lock:
            if self._first is None:
                key = self._next_id
                self._next_id += 1
                self._callbacks[key] = callback

                def remove() -> None:
                    with self._lock:
                        self._callbacks.pop(key, None)

                return remove
        _run_callback(callback)
        return lambda: None

    # ------------------------------------------------------------------ lifetime
    def start(self) -> StopSignals:
        """Take SIGINT and SIGTERM from now on.

        Outside the main thread this does nothing (the stop is then never requested
        by a signal), so library code and tests can call it anywhere.
        """
        if self._thread is not None or threading.current_thread() is not threading.main_thread():
            return self
        read_fd, write_fd = os.pipe()
        os.set_blocking(write_fd, False)  # set_wakeup_fd's requirement
        self._pipe = (read_fd, write_fd)
        self._thread = threading.Thread(
            target=self._take, args=(read_fd,), name="relay-stop-signals", daemon=True
        )
        self._thread.start()
        # The fd first: a signal between the two calls is then still written to it.
        self._previous_wakeup_fd = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
        for sig in STOP_SIGNALS:
            self._previous_handlers[sig] = signal.signal(sig, _take_later)
        return self

    def close(self) -> None:
        """Give the signals back (previous handlers and wakeup fd) and end the thread.

        For a ``with`` block inside a longer-lived process (tests); a program that
        ends anyway keeps taking them until it exits (:func:`take_stop_signals`), so
        a late Ctrl-C never meets Python's default handler during exit.
        """
        if self._thread is None or self._closing or self._pipe is None:
            return
        self._closing = True
        signal.set_wakeup_fd(self._previous_wakeup_fd)
        for sig, handler in self._previous_handlers.items():
            signal.signal(sig, handler)
        read_fd, write_fd = self._pipe
        os.close(write_fd)  # the reader sees the end of the pipe
        self._thread.join()
        os.close(read_fd)

    def _take(self, read_fd: int) -> None:
        while True:
            try:
                data = os.read(read_fd, 64)
            except InterruptedError:
                continue
            if not data:
                return
            for signum in data:
                if signum in _STOP_NUMBERS:
                    self._received(signal.Signals(signum))

    def _received(self, sig: Signals) -> None:
        with self._lock:
            if self._first is not None:
                self._ignored.append(sig)
                return
            self._first = sig
            callbacks = list(self._callbacks.values())
            self._callbacks.clear()
        self._requested.set()
        for callback in callbacks:
            _run_callback(callback)


_STOP_NUMBERS = frozenset(int(sig) for sig in STOP_SIGNALS)


def _take_later(signum: int, frame: object) -> None:
    """Python's handler in the main thread: nothing (the reader thread has the number)."""


def _run_callback(callback: Callable[[], None]) -> None:
    try:
        callback()
    except Exception:  # a stop callback must not end the signal thread
        import logging  # only then: the module stays cheap to import at start-up

        logging.getLogger(__name__).exception("stop callback %r failed", callback)


_process_signals: StopSignals | None = None


def _ignore_stop_signals() -> None:
    """At exit: ignore SIGINT and SIGTERM (Python's finalization resets a handled signal
    to the default action, and a late Ctrl-C would then kill the process, exit -2)."""
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)


def take_stop_signals(pending: Iterable[int] = ()) -> StopSignals:
    """Take SIGINT and SIGTERM for the rest of the process; call it first thing in ``main``.

    ``pending``: signals that arrived before (held by the caller's own handler); they
    count as if they arrived now. Idempotent: later calls (and :func:`stop_signals`)
    return the same object. When the program ends the signals are ignored until the
    process is gone.
    """
    global _process_signals
    if _process_signals is None:
        _process_signals = StopSignals().start()
        if _process_signals.active:
            atexit.register(_ignore_stop_signals)
    for signum in list(pending):
        if signum in _STOP_NUMBERS:
            _process_signals._received(signal.Signals(signum))
    return _process_signals


@contextlib.contextmanager
def stop_signals() -> Iterator[StopSignals]:
    """The process's :class:`StopSignals` for a ``with`` block.

    Inside a program that called :func:`take_stop_signals` this is that object and
    nothing changes at the end; otherwise (a test calling ``main()``) the signals are
    taken for the block only and given back when it ends.
    """
    if _process_signals is not None:
        yield _process_signals
        return
    signals = StopSignals().start()
    try:
        yield signals
    finally:
        signals.close()


@contextlib.contextmanager
def interrupt_once() -> Iterator[None]:
    """The first SIGINT or SIGTERM raises ``KeyboardInterrupt``; later ones are ignored.

    For command lines that run step by step (waits, subprocesses, threads) and stop
    with a ``KeyboardInterrupt`` handler and ``finally`` blocks. When the block ends
    without a signal the previous handlers come back; after one both signals stay
    ignored, because the program is on its way out and a late Ctrl-C must not
    interrupt (or, during Python's finalization, kill) it. Outside the main thread
    this does nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    fired: list[int] = []

    def handler(signum: int, frame: object) -> None:
        fired.append(signum)
        if len(fired) == 1:
            raise KeyboardInterrupt(signal.Signals(signum).name)

    previous = {sig: signal.signal(sig, handler) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, signal.SIG_IGN if fired else old)


@contextlib.contextmanager
def deferred_interrupts() -> Iterator[None]:
    """Hold SIGINT and SIGTERM until the block ends, then deliver the first one.

    For a cleanup that a ``KeyboardInterrupt`` must not cut in half (stopping threads,
    destroying nodes): a signal that arrives meanwhile is not lost, it goes to the
    handler that was in place (``interrupt_once``'s, Python's ``KeyboardInterrupt``,
    or the default action) once the block is done. Outside the main thread this does
    nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []

    def hold(signum: int, frame: object) -> None:
        held.append(signum)

    previous = {sig: signal.signal(sig, hold) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
        if held:
            _deliver(held[0], previous[signal.Signals(held[0])])


def _deliver(signum: int, handler: object) -> None:
    """Run ``handler`` for ``signum`` as the signal would have (raise, ignore or terminate)."""
    if callable(handler):
        handler(signum, None)
    elif handler == signal.SIG_DFL:
        signal.raise_signal(signum)
