"""SIGINT and SIGTERM in relay_ros programs: the first one stops, later ones never interrupt.

Real signals sent to this process; every test gives the handlers back as it found them.
"""

from __future__ import annotations

import importlib.metadata
import os
import signal
import subprocess
import sys
import threading
import time

import pytest
from helpers import wait_until

from relay_ros.stop_signals import (
    StopSignals,
    deferred_interrupts,
    interrupt_once,
    stop_signals,
)


def _to_main_thread(sig: signal.Signals) -> None:
    """Deliver ``sig`` to this (the main) thread, so that a blocking call returns EINTR."""
    signal.pthread_kill(threading.main_thread().ident, sig)


@pytest.fixture
def handlers():
    """Put SIGINT and SIGTERM back as they were after the test."""
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield saved
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


def test_the_first_signal_requests_the_stop_and_later_ones_are_counted(handlers) -> None:
    ran_on: list[str] = []
    with stop_signals() as stop:
        assert stop.active and not stop.requested
        stop.on_stop(lambda: ran_on.append(threading.current_thread().name))
        os.kill(os.getpid(), signal.SIGINT)
        assert stop.wait(10)
        # A terminal's Ctrl-C again, then launch's SIGTERM: nothing raised here.
        os.kill(os.getpid(), signal.SIGINT)
        _to_main_thread(signal.SIGTERM)
        time.sleep(0)  # a pending Python handler runs here; it must not raise
        wait_until(lambda: len(stop.ignored) == 2)
        late: list[str] = []
        stop.on_stop(lambda: late.append("now"))  # already stopped: runs at once
        assert late == ["now"]
    assert stop.signal is signal.SIGINT
    assert stop.ignored == (signal.SIGINT, signal.SIGTERM)
    assert ran_on == ["relay-stop-signals"]
    assert stop.describe() == "SIGINT (2 more signals ignored while stopping)"
    # The block gave the signals back.
    assert {sig: signal.getsignal(sig) for sig in handlers} == handlers
    assert signal.set_wakeup_fd(-1) == -1


def test_a_removed_stop_callback_is_not_run(handlers) -> None:
    calls: list[str] = []
    with stop_signals() as stop:
        forget = stop.on_stop(lambda: calls.append("removed"))
        stop.on_stop(lambda: calls.append("kept"))
        forget()
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.wait(10)
        wait_until(lambda: calls)
    assert calls == ["kept"]


def test_outside_the_main_thread_nothing_is_taken(handlers) -> None:
    found: list[StopSignals] = []
    thread = threading.Thread(target=lambda: found.append(StopSignals().start()))
    thread.start()
    thread.join()
    assert not found[0].active
    assert {sig: signal.getsignal(sig) for sig in handlers} == handlers


def test_interrupt_once_raises_for_the_first_signal_only(handlers) -> None:
    with interrupt_once():
        with pytest.raises(KeyboardInterrupt, match="SIGTERM"):
            _to_main_thread(signal.SIGTERM)
            time.sleep(10)  # cut short by the signal
        # The cleanup after it: neither a second Ctrl-C nor a SIGTERM interrupts it.
        _to_main_thread(signal.SIGINT)
        _to_main_thread(signal.SIGTERM)
        cleaned = sum(range(10_000))
    assert cleaned == 49_995_000
    # On its way out: both stay ignored (Python's exit would reset them to default).
    assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_IGN


def test_interrupt_once_without_a_signal_gives_the_handlers_back(handlers) -> None:
    with interrupt_once():
        assert signal.getsignal(signal.SIGINT) not in handlers.values()
    assert {sig: signal.getsignal(sig) for sig in handlers} == handlers


def test_a_deferred_cleanup_runs_to_its_end_and_the_signal_comes_after(handlers) -> None:
    steps: list[str] = []
    with interrupt_once():
        with pytest.raises(KeyboardInterrupt, match="SIGINT"):
            with deferred_interrupts():
                _to_main_thread(signal.SIGINT)
                steps.append("stopped threads")
                _to_main_thread(signal.SIGINT)  # a second one is held as well
                steps.append("destroyed nodes")
            steps.append("never")
    assert steps == ["stopped threads", "destroyed nodes"]


def test_a_program_keeps_ignoring_the_signals_while_it_exits() -> None:
    # take_stop_signals is for the rest of the process: at exit both are ignored, so
    # that Python's finalization (which resets handled signals to the default action)
    # cannot be killed by a late Ctrl-C.
    code = (
        "import atexit, signal\n"
        "atexit.register(lambda: print(signal.getsignal(signal.SIGINT) == signal.SIG_IGN,"
        " signal.getsignal(signal.SIGTERM) == signal.SIG_IGN))  # runs last\n"
        "from relay_ros.stop_signals import take_stop_signals\n"
        "stop = take_stop_signals(pending=[int(signal.SIGTERM)])  # held before: counts\n"
        "assert take_stop_signals() is stop and stop.active\n"
        "assert stop.requested and stop.signal is signal.SIGTERM\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "True"]


def test_the_console_scripts_take_the_signals_before_the_heavy_imports() -> None:
    # A Ctrl-C during the import of rclpy, NumPy or OpenCV must find the signals taken.
    code = (
        "import sys\n"
        "import relay_ros.entry_points\n"
        "heavy = sorted(m for m in ('rclpy', 'numpy', 'cv2', 'yaml', 'websockets')"
        " if m in sys.modules)\n"
        "print(heavy)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_every_long_running_console_script_starts_in_entry_points() -> None:
    scripts = {
        ep.name: ep.value
        for ep in importlib.metadata.entry_points(group="console_scripts")
        if ep.dist is not None and ep.dist.name == "relay_ros"
    }
    assert scripts, "relay_ros is not installed (make setup)"
    # relay-ros is a command line (interrupt_once in its main); the rest run until stopped.
    assert {
        name for name, value in scripts.items() if not value.startswith("relay_ros.entry_points:")
    } == {"relay-ros"}
