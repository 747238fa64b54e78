"""PolicyConnection against a misbehaving server (test/fault_server.py): a request
timeout drops and reopens the connection, the worker survives every fault, the
server's idle close is reconnected quietly, and secrets never reach its texts."""

from __future__ import annotations

import logging
import queue
import threading
from typing import Any

import numpy as np
import pytest
from fault_server import FaultServer
from helpers import wait_until

from relay_ros.server import ServerOptions, run_server_in_thread
from relay_ros.wire.connection import InferOutcome, PolicyConnection

OBS = {"state": np.zeros(32, np.float32), "prompt": "wave"}


class Recorder:
    def __init__(self) -> None:
        self.results: queue.Queue[InferOutcome] = queue.Queue()
        self.connects: list[dict[str, Any]] = []
        self.disconnects: list[str] = []

    def result(self, timeout: float = 15.0) -> InferOutcome:
        return self.results.get(timeout=timeout)


def connect(url: str, recorder: Recorder, **options: Any) -> PolicyConnection:
    options.setdefault("reconnect_initial_s", 0.05)
    return PolicyConnection(
        "pi05",
        url=url,
        on_result=recorder.results.put,
        on_connect=recorder.connects.append,
        on_disconnect=recorder.disconnects.append,
        **options,
    )


def submit(conn: PolicyConnection, obs: Any, tag: object) -> None:
    assert wait_until(lambda: conn.connected and not conn.busy)
    assert conn.submit(obs, tag)


def test_request_timeout_drops_the_connection_and_the_next_request_works(
    caplog: pytest.LogCaptureFixture,
) -> None:
    recorder = Recorder()
    with FaultServer(["swallow"]) as server:
        with connect(server.url_template, recorder, request_timeout_s=0.5) as conn:
            submit(conn, OBS, "swallowed")
            outcome = recorder.result()
            assert outcome.tag == "swallowed"
            assert outcome.reply is None
            assert outcome.connection_error == "request timed out after 0.5 s (request_timeout_s)"
            assert wait_until(lambda: "lost: request timed out" in caplog.text)  # said so
            assert wait_until(lambda: len(recorder.connects) == 2)  # reconnected
            submit(conn, OBS, "next")
            outcome = recorder.result()
            assert outcome.connection_error is None
            assert isinstance(outcome.reply, np.ndarray)
    assert server.connections == 2


def test_request_timeout_function_is_asked_before_each_request() -> None:
    asked: list[int] = []

    def timeout() -> float | None:
        asked.append(1)
        return None if len(asked) == 1 else 0.3

    recorder = Recorder()
    with FaultServer(["slow", "swallow"], slow_s=0.6) as server:
        with connect(server.url_template, recorder, request_timeout_s=timeout) as conn:
            submit(conn, OBS, 1)
            assert recorder.result().connection_error is None  # no timeout: waited 0.6 s
            submit(conn, OBS, 2)
            assert "timed out after 0.3 s" in str(recorder.result().connection_error)
    assert len(asked) == 2


def test_request_timeout_is_validated() -> None:
    with pytest.raises(ValueError, match="request_timeout_s=0"):
        PolicyConnection(
            "pi05", url="ws://127.0.0.1:1/{model}", on_result=print, request_timeout_s=0
        )


@pytest.mark.parametrize(
    ("fault", "reason"),
    [
        ("freeze", "keepalive ping timeout"),
        ("close_mid_frame", "ConnectionClosed"),
        ("garbage", "PolicyServerError"),
        ("bad_utf8", "not valid UTF-8"),
        ("wrong_type", "expected a 2-D float array"),
        ("oversize", "size cap"),
    ],
)
def test_each_fault_fails_one_request_then_the_worker_reconnects(fault: str, reason: str) -> None:
    recorder = Recorder()
    with FaultServer([fault]) as server:
        with connect(server.url_template, recorder, ping_interval=0.2, ping_timeout=0.5) as conn:
            submit(conn, OBS, "faulty")
            outcome = recorder.result()
            assert outcome.reply is None
            assert reason in str(outcome.connection_error)
            submit(conn, OBS, "after")
            outcome = recorder.result()
            assert outcome.connection_error is None, outcome
            assert isinstance(outcome.reply, np.ndarray)


