"""PolicyClient against a server that misbehaves (test/fault_server.py), over real
loopback WebSockets: every wait has a deadline, every decode a bound, secrets in
the URL never show, and each fault ends in a defined, documented state."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
from fault_server import FaultServer
from websockets.exceptions import ConnectionClosed

from relay_ros import PolicyClient
from relay_ros.wire.codec import REPLY_LIMITS, packb
from relay_ros.wire.errors import PolicyServerError, RequestTimeout
from relay_ros.wire.metadata import check_metadata

OBS = {"state": np.zeros(32, np.float32), "prompt": "wave"}
SECRET_URL = "ws://robot:hunter2@127.0.0.1:{port}/{{model}}?token=s3cr3t"
SECRETS = ("hunter2", "s3cr3t", "robot:")


# No WALLE_* from the shell or a .env above the checkout (test/conftest.py).
pytestmark = pytest.mark.usefixtures("isolated_env")

# --- a deadline on each request ---------------------------------------------------------


def test_timeout_none_keeps_waiting_for_a_slow_reply() -> None:
    with FaultServer(["slow"], slow_s=1.0) as server:
        with PolicyClient("pi05", url=server.url_template) as client:
            reply = client.infer_reply(OBS)
            assert isinstance(reply.actions, np.ndarray)
            assert reply.roundtrip_s is not None and reply.roundtrip_s >= 0.9


def test_swallowed_request_times_out_and_closes_the_client() -> None:
    with FaultServer(["swallow"]) as server:
        client = PolicyClient("pi05", url=server.url_template)
        started = time.monotonic()
        with pytest.raises(RequestTimeout) as info:
            client.infer(OBS, timeout=0.5)
        elapsed = time.monotonic() - started
        assert 0.45 <= elapsed < 5.0
        assert isinstance(info.value, TimeoutError)
        assert "within 0.5 s" in str(info.value)
        assert "the client is closed" in str(info.value)
        # Defined state: closed, so a late reply can never be taken for the next one.
        with pytest.raises(ConnectionClosed):
            client.infer(OBS)
        client.close()  # still idempotent


def test_a_reply_within_the_timeout_is_returned() -> None:
    with FaultServer(["slow"], slow_s=0.2) as server:
        with PolicyClient("pi05", url=server.url_template) as client:
            assert isinstance(client.infer(OBS, timeout=10.0), np.ndarray)
            assert isinstance(client.infer(OBS, timeout=10.0), np.ndarray)


def test_timeout_must_be_positive() -> None:
    with FaultServer() as server:
        with PolicyClient("pi05", url=server.url_template) as client:
            with pytest.raises(ValueError, match="timeout=0"):
                client.infer(OBS, timeout=0)


def test_frozen_peer_is_noticed_by_pings_without_a_timeout() -> None:
    """A stopped server (or half-open TCP) answers no ping: the waiting call ends."""
    with FaultServer(["freeze"]) as server:
        with PolicyClient(
            "pi05", url=server.url_template, ping_interval=0.2, ping_timeout=0.5
        ) as client:
            started = time.monotonic()
            with pytest.raises(ConnectionClosed) as info:
                client.infer(OBS)
            assert time.monotonic() - started < 5.0
            assert "keepalive ping timeout" in str(info.value)


def test_a_busy_server_that_answers_pings_is_not_dropped() -> None:
    with FaultServer(["slow"], slow_s=1.0) as server:
        with PolicyClient(
            "pi05", url=server.url_template, ping_interval=0.1, ping_timeout=0.5
        ) as client:
            assert isinstance(client.infer(OBS), np.ndarray)


# --- faults on the reply -----------------------------------------------------------------


def test_close_mid_frame_raises_connection_closed() -> None:
    with FaultServer(["close_mid_frame"]) as server:
        with PolicyClient("pi05", url=server.url_template) as client:
            with pytest.raises(ConnectionClosed):
                client.infer(OBS, timeout=10.0)


@pytest.mark.parametrize(
    ("fault", "match"),
    [
        ("garbage", "undecodable reply"),
        ("bad_utf8", "not valid UTF-8"),
        ("wrong_type", "sent int 7 as pi05 actions; expected a 2-D float array"),
        ("oversize", f"size cap of {8 * 2**20} bytes .*{9 * 2**20} bytes"),
        ("amplify", f"size cap of {8 * 2**20} bytes"),
    ],
)
def test_bad_replies_raise_policy_server_error(fault: str, match: str) -> None:
    with FaultServer([fault]) as server:
        with PolicyClient("pi05", url=server.url_template) as client:
            with pytest.raises(PolicyServerError, match=match):
                client.infer(OBS, timeout=30.0)


def test_amplification_reply_under_a_larger_cap_is_refused_by_the_object_limit() -> None:
    with FaultServer(["amplify"]) as server:
        with PolicyClient("pi05", url=server.url_template, max_reply_bytes=32 * 2**20) as client:
            with pytest.raises(PolicyServerError, match="more than 100000 msgpack values"):
                client.infer(OBS, timeout=30.0)


_RSS_SCRIPT = textwrap.dedent(
    """
    import sys
    import numpy as np
    from relay_ros import PolicyClient
    from relay_ros.wire.errors import PolicyServerError

    def peak_kib():
        for line in open("/proc/self/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1])

    client = PolicyClient("pi05", url=sys.argv[1], max_reply_bytes=int(sys.argv[2]))
    before = peak_kib()
    try:
        client.infer({"state": np.zeros(32, np.float32)}, timeout=60)
    except PolicyServerError as exc:
        print("refused:", exc)
    print("peak_growth_kib", peak_kib() - before)
    """
)


@pytest.mark.slow
@pytest.mark.parametrize("cap", [8 * 2**20, 32 * 2**20])
def test_amplification_reply_does_not_blow_up_the_client_rss(cap: int) -> None:
    """16 MiB of ``0xdd n 0x90*n`` used to cost 1.4 GB of RSS in the client."""
    with FaultServer(["amplify"]) as server:
        out = subprocess.run(
            [sys.executable, "-c", _RSS_SCRIPT, server.url_template, str(cap)],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        )
    assert out.returncode == 0, out.stderr
    assert "refused:" in out.stdout
    growth_kib = int(out.stdout.split("peak_growth_kib")[1])
    # The 16 MiB reply is buffered (a few copies at most); never 64x of it.
    assert growth_kib < 200 * 1024, out.stdout


def test_error_map_passes_through_and_reply_limits_are_for_actions() -> None:
    assert REPLY_LIMITS.max_bytes == 8 * 2**20
    with FaultServer() as server:
        with PolicyClient("pi05", url=server.url_template) as client:
            assert client.infer(OBS).shape == (50, 32)


def test_groot_reply_must_be_a_dict_of_arrays() -> None:
    with FaultServer(["wrong_type"], model="groot") as server:
        with PolicyClient("groot", url=server.url_template) as client:
            with pytest.raises(PolicyServerError, match="expected a dict of float arrays"):
                client.infer(OBS)


# --- opening: one deadline, clear errors -------------------------------------------------


@pytest.mark.parametrize("fault", ["stall_open", "no_metadata"])
def test_open_timeout_is_one_deadline_on_the_whole_open(fault: str) -> None:
    with FaultServer([fault]) as server:
        started = time.monotonic()
        with pytest.raises(TimeoutError):
            PolicyClient("pi05", url=server.url_template, open_timeout=2.0)
        elapsed = time.monotonic() - started
    assert 1.9 <= elapsed < 2.0 + 1.5


def test_open_timeout_covers_the_direct_route_too() -> None:
    """Proxied metadata, then a direct route that never answers: still one deadline."""
    with FaultServer(["stall_open"]) as direct, FaultServer() as proxy:
        proxy.metadata = {**proxy.metadata, "direct_url": direct.url_template.format(model="pi05")}
        started = time.monotonic()
        with pytest.raises(TimeoutError):
            PolicyClient("pi05", url=proxy.url_template, open_timeout=2.0)
        assert time.monotonic() - started < 2.0 + 1.5


# A server that never answers the client's close frame: the close of a failed open must
# not wait for it. With the closing handshake allowed 30 s here, an open that ended by its
# deadline (or at once) is told apart from one that waited, on any machine load.
LONG_CLOSE_S = 30.0


@pytest.mark.parametrize("fault", ["stall_open", "no_metadata", "frozen_open"])
def test_a_failed_open_ends_by_its_deadline_with_no_close_wait_after_it(
    fault: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("relay_ros.wire.transport._CLOSE_TIMEOUT_S", LONG_CLOSE_S)
    with FaultServer([fault]) as server:
        started = time.monotonic()
        with pytest.raises(TimeoutError, match="timed out after 1.0 s"):
            PolicyClient("pi05", url=server.url_template, open_timeout=1.0)
        elapsed = time.monotonic() - started
    assert 0.95 <= elapsed < LONG_CLOSE_S / 3


@pytest.mark.parametrize(
    ("fault", "match"),
    [
        ("garbage_metadata", "sent undecodable metadata"),
        (
            "wrong_model_metadata",
            r"serves model 'groot' \(family groot\); this client is for 'pi05' \(family pi\)",
        ),
    ],
)
def test_bad_metadata_fails_the_open_at_once(
    fault: str, match: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No deadline at all (the default): the error comes when the metadata does, not
    after a closing handshake with a server that stopped reading."""
    monkeypatch.setattr("relay_ros.wire.transport._CLOSE_TIMEOUT_S", LONG_CLOSE_S)
    with FaultServer([fault]) as server:
        started = time.monotonic()
        with pytest.raises(PolicyServerError, match=match):
            PolicyClient("pi05", url=server.url_template)
        elapsed = time.monotonic() - started
    assert elapsed < LONG_CLOSE_S / 3


def test_closing_the_proxied_connection_stays_within_the_open_deadline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The direct route is taken and the proxy never answers the close of the proxied
    connection: the open still returns by its deadline, on the direct connection."""
    monkeypatch.setattr("relay_ros.wire.transport._CLOSE_TIMEOUT_S", LONG_CLOSE_S)
    with FaultServer() as direct, FaultServer(["freeze_after_metadata"]) as proxy:
        direct_url = direct.url_template.format(model="pi05")
        proxy.metadata = {**proxy.metadata, "direct_url": direct_url}
        started = time.monotonic()
        with PolicyClient("pi05", url=proxy.url_template, open_timeout=1.0) as client:
            elapsed = time.monotonic() - started
            assert client.url == direct_url
            assert isinstance(client.infer(OBS), np.ndarray)
    assert elapsed < LONG_CLOSE_S / 3


@pytest.mark.parametrize(
    ("metadata", "message"),
    [
        ({"model": "pi0"}, "server serves model 'pi0' (family pi); this client is for 'pi05'"),
        ({"model": 5}, "server serves model 5; this client is for 'pi05' (family pi)"),
        ({"model": "pi05", "protocol": "1"}, "server sent metadata protocol '1'; expected an int"),
        ({"protocol": True}, "server sent metadata protocol True; expected an int >= 0"),
        ({"protocol": -1}, "server sent metadata protocol -1; expected an int >= 0"),
        ({"direct_url": 7}, "server sent metadata direct_url 7; expected a ws:// or wss:// URL"),
    ],
)
def test_metadata_fields_the_client_relies_on_are_checked(
    metadata: dict[str, object], message: str
) -> None:
    with pytest.raises(PolicyServerError) as info:
        check_metadata(metadata, "pi05")
    assert str(info.value).startswith(message)


def test_openpi_and_relay_metadata_pass_the_check() -> None:
    check_metadata({"action_horizon": 50}, "pi05")  # openpi: no model, no protocol
    check_metadata({"model": "pi05", "protocol": 1, "direct_url": "ws://h/pi05"}, "pi05")


def test_no_pings_fail_the_open_of_a_loading_server() -> None:
    """The wait for metadata is bounded by open_timeout only, never by pings."""
    with FaultServer(["frozen_open"]) as server:
        with pytest.raises(TimeoutError):
            PolicyClient(
                "pi05",
                url=server.url_template,
                open_timeout=1.0,
                ping_interval=0.1,
                ping_timeout=0.2,
            )


def test_invalid_utf8_text_metadata_raises_policy_server_error() -> None:
    with FaultServer(["bad_metadata"]) as server:
        with pytest.raises(PolicyServerError, match="not valid UTF-8"):
            PolicyClient("pi05", url=server.url_template, open_timeout=10.0)


# --- secrets in the URL ------------------------------------------------------------------


def test_secrets_in_the_url_never_reach_logs_or_exception_texts(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="relay_ros")  # the client's own records
    with FaultServer(["swallow"]) as server:
        url = SECRET_URL.format(port=server.port)
        client = PolicyClient("pi05", url=url)
        with pytest.raises(RequestTimeout) as timeout_info:
            client.infer(OBS, timeout=0.3)
        server.add_faults("stall_open")
        with pytest.raises(TimeoutError) as open_info:
            PolicyClient("pi05", url=url, open_timeout=0.5)
    texts = [str(timeout_info.value), str(open_info.value), caplog.text]
    assert "connected to ws://***@127.0.0.1" in caplog.text
    assert "token=***" in str(open_info.value)
    for text in texts:
        for secret in SECRETS:
            assert secret not in text, text


def test_secrets_are_still_sent_to_the_server() -> None:
    """Redaction is for display only: the client authenticates with them."""
    with FaultServer() as server:
        with PolicyClient("pi05", url=SECRET_URL.format(port=server.port)) as client:
            assert "hunter2" in client.url
            assert client.display_url == f"ws://***@127.0.0.1:{server.port}/pi05?token=***"
            assert isinstance(client.infer(OBS), np.ndarray)


def test_logger_argument_routes_the_clients_messages() -> None:
    records: list[str] = []

    class ListLogger:
        def _add(self, msg: str, *args: object, **_: object) -> None:
            records.append(msg % args if args else msg)

        debug = info = warning = error = _add

    with FaultServer() as server:
        with PolicyClient("pi05", url=server.url_template, logger=ListLogger()) as client:
            client.infer(OBS)
    assert any(text.startswith("connected to ws://127.0.0.1") for text in records)


def test_reply_decoder_accepts_openpi_float64_actions() -> None:
    from relay_ros.wire.reply import decode_reply

    reply = decode_reply("pi0", packb({"actions": np.zeros((10, 7))}))
    assert reply.actions.shape == (10, 7)
    error = decode_reply("pi0", packb({"type": "error", "message": "Invalid request payload"}))
    assert error.error == {"type": "error", "message": "Invalid request payload"}
