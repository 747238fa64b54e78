"""PolicyConnection: background connect, one request in flight, reconnect, clean close."""

from __future__ import annotations

import contextlib
import os
import queue
import threading
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from helpers import free_port, pi_observation, scaled, wait_until
from websockets.exceptions import InvalidURI

from relay_ros.models import UnknownModelError
from relay_ros.server import ServerHandle, ServerOptions, run_server_in_thread
from relay_ros.wire.connection import InferOutcome, PolicyConnection

# No WALLE_* from the shell or a .env above the checkout (test/conftest.py).
pytestmark = pytest.mark.usefixtures("isolated_env")


@contextlib.contextmanager
def serving(**options: Any) -> Iterator[ServerHandle]:
    with run_server_in_thread(ServerOptions(models=("pi05",), **options)) as handle:
        yield handle


class Recorder:
    """Collects every callback, thread-safely, with the thread it ran on."""

    def __init__(self) -> None:
        self.results: queue.Queue[InferOutcome] = queue.Queue()
        self.connects: list[dict[str, Any]] = []
        self.disconnects: list[str] = []
        self.threads: set[str] = set()

    def on_result(self, outcome: InferOutcome) -> None:
        self.threads.add(threading.current_thread().name)
        self.results.put(outcome)

    def on_connect(self, metadata: dict[str, Any]) -> None:
        self.threads.add(threading.current_thread().name)
        self.connects.append(metadata)

    def on_disconnect(self, reason: str) -> None:
        self.disconnects.append(reason)

    def result(self, timeout: float = 10.0) -> InferOutcome:
        return self.results.get(timeout=timeout)


def connection(url: str, recorder: Recorder, **options: Any) -> PolicyConnection:
    return PolicyConnection(
        "pi05",
        url=url,
        on_result=recorder.on_result,
        on_connect=recorder.on_connect,
        on_disconnect=recorder.on_disconnect,
        **options,
    )


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_infer_through_the_worker() -> None:
    recorder = Recorder()
    with serving() as handle:
        conn = connection(handle.url_template, recorder)
        try:
            assert wait_until(lambda: conn.connected)
            assert conn.metadata is not None
            assert conn.metadata["model"] == "pi05"
            assert recorder.connects == [handle.server.metadata("pi05")]
            assert conn.last_error is None
            assert conn.submit(pi_observation(), tag=("step", 1))
            outcome = recorder.result()
            assert outcome.tag == ("step", 1)
            assert isinstance(outcome.reply, np.ndarray)
            assert outcome.reply.shape == (50, 32)
            assert outcome.connection_error is None
            assert isinstance(outcome.roundtrip_s, float)
            assert isinstance(outcome.sent_at, float)
            assert isinstance(outcome.server_timing, dict)
            assert "infer_ms" in outcome.server_timing
            # Callbacks run on the worker thread, not the caller's.
            assert recorder.threads == {"relay-policy-pi05"}
        finally:
            conn.close()


def test_error_reply_is_an_outcome_and_the_connection_stays() -> None:
    recorder = Recorder()
    with serving() as handle:
        with connection(handle.url_template, recorder) as conn:
            assert wait_until(lambda: conn.connected)
            assert conn.submit(pi_observation(state=np.zeros(3, np.float32)), tag="bad")
            outcome = recorder.result()
            assert outcome.reply == {"type": "error", "message": "Internal inference error"}
            assert outcome.connection_error is None
            assert conn.submit(
                pi_observation(state=np.array([1j], np.complex64)), tag="unencodable"
            )
            outcome = recorder.result()
            assert outcome.reply is not None
            assert outcome.reply["type"] == "error"
            assert str(outcome.reply["message"]).startswith("observation cannot be encoded: ")
            assert conn.submit(pi_observation(), tag="good")
            assert isinstance(recorder.result().reply, np.ndarray)
            assert handle.stats.connections_opened == 1


def test_at_most_one_request_in_flight() -> None:
    recorder = Recorder()
    with serving(latency_ms=300.0) as handle:
        with connection(handle.url_template, recorder) as conn:
            assert wait_until(lambda: conn.connected)
            assert conn.submit(pi_observation(), tag=1)
            assert conn.busy
            assert not conn.submit(pi_observation(), tag=2)
            assert recorder.result().tag == 1
            assert wait_until(lambda: not conn.busy)
            assert conn.submit(pi_observation(), tag=3)
            assert recorder.result().tag == 3
            assert recorder.results.empty()