class _ExplodingObservation(dict):  # type: ignore[type-arg]
    """An observation whose encoding fails in a way no handler expects."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(state=1)
        self._error = error

    def items(self) -> Any:
        raise self._error


@pytest.mark.parametrize("error", [MemoryError(), RuntimeError("boom"), KeyError("x")])
def test_worker_survives_any_exception_and_submit_works_again(error: BaseException) -> None:
    recorder = Recorder()
    with FaultServer() as server:
        with connect(server.url_template, recorder) as conn:
            submit(conn, _ExplodingObservation(error), "explodes")
            outcome = recorder.result()
            assert outcome.reply is None
            assert "unexpected fault" in str(outcome.connection_error)
            assert type(error).__name__ in str(outcome.connection_error)
            submit(conn, OBS, "after")
            outcome = recorder.result()
            assert outcome.connection_error is None
            assert isinstance(outcome.reply, np.ndarray)
            assert conn._thread.is_alive()


def test_server_idle_close_is_reconnected_quietly(caplog: pytest.LogCaptureFixture) -> None:
    """The server's 30 s idle close (here 0.3 s) while the node waits for cameras is
    expected: INFO once, then DEBUG; never a WARNING every time."""
    caplog.set_level(logging.DEBUG, logger="relay_ros")
    recorder = Recorder()
    with run_server_in_thread(ServerOptions(models=("pi05",), idle_timeout_s=0.3)) as handle:
        with connect(handle.url_template, recorder, idle_poll_s=0.05) as conn:
            assert wait_until(lambda: len(recorder.connects) >= 4)
            submit(conn, {**OBS, "images": {"base_0_rgb": np.zeros((8, 8, 3), np.uint8)}}, 1)
            assert recorder.result().connection_error is None
        assert conn.idle_closes >= 3
    idle = [r for r in caplog.records if "closed the idle connection" in r.getMessage()]
    assert len(idle) >= 3
    assert [r.levelno for r in idle[:1]] == [logging.INFO]
    assert {r.levelno for r in idle[1:]} == {logging.DEBUG}
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert warnings == [], [r.getMessage() for r in warnings]


def test_logger_argument_routes_every_message() -> None:
    records: list[tuple[str, str]] = []
    lock = threading.Lock()

    class ListLogger:
        def log(self, level: int, msg: str, *args: object, **_: object) -> None:
            with lock:
                records.append((logging.getLevelName(level), msg % args if args else msg))

        def debug(self, msg: str, *args: object, **kw: object) -> None:
            self.log(logging.DEBUG, msg, *args)

        def info(self, msg: str, *args: object, **kw: object) -> None:
            self.log(logging.INFO, msg, *args)

        def warning(self, msg: str, *args: object, **kw: object) -> None:
            self.log(logging.WARNING, msg, *args)

        def error(self, msg: str, *args: object, **kw: object) -> None:
            self.log(logging.ERROR, msg, *args)

        exception = error

    recorder = Recorder()
    with FaultServer(["swallow"]) as server:
        with connect(
            server.url_template, recorder, request_timeout_s=0.3, logger=ListLogger()
        ) as conn:
            submit(conn, OBS, 1)
            recorder.result()
            assert wait_until(lambda: len(recorder.connects) == 2)
    texts = [text for _, text in records]
    assert any(text.startswith("connected to ws://127.0.0.1") for text in texts)  # the client
    assert any("lost: request timed out" in text for text in texts)  # the connection


def test_secrets_never_reach_errors_reasons_or_logs(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="relay_ros")
    recorder = Recorder()
    with FaultServer(["swallow", "stall_open"]) as server:
        url = f"ws://robot:hunter2@127.0.0.1:{server.port}/{{model}}?token=s3cr3t"
        with connect(url, recorder, request_timeout_s=0.3, open_timeout=0.5) as conn:
            # The first connection stalls on open (open_timeout), the second serves.
            assert wait_until(lambda: conn.connected, 15.0)
            assert conn.display_url == f"ws://***@127.0.0.1:{server.port}/pi05?token=***"
            submit(conn, OBS, 1)
            outcome = recorder.result()
            assert wait_until(lambda: len(recorder.connects) == 2, 15.0)
    texts = [caplog.text, str(outcome.connection_error), *recorder.disconnects]
    assert "timed out" in caplog.text
    for text in texts:
        for secret in ("hunter2", "s3cr3t"):
            assert secret not in text, text
