"""PolicyClient against the reference server over real loopback WebSockets.

One test (at least) per sentence of the client seed: URL lookup, blocking
constructor, the exceptions it promises, the direct route, infer's results and
error maps, reset, metadata, close and the context manager.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import gc
import shutil
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import PI_CAMERAS, free_port, groot_observation, wait_until
from helpers import pi_observation as _pi_observation
from websockets.asyncio.server import serve as ws_serve
from websockets.exceptions import ConnectionClosed, InvalidStatus, InvalidURI

from relay_ros import PolicyClient
from relay_ros.models import UnknownModelError
from relay_ros.server import ServerHandle, ServerOptions, run_server_in_thread
from relay_ros.wire.codec import CodecError, packb, unpackb

# Every pi camera, seeded random pixels: the server sees a realistic request.
pi_observation = functools.partial(
    _pi_observation, cameras=PI_CAMERAS, random=True, prompt="pick up the red cube"
)


# No WALLE_* from the shell or a .env above the checkout (test/conftest.py).
pytestmark = pytest.mark.usefixtures("isolated_env")


@pytest.fixture(scope="module")
def server() -> Iterator[ServerHandle]:
    """One reference server for all three models, zero latency."""
    with run_server_in_thread(ServerOptions()) as handle:
        yield handle


@contextlib.contextmanager
def serving(**options: Any) -> Iterator[ServerHandle]:
    with run_server_in_thread(ServerOptions(**options)) as handle:
        yield handle


# --- WALLE_URL, .env and {model} ------------------------------------------------------


def test_walle_url_from_environment_fills_model(
    server: ServerHandle, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WALLE_URL", server.url_template)
    with PolicyClient("pi0") as client:
        assert client.get_server_metadata()["model"] == "pi0"
        assert client.url == server.url("pi0")


def test_walle_url_from_env_file_in_nearest_parent(
    server: ServerHandle, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / ".env").write_text("WALLE_URL=ws://127.0.0.1:9/{model}\n")  # farther: dead
    (tmp_path / "project").mkdir()
    (tmp_path / "project" / ".env").write_text(f"WALLE_URL={server.url_template}\n")
    run_dir = tmp_path / "project" / "scripts" / "run"
    run_dir.mkdir(parents=True)
    monkeypatch.chdir(run_dir)
    with PolicyClient("groot") as client:
        assert client.get_server_metadata()["model"] == "groot"


def test_environment_wins_over_env_file(
    server: ServerHandle, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / ".env").write_text(f"WALLE_URL=ws://127.0.0.1:{free_port()}/{{model}}\n")
    monkeypatch.setenv("WALLE_URL", server.url_template)
    with PolicyClient("pi05") as client:
        assert client.get_server_metadata()["model"] == "pi05"


def test_walle_url_unset_raises_keyerror() -> None:
    with pytest.raises(KeyError) as info:
        PolicyClient("pi05")
    assert info.value.args == ("WALLE_URL",)


def test_url_argument_overrides_and_fills_model(server: ServerHandle) -> None:
    with PolicyClient("groot", url=server.url_template) as client:
        assert client.url == server.url("groot")


def test_unknown_model_id_is_refused_before_connecting() -> None:
    with pytest.raises(UnknownModelError) as info:
        PolicyClient("pi5", url="ws://127.0.0.1:9/{model}")
    assert str(info.value) == "model 'pi5' is not one of ['pi05', 'pi0', 'groot']"


# --- the constructor blocks; the exceptions it promises -----------------------------


@pytest.mark.slow
def test_constructor_blocks_until_metadata_of_a_loading_server() -> None:
    with serving(models=("pi05",), load_delay_s=2.0) as handle:
        started = time.monotonic()
        with PolicyClient("pi05", url=handle.url_template) as client:
            waited = time.monotonic() - started
            assert client.get_server_metadata()["model"] == "pi05"
            assert isinstance(
                client.infer(pi_observation(client.get_server_metadata())), np.ndarray
            )
    # It waited for the "loading" (no timeout by default), with some slack for the clock.
    assert waited >= 1.5


def test_open_timeout_bounds_the_wait_with_an_oserror() -> None:
    with serving(models=("pi05",), load_delay_s=30.0) as handle:
        with pytest.raises(TimeoutError) as info:
            PolicyClient("pi05", url=handle.url_template, open_timeout=0.3)
        assert isinstance(info.value, OSError)
        assert str(info.value) == (
            f"[Errno {errno.ETIMEDOUT}] timed out after 0.3 s waiting for {handle.url('pi05')}"
        )
        # The failed attempt closed its socket: the server side sees the connection end.
        assert handle.wait_closed_connections(1)


def test_unreachable_server_raises_oserror() -> None:
    port = free_port()
    with pytest.raises(OSError) as info:
        PolicyClient("pi05", url=f"ws://127.0.0.1:{port}/{{model}}")
    assert isinstance(info.value, ConnectionRefusedError)
    assert f"cannot connect to 127.0.0.1:{port}" in str(info.value)


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        (
            "http://127.0.0.1:8000/pi05",
            "scheme isn't ws or wss; a policy server speaks WebSocket: write ws:// instead of "
            "http:// (e.g. ws://host/pi05)",
        ),
        (
            "acme--walle-pi05.modal.run",
            "scheme (none) isn't ws or wss; expected ws://host:port/path or wss://host/path",
        ),
        ("ws:///pi05", "hostname isn't provided"),
    ],
)
def test_bad_url_raises_invalid_uri(url: str, reason: str) -> None:
    with pytest.raises(InvalidURI) as info:
        PolicyClient("pi05", url=url)
    assert str(info.value) == f"{url} isn't a valid URI: {reason}"


def test_no_server_for_model_raises_invalid_status_404() -> None:
    with serving(models=("pi05",)) as handle:
        with pytest.raises(InvalidStatus) as info:
            PolicyClient("groot", url=handle.url_template)
    assert info.value.response.status_code == 404
    assert str(info.value) == "server rejected WebSocket connection: HTTP 404"


# --- direct route ---------------------------------------------------------------------


def test_direct_route_connects_there_and_closes_the_proxied_connection() -> None:
    with (
        serving(models=("pi05",)) as direct,
        serving(models=("pi05",), direct_url=direct.url("pi05")) as proxy,
    ):
        with PolicyClient("pi05", url=proxy.url_template) as client:
            # The proxied connection really closed on the server side.
            assert proxy.wait_closed_connections(1)
            assert proxy.stats.open_connections == 0
            assert direct.stats.open_connections == 1
            assert client.url == direct.url("pi05")
            metadata = client.get_server_metadata()
            assert metadata["direct_url"] == direct.url("pi05")
            actions = client.infer(pi_observation(metadata))
            assert isinstance(actions, np.ndarray)
            assert direct.stats.frames == 1
            assert proxy.stats.frames == 0


def test_walle_direct_0_stays_on_the_proxied_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WALLE_DIRECT", "0")
    with (
        serving(models=("pi05",)) as direct,
        serving(models=("pi05",), direct_url=direct.url("pi05")) as proxy,
    ):
        with PolicyClient("pi05", url=proxy.url_template) as client:
            metadata = client.get_server_metadata()
            assert metadata["direct_url"] == direct.url("pi05")
            client.infer(pi_observation(metadata))
            assert client.url == proxy.url("pi05")
            assert proxy.stats.open_connections == 1
            assert proxy.stats.frames == 1
            assert direct.stats.connections_opened == 0


def test_walle_direct_from_env_file(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text("WALLE_DIRECT=0\n")
    with (
        serving(models=("pi05",)) as direct,
        serving(models=("pi05",), direct_url=direct.url("pi05")) as proxy,
    ):
        with PolicyClient("pi05", url=proxy.url_template) as client:
            assert client.url == proxy.url("pi05")
        assert direct.stats.connections_opened == 0


def test_unreachable_direct_route_closes_the_proxied_connection_and_raises() -> None:
    dead = f"ws://127.0.0.1:{free_port()}/pi05"
    with serving(models=("pi05",), direct_url=dead) as proxy:
        with pytest.raises(ConnectionRefusedError):
            PolicyClient("pi05", url=proxy.url_template)
        assert proxy.wait_closed_connections(1)
        assert proxy.stats.open_connections == 0


# --- infer ----------------------------------------------------------------------------


@pytest.mark.parametrize("model", ["pi05", "pi0"])
def test_pi_infer_returns_float32_horizon_by_dim(server: ServerHandle, model: str) -> None:
    with PolicyClient(model, url=server.url_template) as client:
        metadata = client.get_server_metadata()
        actions = client.infer(pi_observation(metadata))
    assert isinstance(actions, np.ndarray)
    assert actions.dtype == np.float32
    assert actions.shape == (metadata["action_horizon"], metadata["action_dim"])
    assert np.isfinite(actions).all()


def test_groot_infer_returns_dict_of_float32_groups(server: ServerHandle) -> None:
    with PolicyClient("groot", url=server.url_template) as client:
        metadata = client.get_server_metadata()
        actions = client.infer(groot_observation(metadata))
    assert isinstance(actions, dict)
    assert sorted(actions) == sorted(metadata["action_keys"])
    for value in actions.values():
        assert isinstance(value, np.ndarray)
        assert value.dtype == np.float32
        assert value.ndim == 3
        assert value.shape[:2] == (1, metadata["action_horizon"])
        assert not value.flags.writeable


def test_returned_arrays_are_read_only_views_of_the_reply(server: ServerHandle) -> None:
    with PolicyClient("pi05", url=server.url_template) as client:
        actions = client.infer(pi_observation(client.get_server_metadata()))
    assert isinstance(actions, np.ndarray)
    assert not actions.flags.writeable
    assert not actions.flags.owndata
    assert isinstance(actions.base, bytes)  # a view of the received bytes, no copy
    with pytest.raises(ValueError, match="read-only"):
        actions[0, 0] = 1.0
    mutable = actions.copy()
    mutable[0, 0] = 1.0
    assert mutable[0, 0] == 1.0


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"state": np.zeros(7, np.float32)}, "Internal inference error"),
        ({"images": {"base": np.zeros((224, 224, 3), np.uint8)}}, "Internal inference error"),
        (
            {"sampling_params": {"lora": "nope"}},
            "Unknown LoRA adapter 'nope'; this server serves []",
        ),
    ],
)
def test_error_reply_is_returned_and_the_next_call_works(
    server: ServerHandle, change: dict[str, Any], message: str
) -> None:
    with PolicyClient("pi05", url=server.url_template) as client:
        metadata = client.get_server_metadata()
        reply = client.infer(pi_observation(metadata, **change))
        assert reply == {"type": "error", "message": message}
        actions = client.infer(pi_observation(metadata))
        assert isinstance(actions, np.ndarray)


def test_non_dict_observation_gets_invalid_request_payload(server: ServerHandle) -> None:
    with PolicyClient("pi05", url=server.url_template) as client:
        assert client.infer([1, 2, 3]) == {  # type: ignore[arg-type]
            "type": "error",
            "message": "Invalid request payload",
        }
        assert isinstance(client.infer(pi_observation(client.get_server_metadata())), np.ndarray)


def test_unencodable_observation_raises_before_sending(server: ServerHandle) -> None:
    with PolicyClient("pi05", url=server.url_template) as client:
        metadata = client.get_server_metadata()
        frames_before = server.stats.frames
        with pytest.raises(CodecError):
            client.infer(pi_observation(metadata, state=np.array([1 + 2j], np.complex64)))
        assert server.stats.frames == frames_before
        assert isinstance(client.infer(pi_observation(metadata)), np.ndarray)


def test_infer_reply_carries_the_request_timing(server: ServerHandle) -> None:
    with PolicyClient("pi05", url=server.url_template) as client:
        before = time.perf_counter()
        reply = client.infer_reply(pi_observation(client.get_server_metadata()))
        assert isinstance(reply.actions, np.ndarray) and reply.error is None
        assert reply.sent_at is not None and before < reply.sent_at < time.perf_counter()
        assert isinstance(reply.server_timing, dict)
        assert isinstance(reply.server_timing["infer_ms"], float)
        assert reply.timing is not None
        assert reply.timing.server_s == pytest.approx(reply.server_timing["infer_ms"] / 1000)
        assert isinstance(reply.roundtrip_s, float) and reply.roundtrip_s > 0
        refused = client.infer_reply({"state": 1})
        assert refused.actions is None and refused.error is not None
        assert refused.result() == refused.error
        assert isinstance(refused.roundtrip_s, float)


def test_same_seed_same_actions_over_one_connection(server: ServerHandle) -> None:
    with PolicyClient("pi05", url=server.url_template) as client:
        obs = pi_observation(client.get_server_metadata(), seed=7)
        first = client.infer(obs)
        second = client.infer(obs)
    assert isinstance(first, np.ndarray)
    np.testing.assert_array_equal(first, second)


# --- reset ----------------------------------------------------------------------------


class _RecordingPolicy:
    """A --policy object that records reset() calls (run by the reference server)."""

    resets = 0

    def infer(self, obs: dict[str, Any]) -> dict[str, Any]:
        return {"actions": np.zeros((50, 32), np.float32)}

    def reset(self) -> None:
        type(self).resets += 1


def test_reset_sends_the_control_frame() -> None:
    _RecordingPolicy.resets = 0
    with serving(models=("pi05",), policy=_RecordingPolicy) as handle:
        with PolicyClient("pi05", url=handle.url_template) as client:
            metadata = client.get_server_metadata()
            client.infer(pi_observation(metadata))
            assert client.reset() is None
            assert _RecordingPolicy.resets == 1
            client.reset()
            assert _RecordingPolicy.resets == 2
            assert isinstance(client.infer(pi_observation(metadata)), np.ndarray)


@contextlib.contextmanager
def openpi_style_server() -> Iterator[tuple[str, list[Any]]]:
    """A server that speaks openpi's protocol: metadata without ``protocol``, answers
    every frame with actions and knows no control frames (as openpi's
    WebsocketPolicyServer); a frame with ``"fail"`` gets a text traceback then a close."""
    received: list[Any] = []
    ready = threading.Event()
    stop: list[Any] = []
    port: list[int] = []

    async def handler(ws: Any) -> None:
        await ws.send(packb({"note": "openpi"}))
        async for message in ws:
            obs = unpackb(message)
            received.append(obs)
            if isinstance(obs, dict) and "fail" in obs:
                await ws.send("Traceback (most recent call last):\n  boom\n")
                await ws.close(1011, "Internal server error. Traceback included in previous frame.")
                return
            await ws.send(packb({"actions": np.ones((10, 7), np.float32)}))

    async def main() -> None:
        async with ws_serve(handler, "127.0.0.1", 0, compression=None, max_size=None) as srv:
            port.append(srv.sockets[0].getsockname()[1])
            loop = asyncio.get_running_loop()
            done = loop.create_future()
            stop.append((loop, done))
            ready.set()
            await done

    thread = threading.Thread(target=asyncio.run, args=(main(),), daemon=True)
    thread.start()
    ready.wait(5)
    try:
        yield f"ws://127.0.0.1:{port[0]}/{{model}}", received
    finally:
        loop, done = stop[0]
        loop.call_soon_threadsafe(done.set_result, None)
        thread.join(5)


def test_reset_is_a_no_op_on_an_openpi_server() -> None:
    with openpi_style_server() as (url, received):
        with PolicyClient("pi05", url=url) as client:
            assert "protocol" not in client.get_server_metadata()
            client.reset()
            actions = client.infer({"state": np.zeros(7, np.float32)})
            assert isinstance(actions, np.ndarray)
            assert actions.shape == (10, 7)
    assert len(received) == 1  # only the observation, no control frame


def test_openpi_text_traceback_becomes_an_error_map() -> None:
    with openpi_style_server() as (url, _received):
        with PolicyClient("pi05", url=url) as client:
            reply = client.infer({"fail": True})
            assert reply == {
                "type": "error",
                "message": "Traceback (most recent call last):\n  boom\n",
            }
            with pytest.raises(ConnectionClosed):
                client.infer({"state": 1})


# --- metadata, close, context manager, connection loss --------------------------------


def test_metadata_is_the_servers_and_needs_no_network() -> None:
    with serving(models=("pi05",)) as handle:
        client = PolicyClient("pi05", url=handle.url_template)
        expected = handle.server.metadata("pi05")
    # The server is gone; the metadata is still there.
    metadata = client.get_server_metadata()
    assert metadata == expected
    for key in ("action_horizon", "image_size", "needs_session_id", "action_dim", "max_cameras"):
        assert key in metadata
    assert metadata["action_space"] == "joint_position"
    metadata["model"] = "changed"
    assert client.get_server_metadata()["model"] == "pi05"
    client.close()


def test_close_then_every_call_raises_connection_closed(server: ServerHandle) -> None:
    client = PolicyClient("pi05", url=server.url_template)
    metadata = client.get_server_metadata()
    opened = server.stats.connections_opened
    closed = server.stats.connections_closed
    client.close()
    client.close()  # idempotent
    assert server.wait_closed_connections(closed + 1)
    assert server.stats.connections_opened == opened
    calls = [
        lambda: client.infer(pi_observation(metadata)),
        client.reset,
        client.get_server_metadata,
        lambda: client.url,
        client.__enter__,
    ]
    for call in calls:
        with pytest.raises(ConnectionClosed):
            call()


def test_context_manager_closes(server: ServerHandle) -> None:
    closed = server.stats.connections_closed
    with PolicyClient("pi05", url=server.url_template) as client:
        assert isinstance(client, PolicyClient)
        metadata = client.get_server_metadata()
    assert server.wait_closed_connections(closed + 1)
    with pytest.raises(ConnectionClosed):
        client.infer(pi_observation(metadata))


def test_context_manager_closes_on_exception(server: ServerHandle) -> None:
    closed = server.stats.connections_closed
    with pytest.raises(RuntimeError, match="boom"):
        with PolicyClient("pi05", url=server.url_template):
            raise RuntimeError("boom")
    assert server.wait_closed_connections(closed + 1)


def test_idle_timeout_then_connection_closed_in_the_middle_of_a_run() -> None:
    with serving(models=("pi05",), idle_timeout_s=0.3) as handle:
        with PolicyClient("pi05", url=handle.url_template) as client:
            metadata = client.get_server_metadata()
            assert handle.wait_closed_connections(1)
            with pytest.raises(ConnectionClosed) as info:
                client.infer(pi_observation(metadata))
            assert info.value.rcvd is not None
            assert info.value.rcvd.code == 1000
            # A new client and the same observation work (the documented advice).
            with PolicyClient("pi05", url=handle.url_template) as again:
                assert isinstance(again.infer(pi_observation(metadata)), np.ndarray)


def test_idle_servicer_reports_the_servers_idle_close() -> None:
    closed = threading.Event()
    with serving(models=("pi05",), idle_timeout_s=0.3) as handle:
        with PolicyClient(
            "pi05", url=handle.url_template, idle_poll_s=0.05, on_close=closed.set
        ) as client:
            assert client.is_open
            assert closed.wait(10.0)
            assert not client.is_open
            assert client.close_received is not None and client.close_received.code == 1000
    with pytest.raises(ValueError, match=r"idle_poll_s=0; expected a positive number"):
        PolicyClient("pi05", url="ws://127.0.0.1:9/{model}", idle_poll_s=0)


def test_server_stop_mid_run_raises_connection_closed() -> None:
    with serving(models=("pi05",)) as handle:
        client = PolicyClient("pi05", url=handle.url_template)
        metadata = client.get_server_metadata()
    with pytest.raises(ConnectionClosed):
        client.infer(pi_observation(metadata))
    with pytest.raises(ConnectionClosed):
        client.infer(pi_observation(metadata))
    client.close()


def test_large_observation_round_trip(server: ServerHandle) -> None:
    """Several MiB in one frame (no permessage-deflate, no small max_size)."""
    with PolicyClient("pi05", url=server.url_template) as client:
        metadata = client.get_server_metadata()
        big = np.zeros((1024, 1024, 3), np.uint8)
        reply = client.infer(pi_observation(metadata, images={"base_0_rgb": big}))
        assert isinstance(reply, np.ndarray)


def test_dropped_client_is_closed_by_its_idle_servicer(server: ServerHandle) -> None:
    closed = server.stats.connections_closed
    threads = threading.active_count()
    client = PolicyClient("pi05", url=server.url_template)
    client.infer(pi_observation(client.get_server_metadata()))
    del client
    gc.collect()
    assert server.wait_closed_connections(closed + 1)
    assert wait_until(lambda: threading.active_count() == threads)


# --- wss:// ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for localhost (made with the openssl CLI)."""
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("the openssl command is needed to make a test certificate")
    directory = tmp_path_factory.mktemp("tls")
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(
        [
            *(openssl, "req", "-x509", "-nodes", "-days", "2", "-subj", "/CN=localhost"),
            *("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"),
            *("-keyout", str(key), "-out", str(cert)),
            *("-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"),
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


@contextlib.contextmanager
def tls_front(backend_port: int, cert: Path, key: Path) -> Iterator[int]:
    """A TLS terminator on 127.0.0.1 in front of a plain server (like a cloud proxy)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    ready = threading.Event()
    state: dict[str, Any] = {}

    async def pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except OSError:
            pass
        finally:
            writer.close()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        back_reader, back_writer = await asyncio.open_connection("127.0.0.1", backend_port)
        await asyncio.gather(pump(reader, back_writer), pump(back_reader, writer))

    async def main() -> None:
        front = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=context)
        loop = asyncio.get_running_loop()
        state["port"] = front.sockets[0].getsockname()[1]
        state["stop"] = (loop, loop.create_future())
        ready.set()
        async with front:
            await state["stop"][1]

    thread = threading.Thread(target=asyncio.run, args=(main(),), daemon=True)
    thread.start()
    ready.wait(5)
    try:
        yield int(state["port"])
    finally:
        loop, done = state["stop"]
        loop.call_soon_threadsafe(done.set_result, None)
        thread.join(5)


def test_wss_through_tls(
    server: ServerHandle, certificate: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    cert, key = certificate
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))  # trust the test certificate
    with tls_front(server.port, cert, key) as port:
        with PolicyClient("pi05", url=f"wss://localhost:{port}/{{model}}") as client:
            actions = client.infer(pi_observation(client.get_server_metadata()))
            assert isinstance(actions, np.ndarray)
            assert client.infer({"state": 1}) == {
                "type": "error",
                "message": "Internal inference error",
            }


def test_wss_with_an_untrusted_certificate_raises_oserror(
    server: ServerHandle, certificate: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    cert, key = certificate
    monkeypatch.setenv("SSL_CERT_FILE", str(Path(cert).parent / "none.pem"))
    monkeypatch.setenv("SSL_CERT_DIR", str(Path(cert).parent))
    with tls_front(server.port, cert, key) as port:
        with pytest.raises(ssl.SSLCertVerificationError) as info:
            PolicyClient("pi05", url=f"wss://localhost:{port}/{{model}}")
    assert isinstance(info.value, OSError)


def test_wss_server_offering_a_plain_ws_direct_route_is_not_followed(
    certificate: tuple[Path, Path],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A TLS connection never continues over plain TCP: the direct route is refused,
    the proxied (TLS) connection kept, and the log says why."""
    cert, key = certificate
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    with (
        serving(models=("pi05",)) as direct,
        serving(models=("pi05",), direct_url=direct.url("pi05")) as proxy,
        tls_front(proxy.port, cert, key) as port,
    ):
        with PolicyClient("pi05", url=f"wss://localhost:{port}/{{model}}") as client:
            assert client.url == f"wss://localhost:{port}/pi05"
            metadata = client.get_server_metadata()
            assert metadata["direct_url"] == direct.url("pi05")  # offered, as the server said
            assert isinstance(client.infer(pi_observation(metadata)), np.ndarray)
            assert proxy.stats.frames == 1
        assert direct.stats.connections_opened == 0
    assert "it would leave TLS (wss:// to ws://)" in caplog.text


def test_plain_ws_server_may_offer_a_wss_or_ws_direct_route() -> None:
    """Only a downgrade is refused: ws:// -> ws:// is followed as before."""
    with (
        serving(models=("pi05",)) as direct,
        serving(models=("pi05",), direct_url=direct.url("pi05")) as proxy,
    ):
        with PolicyClient("pi05", url=proxy.url_template) as client:
            assert client.url == direct.url("pi05")