def test_submit_with_a_handoff_returns_once_the_observation_is_written() -> None:
    # The node's executor thread waits for the worker to write the observation
    # instead of running on with the GIL; it must not wait for the reply.
    recorder = Recorder()
    with serving(latency_ms=1500.0) as handle:
        conn = connection(handle.url_template, recorder)
        try:
            assert wait_until(lambda: conn.connected)
            started = time.perf_counter()
            assert conn.submit(pi_observation(), "slow", handoff_s=5.0)
            returned = time.perf_counter()
            assert conn.busy  # the reply is 1.5 s away
            outcome = recorder.result()
            assert outcome.reply is not None and outcome.sent_at is not None
            # Written before submit returned; submit did not wait for the reply.
            assert started < outcome.sent_at <= returned
            assert returned - started < 1.0
            # A request that ends before it is written (it cannot be encoded) ends
            # the wait as well.
            started = time.perf_counter()
            assert conn.submit(pi_observation(extra=np.array([object()])), "bad", handoff_s=5.0)
            assert time.perf_counter() - started < 1.0
            assert "cannot be encoded" in recorder.result().reply["message"]
            with pytest.raises(ValueError, match="handoff_s=-1"):
                conn.submit(pi_observation(), "negative", handoff_s=-1)
            with pytest.raises(ValueError, match="handoff_s=nan"):
                conn.submit(pi_observation(), "nan", handoff_s=float("nan"))
        finally:
            conn.close()


def test_starts_before_the_server_and_connects_when_it_comes_up() -> None:
    recorder = Recorder()
    port = free_port()
    conn = connection(
        f"ws://127.0.0.1:{port}/{{model}}", recorder, reconnect_initial_s=0.05, reconnect_max_s=0.2
    )
    try:
        assert wait_until(lambda: conn.last_error is not None)
        assert not conn.connected
        assert conn.metadata is None
        assert conn.last_error is not None
        assert conn.last_error.startswith("ConnectionRefusedError: ")
        assert not conn.submit(pi_observation(), tag="early")
        with serving(port=port):
            assert wait_until(lambda: conn.connected)
            assert conn.last_error is None
            assert conn.submit(pi_observation(), tag="late")
            assert isinstance(recorder.result().reply, np.ndarray)
    finally:
        conn.close()


@pytest.mark.slow
def test_reconnects_after_the_server_restarts_on_the_same_port() -> None:
    recorder = Recorder()
    port = free_port()
    conn = connection(
        f"ws://127.0.0.1:{port}/{{model}}", recorder, reconnect_initial_s=0.05, reconnect_max_s=0.2
    )
    try:
        with serving(port=port):
            assert wait_until(lambda: conn.connected)
            assert conn.submit(pi_observation(), tag="before")
            assert isinstance(recorder.result().reply, np.ndarray)
        # Server gone: the worker notices while idle and reports it.
        assert wait_until(lambda: not conn.connected)
        assert wait_until(lambda: len(recorder.disconnects) == 1)
        assert conn.last_error is not None
        assert not conn.submit(pi_observation(), tag="while down")
        with serving(port=port) as again:
            assert wait_until(lambda: conn.connected)
            assert len(recorder.connects) == 2
            assert conn.submit(pi_observation(), tag="after")
            outcome = recorder.result()
            assert outcome.tag == "after"
            assert isinstance(outcome.reply, np.ndarray)
            assert again.stats.connections_opened == 1
    finally:
        conn.close()


def test_request_in_flight_when_the_connection_drops_gets_a_connection_error() -> None:
    recorder = Recorder()
    port = free_port()
    conn = connection(f"ws://127.0.0.1:{port}/{{model}}", recorder, reconnect_initial_s=0.05)
    try:
        with serving(port=port, latency_ms=1000.0) as handle:
            assert wait_until(lambda: conn.connected)
            assert conn.submit(pi_observation(), tag="lost")
            # The request reached the server (it answers after 1 s, when it is gone).
            assert handle.stats.wait_for(lambda s: s.frames >= 1, scaled(10))
        outcome = recorder.result()
        assert outcome.tag == "lost"
        assert outcome.reply is None
        assert outcome.connection_error is not None
        assert outcome.connection_error.startswith("ConnectionClosed")
        assert wait_until(lambda: not conn.busy)
    finally:
        conn.close()


def test_idle_timeout_is_noticed_and_the_worker_reconnects() -> None:
    recorder = Recorder()
    with serving(idle_timeout_s=0.3) as handle:
        with connection(handle.url_template, recorder, idle_poll_s=0.05):
            assert wait_until(lambda: len(recorder.disconnects) >= 1)
            assert "idle" in recorder.disconnects[0]
            assert wait_until(lambda: len(recorder.connects) >= 2)


class _ResetCounter:
    """A --policy object for the reference server that counts reset() calls."""

    resets = 0

    def infer(self, obs: dict[str, Any]) -> dict[str, Any]:
        return {"actions": np.zeros((50, 32), np.float32)}

    def reset(self) -> None:
        type(self).resets += 1


def test_request_reset_runs_on_the_worker() -> None:
    _ResetCounter.resets = 0
    recorder = Recorder()
    with serving(policy=_ResetCounter) as handle:
        with connection(handle.url_template, recorder) as conn:
            assert wait_until(lambda: conn.connected)
            conn.request_reset()
            assert wait_until(lambda: _ResetCounter.resets == 1)
            conn.request_reset()
            assert conn.submit(pi_observation(), tag="after reset")
            assert isinstance(recorder.result().reply, np.ndarray)
            assert _ResetCounter.resets == 2


