"""The reference server's sessions per connection are bounded (``max_sessions``): at
the bound a new ``session_id`` evicts the least recently used session, over a real
loopback WebSocket. Which session went is read from the replies
themselves: with ``--seed`` a session's unseeded chunks are a reproducible stream, so a
session that was kept continues its stream and an evicted one comes back fresh."""

from __future__ import annotations

import logging
import tracemalloc
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from helpers import scaled
from websockets.sync.client import connect

from relay_ros.formats.requests import MAX_SESSION_ID_CHARS
from relay_ros.server import ServerOptions, run_server_in_thread
from relay_ros.wire.codec import packb, unpackb

OBS = {
    "images": {"base_0_rgb": np.zeros((8, 8, 3), np.uint8)},
    "state": np.linspace(-0.3, 0.3, 32, dtype=np.float32),
    "prompt": "wave",
}
INTERNAL = {"type": "error", "message": "Internal inference error"}
TIMEOUT = scaled(10.0)  # generous: the machine is shared


class Peer:
    """One client connection to the server (websockets' sync client and the codec)."""

    def __init__(self, url: str) -> None:
        self.ws = connect(url, compression=None, max_size=None, open_timeout=TIMEOUT)
        self.ws.__enter__()  # context-managed: websockets >= 17.1 warns otherwise
        unpackb(self.ws.recv(timeout=TIMEOUT))  # the metadata

    def ask(self, frame: dict[str, Any]) -> Any:
        self.ws.send(packb(frame))
        return unpackb(self.ws.recv(timeout=TIMEOUT))

    def infer(self, session_id: str) -> Any:
        return self.ask({**OBS, "session_id": session_id})

    def reset(self) -> int:
        """Reset the connection's sessions; how many there were."""
        return int(self.ask({"type": "reset"})["sessions_cleared"])

    def close(self) -> None:
        self.ws.close()


def run(session_ids: Sequence[str], max_sessions: int) -> tuple[list[np.ndarray], int, int]:
    """Unseeded requests with these ids on one connection of a seeded server: the
    chunks, then the reset's ``sessions_cleared`` and the server's eviction count."""
    options = ServerOptions(models=("pi05",), seed=7, max_sessions=max_sessions)
    with run_server_in_thread(options) as server:
        peer = Peer(server.url("pi05"))
        try:
            chunks = [np.array(peer.infer(sid)["actions"]) for sid in session_ids]
            cleared = peer.reset()
        finally:
            peer.close()
        return chunks, cleared, server.stats.sessions_evicted


def test_at_the_cap_the_least_recently_used_session_is_evicted() -> None:
    ids = ["a", "b", "c", "a", "d", "e", "a", "b"]
    capped, cleared, evicted = run(ids, max_sessions=4)
    unbounded, unbounded_cleared, unbounded_evicted = run(ids, max_sessions=100)
    # "e" is the fifth session: "b" (used longest ago; "a" was used since) goes.
    assert (cleared, evicted) == (4, 2)  # "b" for "e", then "c" for the returning "b"
    assert (unbounded_cleared, unbounded_evicted) == (5, 0)
    for i in range(7):  # up to the last "a": the same streams either way
        np.testing.assert_array_equal(capped[i], unbounded[i])
    # "b" came back as a new session: not its old stream's next chunk...
    assert not np.array_equal(capped[7], unbounded[7])
    # ...but exactly what a new, sixth session gets.
    fresh, _, _ = run([*ids[:7], "f"], max_sessions=100)
    np.testing.assert_array_equal(capped[7], fresh[7])


def test_the_first_eviction_on_a_connection_is_a_warning_later_ones_debug(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.DEBUG, logger="relay_ros.server"):
        run(["s0", "s1", "s2", "s3"], max_sessions=2)
    evictions = [r for r in caplog.records if "evicted the least recently used" in r.message]
    assert [r.levelno for r in evictions] == [logging.WARNING, logging.DEBUG]
    assert "more than 2 sessions on this connection" in evictions[0].message
    assert "'s0' (1 steps)" in evictions[0].message
    assert "further evictions on this connection are logged at DEBUG" in evictions[0].message


def kept_after(new_ids: int, max_sessions: int) -> tuple[int, int, int]:
    """Bytes still allocated after ``new_ids`` new session ids on one connection, the
    reset's count and the evictions. Counted from 250 new ids on (traced from the
    start, so that a buffer allocated before tracing and replaced later is not
    counted as new): the table is full and every buffer, cache and allocator pool of
    the server is warm, so what remains is what the ids themselves keep."""
    with run_server_in_thread(ServerOptions(models=("pi05",), max_sessions=max_sessions)) as server:
        peer = Peer(server.url("pi05"))
        try:
            tracemalloc.start()
            try:
                for i in range(250):
                    peer.infer(f"warm-{i}")
                before = tracemalloc.get_traced_memory()[0]
                for i in range(new_ids):
                    peer.infer(f"id-{i}")
                grown = tracemalloc.get_traced_memory()[0] - before
            finally:
                tracemalloc.stop()
            cleared = peer.reset()
        finally:
            peer.close()
        return grown, cleared, server.stats.sessions_evicted


def test_memory_stays_bounded_however_many_session_ids_a_client_sends() -> None:
    """300 new ids past a cap of 8: 8 sessions kept, nothing stays allocated. The same
    measure without a cap (10**6) shows what each kept id costs (about 1 KiB)."""
    grown, cleared, evicted = kept_after(300, max_sessions=8)
    assert (cleared, evicted) == (8, 250 - 8 + 300)
    assert grown < 100 * 1024, f"{grown / 1024:.0f} KiB stayed allocated"
    unbounded, cleared, evicted = kept_after(300, max_sessions=10**6)
    assert (cleared, evicted) == (550, 0)
    assert unbounded > 250 * 1024, f"the measure saw only {unbounded / 1024:.0f} KiB"


def test_a_session_id_over_the_length_bound_is_refused_and_the_connection_stays_open() -> None:
    with run_server_in_thread(ServerOptions(models=("pi05",))) as server:
        peer = Peer(server.url("pi05"))
        try:
            assert peer.infer("x" * (MAX_SESSION_ID_CHARS + 1)) == INTERNAL
            assert "actions" in peer.infer("x" * MAX_SESSION_ID_CHARS)
        finally:
            peer.close()


@pytest.mark.parametrize("value", [0, -1, 1.5, True, "8"])
def test_max_sessions_must_be_a_positive_integer(value: object) -> None:
    with pytest.raises(ValueError, match=rf"max_sessions={value!r}; expected an integer >= 1"):
        ServerOptions(max_sessions=value)  # type: ignore[arg-type]