def test_close_while_the_server_is_still_loading_returns_promptly() -> None:
    recorder = Recorder()
    with serving(load_delay_s=30.0) as handle:
        conn = connection(handle.url_template, recorder, open_timeout=None)
        assert wait_until(lambda: handle.stats.connections_opened == 1)
        started = time.monotonic()
        conn.close(timeout=5.0)
        assert time.monotonic() - started < 4.0  # not the 30 s load, not the join timeout
        assert not conn.connected
        assert handle.wait_closed_connections(1)
        assert recorder.connects == []


@pytest.mark.slow
def test_close_with_a_request_in_flight_delivers_its_outcome() -> None:
    recorder = Recorder()
    with serving(latency_ms=3000.0) as handle:
        conn = connection(handle.url_template, recorder)
        assert wait_until(lambda: conn.connected)
        assert conn.submit(pi_observation(), tag="slow")
        assert handle.stats.wait_for(lambda s: s.frames >= 1, scaled(10))  # in flight
        started = time.monotonic()
        conn.close(timeout=5.0)
        assert time.monotonic() - started < 2.5  # the request was cut, not waited for
        outcome = recorder.result(timeout=1.0)
        assert outcome.tag == "slow"
        assert outcome.reply is None
        assert outcome.connection_error is not None
        assert not conn.submit(pi_observation(), tag="after close")
        assert recorder.disconnects == []  # close() is not a loss


def test_no_thread_or_socket_leaks() -> None:
    recorder = Recorder()
    with serving() as handle:
        # A thread of an earlier test may still be ending: compare identities, not counts
        # (a count equal to before never comes if such a thread ends meanwhile).
        threads_before = set(threading.enumerate())
        fds_before = open_fds()
        for round_ in range(3):
            conn = connection(handle.url_template, recorder)
            assert wait_until(lambda c=conn: c.connected)
            assert conn.submit(pi_observation(), tag=round_)
            assert isinstance(recorder.result().reply, np.ndarray)
            conn.close()
            conn.close()  # idempotent
        assert handle.wait_closed_connections(3)
        # The server's side of each socket is closed too once its handler finished.
        assert wait_until(
            lambda: not [t for t in threading.enumerate() if t not in threads_before],
            message=lambda: str([t.name for t in threading.enumerate() if t not in threads_before]),
        )
        assert wait_until(lambda: open_fds() <= fds_before)


def test_no_leaks_after_close_while_connecting() -> None:
    port = free_port()
    # A thread of an earlier test may still be ending: compare identities, not counts.
    threads_before = set(threading.enumerate())
    fds_before = open_fds()
    conn = connection(f"ws://127.0.0.1:{port}/{{model}}", Recorder(), reconnect_initial_s=0.05)
    assert wait_until(lambda: conn.last_error is not None)
    conn.close()
    assert [t.name for t in threading.enumerate() if t not in threads_before] == []
    assert open_fds() <= fds_before


def test_configuration_errors_raise_in_the_constructor() -> None:
    def ignore(_outcome: InferOutcome) -> None:
        return None

    with pytest.raises(UnknownModelError):
        PolicyConnection("pi5", url="ws://127.0.0.1:9/{model}", on_result=ignore)
    with pytest.raises(KeyError):
        PolicyConnection("pi05", on_result=ignore)
    with pytest.raises(InvalidURI):
        PolicyConnection("pi05", url="http://127.0.0.1:9/{model}", on_result=ignore)
    with pytest.raises(ValueError) as info:
        PolicyConnection(
            "pi05", url="ws://127.0.0.1:9/{model}", on_result=ignore, reconnect_initial_s=0
        )
    assert str(info.value) == "reconnect_initial_s=0 must be a positive number of seconds"


def test_walle_url_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    recorder = Recorder()
    with serving() as handle:
        monkeypatch.setenv("WALLE_URL", handle.url_template)
        with PolicyConnection("pi05", on_result=recorder.on_result) as conn:
            assert conn.url == handle.url("pi05")
            assert wait_until(lambda: conn.connected)


def test_callback_exceptions_do_not_kill_the_worker() -> None:
    results: list[InferOutcome] = []

    def explode(outcome: InferOutcome) -> None:
        results.append(outcome)
        raise RuntimeError("callback bug")

    with serving() as handle:
        with PolicyConnection("pi05", url=handle.url_template, on_result=explode) as conn:
            assert wait_until(lambda: conn.connected)
            assert conn.submit(pi_observation(), tag=1)
            assert wait_until(lambda: len(results) == 1 and not conn.busy)
            assert conn.submit(pi_observation(), tag=2)
            assert wait_until(lambda: len(results) == 2)


def test_close_from_a_callback_stops_the_worker() -> None:
    closed = threading.Event()
    holder: list[PolicyConnection] = []

    def on_result(outcome: InferOutcome) -> None:
        holder[0].close()
        closed.set()

    with serving() as handle:
        conn = PolicyConnection("pi05", url=handle.url_template, on_result=on_result)
        holder.append(conn)
        assert wait_until(lambda: conn.connected)
        assert conn.submit(pi_observation(), tag=1)
        assert closed.wait(10)
        assert wait_until(lambda: not conn._thread.is_alive())
        assert handle.wait_closed_connections(1)
        assert not conn.submit(pi_observation(), tag=2)
