"""The reference policy server over a real loopback WebSocket (websockets' sync client + codec).

Every error of the troubleshooting seed is asserted with its exact message, followed
by a valid request on the same connection to show it stayed open.
"""

from __future__ import annotations

import functools
import http.client
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import cv2
import numpy as np
import pytest
from helpers import groot_observation, pi_observation, scaled
from websockets.exceptions import ConnectionClosed, ConnectionClosedError, InvalidStatus
from websockets.sync.client import ClientConnection, connect

from relay_ros.server import ServerHandle, ServerOptions, ServerStartError, run_server_in_thread
from relay_ros.wire.codec import packb, unpackb

INTERNAL = {"type": "error", "message": "Internal inference error"}
PAYLOAD = {"type": "error", "message": "Invalid request payload"}
ADAPTERS = ("towels", "cups")
TIMEOUT = scaled(10.0)  # generous: the machine is shared


@pytest.fixture(scope="module")
def server() -> Iterator[ServerHandle]:
    options = ServerOptions(lora_adapters=ADAPTERS, max_message_mib=1.0, idle_timeout_s=60.0)
    with run_server_in_thread(options) as handle:
        yield handle


def open_ws(handle: ServerHandle, model: str = "pi05") -> tuple[ClientConnection, dict[str, Any]]:
    ws = connect(handle.url(model), compression=None, max_size=None, open_timeout=TIMEOUT)
    # Entering marks the connection as context-managed (websockets >= 17.1 warns otherwise);
    # callers close it with `with ws:` or ws.close().
    ws.__enter__()
    return ws, unpackb(ws.recv(timeout=TIMEOUT))


def ask(ws: ClientConnection, frame: Any) -> Any:
    ws.send(frame if isinstance(frame, (bytes, str)) else packb(frame))
    return unpackb(ws.recv(timeout=TIMEOUT))


# Two cameras of seeded random pixels; GR00T frames smaller than the metadata's.
pi_obs = functools.partial(
    pi_observation, cameras=("base_0_rgb", "left_wrist_0_rgb"), random=True, prompt="fold the towel"
)
groot_obs = functools.partial(
    groot_observation, image_size=(64, 80), state_value=0.1, prompt="pick the cube"
)


def assert_pi_actions(reply: Any, meta: dict[str, Any]) -> None:
    assert set(reply) == {"actions", "server_timing"}, reply
    actions = reply["actions"]
    assert actions.dtype == np.float32
    assert actions.shape == (meta["action_horizon"], meta["action_dim"])
    assert isinstance(reply["server_timing"]["infer_ms"], float)


def ndarray_map(data: bytes, dtype: str, shape: list[int]) -> bytes:
    """An openpi ndarray map written by hand (the codec refuses to build bad ones)."""
    return (
        b"\x84"  # fixmap, 4 entries
        b"\xc4\x0b__ndarray__\xc3"  # b"__ndarray__": true
        b"\xc4\x04data\xc4" + bytes([len(data)]) + data  # b"data": bin8
        + b"\xc4\x05dtype" + bytes([0xA0 | len(dtype)]) + dtype.encode()  # b"dtype": fixstr
        + b"\xc4\x05shape" + bytes([0x90 | len(shape)]) + bytes(shape)  # b"shape": fixarray
    )  # fmt: skip


# ---------------------------------------------------------------- metadata / paths


def test_metadata_pi05_and_pi0_exact(server: ServerHandle) -> None:
    for model in ("pi05", "pi0"):
        ws, meta = open_ws(server, model)
        ws.close()
        assert meta == {
            "protocol": 1,
            "model": model,
            "action_horizon": 50,
            "image_size": [224, 224],
            "needs_session_id": False,
            "control_hz": 50.0,
            "lora_adapters": list(ADAPTERS),
            "action_dim": 32,
            "max_cameras": 3,
            "action_space": "joint_position",
        }


def test_metadata_groot_exact(server: ServerHandle) -> None:
    ws, meta = open_ws(server, "groot")
    ws.close()
    assert meta == {
        "protocol": 1,
        "model": "groot",
        "action_horizon": 16,
        "image_size": [224, 224],
        "needs_session_id": False,
        "control_hz": 30.0,
        "lora_adapters": list(ADAPTERS),
        "action_keys": ["action.single_arm", "action.gripper"],
        "embodiment": "so100",
        "state_keys": {"state.single_arm": 5, "state.gripper": 1},
        "video_keys": ["video.front", "video.wrist"],
    }


def test_unknown_model_is_http_404(server: ServerHandle) -> None:
    with pytest.raises(InvalidStatus) as info:
        connect(server.url("pi7"), open_timeout=TIMEOUT)
    assert info.value.response.status_code == 404
    assert "HTTP 404" in str(info.value)


def test_healthz_is_http_200(server: ServerHandle) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=TIMEOUT)
    try:
        conn.request("GET", "/healthz")
        response = conn.getresponse()
        assert response.status == 200
        assert response.read() == b"OK\n"
    finally:
        conn.close()


def test_direct_url_in_metadata() -> None:
    options = ServerOptions(models=("pi05",), direct_url="ws://10.0.0.7:9000/pi05")
    with run_server_in_thread(options) as handle:
        ws, meta = open_ws(handle)
        ws.close()
    assert meta["direct_url"] == "ws://10.0.0.7:9000/pi05"
    assert meta["lora_adapters"] == []


def test_handle_urls_and_counters(server: ServerHandle) -> None:
    assert server.url("groot") == f"ws://127.0.0.1:{server.port}/groot"
    assert server.url_template == f"ws://127.0.0.1:{server.port}/{{model}}"
    before = server.stats.connections_closed
    ws, _ = open_ws(server)
    assert server.stats.wait_for(lambda s: s.open_connections >= 1, TIMEOUT)
    ws.close()
    assert server.wait_closed_connections(before + 1, TIMEOUT)


# ------------------------------------------------------------------- π0 / π0.5


def test_pi05_actions_and_timing(server: ServerHandle) -> None:
    ws, meta = open_ws(server)
    with ws:
        reply = ask(ws, pi_obs())
        assert_pi_actions(reply, meta)
        actions = reply["actions"]
        assert np.all(np.abs(actions) <= 0.8)
        # The chunk starts at the observed state and then moves visibly.
        assert np.max(np.abs(actions[0] - pi_obs()["state"])) < 0.1
        assert np.max(np.abs(actions[-1] - actions[0])) > 0.1


def test_pi_state_shaped_1x32_and_float_frames_and_jpeg(server: ServerHandle) -> None:
    ws, meta = open_ws(server, "pi0")
    img = np.random.default_rng(1).integers(0, 255, (120, 160, 3), dtype=np.uint8)
    ok, jpeg = cv2.imencode(".jpg", img)
    assert ok
    images = {
        "base_0_rgb": jpeg.tobytes(),  # JPEG bytes are accepted for π0/π0.5
        "left_wrist_0_rgb": img.astype(np.float32) / 255.0,  # floats in [0, 1]
        "right_wrist_0_rgb": img,
    }
    with ws:
        reply = ask(ws, pi_obs(images=images, state=np.zeros((1, 32), np.float32)))
        assert_pi_actions(reply, meta)


def _bad_pi_cases() -> dict[str, Callable[[dict[str, Any]], None]]:
    img = np.zeros((224, 224, 3), np.uint8)

    def set_images(images: Any) -> Callable[[dict[str, Any]], None]:
        return lambda obs: obs.__setitem__("images", images)

    def set_state(state: Any) -> Callable[[dict[str, Any]], None]:
        return lambda obs: obs.__setitem__("state", state)

    nan_frame = np.full((8, 8, 3), 0.5, np.float32)
    nan_frame[0, 0, 0] = np.nan
    inf_state = np.zeros(32, np.float32)
    inf_state[3] = np.inf
    nan_state = np.zeros(32, np.float32)
    nan_state[0] = np.nan
    return {
        "state_31": set_state(np.zeros(31, np.float32)),
        "state_2x32": set_state(np.zeros((2, 32), np.float32)),
        "state_missing": lambda obs: obs.pop("state"),
        "state_text": set_state("0 0 0"),
        "no_cameras": set_images({}),
        "images_not_a_map": set_images([img]),
        "misspelled_camera_key": set_images({"base_rgb": img}),
        "one_misspelled_among_good": set_images({"base_0_rgb": img, "left_wrist_rgb": img}),
        "channel_first": set_images({"base_0_rgb": np.zeros((3, 224, 224), np.uint8)}),
        "grayscale_2d": set_images({"base_0_rgb": np.zeros((224, 224), np.uint8)}),
        "grayscale_1_channel": set_images({"base_0_rgb": np.zeros((224, 224, 1), np.uint8)}),
        "floats_0_255": set_images({"base_0_rgb": np.full((8, 8, 3), 200.0, np.float32)}),
        "negative_floats": set_images({"base_0_rgb": np.full((8, 8, 3), -0.1, np.float32)}),
        "int16_frame": set_images({"base_0_rgb": np.zeros((8, 8, 3), np.int16)}),
        "nan_in_float_frame": set_images({"base_0_rgb": nan_frame}),
        "nan_in_state": set_state(nan_state),
        "inf_in_state": set_state(inf_state),
        "not_jpeg_bytes": set_images({"base_0_rgb": b"\x89PNG\r\n\x1a\n"}),
        "corrupt_jpeg_bytes": set_images({"base_0_rgb": b"\xff\xd8\xff\xe0garbage"}),
        "prompt_not_text": lambda obs: obs.__setitem__("prompt", 5),
        "seed_not_int": lambda obs: obs.__setitem__("seed", "7"),
        "sampling_params_not_map": lambda obs: obs.__setitem__("sampling_params", 3),
    }


@pytest.mark.parametrize("case", sorted(_bad_pi_cases()))
def test_pi_internal_inference_error_then_connection_still_works(
    server: ServerHandle, case: str
) -> None:
    ws, meta = open_ws(server)
    with ws:
        obs = pi_obs()
        _bad_pi_cases()[case](obs)
        assert ask(ws, obs) == INTERNAL
        assert_pi_actions(ask(ws, pi_obs()), meta)


def test_internal_detail_is_logged_not_sent(
    server: ServerHandle, caplog: pytest.LogCaptureFixture
) -> None:
    ws, _ = open_ws(server)
    with ws, caplog.at_level("WARNING", logger="relay_ros.server.policy_server"):
        reply = ask(ws, pi_obs(state=np.zeros(31, np.float32)))
    assert reply == INTERNAL  # nothing beyond the fixed message
    assert "state has shape (31,); expected (32,) or (1, 32)" in caplog.text


# ---------------------------------------------------------------------- GR00T


def test_groot_actions_per_group(server: ServerHandle) -> None:
    ws, meta = open_ws(server, "groot")
    with ws:
        reply = ask(ws, groot_obs(meta))
    actions = reply["actions"]
    assert list(actions) == meta["action_keys"]
    assert actions["action.single_arm"].shape == (1, 16, 5)
    assert actions["action.gripper"].shape == (1, 16, 1)
    for arr in actions.values():
        assert arr.dtype == np.float32 and not arr.flags.writeable
        assert np.all(np.abs(arr) <= 0.8)
    # Action 0 starts at the observed state (0.1 everywhere).
    assert np.max(np.abs(actions["action.single_arm"][0, 0] - 0.1)) < 0.1


def _bad_groot_cases() -> dict[str, Callable[[dict[str, Any]], None]]:
    def video(obs: dict[str, Any], value: Any) -> None:
        obs["video"]["video.front"] = value

    def state(obs: dict[str, Any], value: Any) -> None:
        obs["state"]["state.single_arm"] = value

    ok, jpeg = cv2.imencode(".jpg", np.zeros((32, 32, 3), np.uint8))
    assert ok
    return {
        "video_not_a_map": lambda obs: obs.__setitem__("video", [np.zeros((1, 8, 8, 3))]),
        "state_not_a_map": lambda obs: obs.__setitem__("state", np.zeros((1, 6), np.float32)),
        "missing_video_key": lambda obs: obs["video"].pop("video.wrist"),
        "unknown_video_key": lambda obs: obs["video"].__setitem__(
            "video.top", np.zeros((1, 8, 8, 3), np.uint8)
        ),
        "missing_state_key": lambda obs: obs["state"].pop("state.gripper"),
        "frame_without_batch": lambda obs: video(obs, np.zeros((64, 80, 3), np.uint8)),
        "frame_channel_first": lambda obs: video(obs, np.zeros((1, 3, 64, 80), np.uint8)),
        "frame_float": lambda obs: video(obs, np.zeros((1, 64, 80, 3), np.float32)),
        "frame_jpeg_bytes": lambda obs: video(obs, jpeg.tobytes()),
        "state_wrong_width": lambda obs: state(obs, np.zeros((1, 4), np.float32)),
        "state_without_batch": lambda obs: state(obs, np.zeros(5, np.float32)),
        "state_nan": lambda obs: state(obs, np.full((1, 5), np.nan, np.float32)),
    }


@pytest.mark.parametrize("case", sorted(_bad_groot_cases()))
def test_groot_internal_inference_error_then_connection_still_works(
    server: ServerHandle, case: str
) -> None:
    ws, meta = open_ws(server, "groot")
    with ws:
        obs = groot_obs(meta)
        _bad_groot_cases()[case](obs)
        assert ask(ws, obs) == INTERNAL
        assert set(ask(ws, groot_obs(meta))["actions"]) == set(meta["action_keys"])


# ----------------------------------------------------------- invalid payloads


@pytest.mark.parametrize(
    "frame",
    [
        pytest.param(b"\xc1", id="not_msgpack"),
        pytest.param(b"\x92\x01", id="truncated_msgpack"),
        pytest.param(packb([1, 2, 3]), id="list_not_map"),
        pytest.param(packb("observation"), id="string_not_map"),
        pytest.param(packb(np.zeros(3, np.float32)), id="bare_array_not_map"),
        pytest.param(b"\x81\xa5state" + ndarray_map(b"\x00" * 8, "|O", [1]), id="object_array"),
        pytest.param(
            b"\x81\xa5state" + ndarray_map(b"\x00" * 8, "|V8", [1]), id="structured_array"
        ),
        pytest.param(b"\x81\xa5state" + ndarray_map(b"\x00" * 8, "<c8", [1]), id="complex_array"),
        pytest.param(b"\x81\xa5state" + ndarray_map(b"\x00" * 7, "<f4", [2]), id="short_data"),
        pytest.param("text frame", id="text_frame"),
        pytest.param(packb({"type": "shutdown"}), id="unknown_control"),
    ],
)
def test_invalid_request_payload_then_connection_still_works(
    server: ServerHandle, frame: bytes | str
) -> None:
    ws, meta = open_ws(server)
    with ws:
        assert ask(ws, frame) == PAYLOAD
        assert_pi_actions(ask(ws, pi_obs()), meta)


def test_frame_over_max_message_size_is_invalid_payload(server: ServerHandle) -> None:
    # The module server allows 1 MiB; the hard cap is 2 MiB.
    ws, meta = open_ws(server)
    big = pi_obs(images={"base_0_rgb": np.zeros((640, 640, 3), np.uint8)})  # ~1.2 MiB
    with ws:
        assert ask(ws, big) == PAYLOAD
        assert_pi_actions(ask(ws, pi_obs()), meta)


def test_frame_over_hard_cap_closes_with_1009(server: ServerHandle) -> None:
    ws, _ = open_ws(server)
    with pytest.raises(ConnectionClosedError) as info:  # noqa: PT012
        ws.send(b"\x00" * (3 * 1024 * 1024))
        ws.recv(timeout=TIMEOUT)
    assert info.value.rcvd is not None and info.value.rcvd.code == 1009
    ws.close()
    ws2, meta = open_ws(server)  # the server itself is fine
    with ws2:
        assert_pi_actions(ask(ws2, pi_obs()), meta)


def test_random_garbage_never_crashes_the_server(server: ServerHandle) -> None:
    rng = np.random.default_rng(42)
    ws, meta = open_ws(server)
    with ws:
        for _ in range(60):
            frame = rng.integers(0, 256, int(rng.integers(1, 200)), dtype=np.uint8).tobytes()
            reply = ask(ws, frame)
            assert reply in (PAYLOAD, INTERNAL), reply
        assert_pi_actions(ask(ws, pi_obs()), meta)


def test_random_observation_values_never_crash_the_server(server: ServerHandle) -> None:
    rng = np.random.default_rng(7)
    junk: list[Any] = [
        None, True, 3, -1.5, "x", b"\xff\xd8\xff", [], [1, [2, "a"]], {}, {"a": {"b": None}},
        np.zeros((2, 2, 2), np.float32), np.zeros(0, np.uint8), np.array(["a", "b"]),
        np.zeros((1, 5), np.int64), np.array([np.nan], np.float16), np.zeros((224, 224, 3), ">f8"),
        [[1.0] * 32], [0.1] * 32, np.zeros((5, 0, 3), np.uint8), np.uint8(3), 2**63,
    ]  # fmt: skip
    keys = ["images", "state", "video", "prompt", "seed", "session_id", "sampling_params"]
    for model in ("pi05", "groot"):
        ws, meta = open_ws(server, model)
        with ws:
            for _ in range(80):
                obs: dict[str, Any] = pi_obs() if model == "pi05" else groot_obs(meta)
                for _ in range(int(rng.integers(1, 3))):
                    key = keys[int(rng.integers(len(keys)))]
                    value = junk[int(rng.integers(len(junk)))]
                    target = obs
                    if isinstance(obs.get(key), dict) and rng.random() < 0.5:
                        target = obs[key]
                        key = next(iter(target)) if target and rng.random() < 0.7 else "k"
                    target[key] = value
                reply = ask(ws, obs)
                assert "actions" in reply or reply.get("type") == "error", reply
            ok = ask(ws, pi_obs() if model == "pi05" else groot_obs(meta))
            assert "actions" in ok


def test_client_vanishing_mid_request_does_not_hurt_others(server: ServerHandle) -> None:
    other, meta = open_ws(server)
    with other:
        rude, _ = open_ws(server)
        rude.send(packb(pi_obs()))
        rude.close_socket()  # no closing handshake, reply undeliverable
        for _ in range(3):
            assert_pi_actions(ask(other, pi_obs()), meta)


# ---------------------------------------------------------------------- LoRA


@pytest.mark.parametrize(
    ("lora", "message"),
    [
        ("x", "Unknown LoRA adapter 'x'; this server serves ['towels', 'cups']"),
        ({"name": "nope", "scale": 1.0}, "Unknown LoRA adapter 'nope'; this server serves "
         "['towels', 'cups']"),
        ({"name": "towels", "scale": "big"}, "lora scale must be a number"),
        ({"name": "towels", "scale": float("nan")}, "lora scale must be a number"),
        ({"name": "towels", "scale": float("inf")}, "lora scale must be a number"),
        ({"name": "towels", "scale": True}, "lora scale must be a number"),
        ({"name": "towels", "scale": None}, "lora scale must be a number"),
    ],
)  # fmt: skip
def test_lora_errors_exact(server: ServerHandle, lora: Any, message: str) -> None:
    ws, meta = open_ws(server)
    with ws:
        reply = ask(ws, pi_obs(sampling_params={"lora": lora}))
        assert reply == {"type": "error", "message": message}
        assert_pi_actions(ask(ws, pi_obs()), meta)


@pytest.mark.parametrize(
    "lora", ["towels", {"name": "cups", "scale": 0.5}, {"name": "cups"}, False, None]
)
def test_lora_accepted(server: ServerHandle, lora: Any) -> None:
    ws, meta = open_ws(server)
    with ws:
        assert_pi_actions(ask(ws, pi_obs(sampling_params={"lora": lora}, seed=1)), meta)


def test_lora_unknown_on_base_only_server() -> None:
    with run_server_in_thread(ServerOptions(models=("groot",))) as handle:
        ws, meta = open_ws(handle, "groot")
        with ws:
            obs = groot_obs(meta)
            obs["sampling_params"] = {"lora": "x"}
            assert ask(ws, obs) == {
                "type": "error",
                "message": "Unknown LoRA adapter 'x'; this server serves []",
            }


# -------------------------------------------------------- sessions and seeds


def test_reset_counts_sessions_on_this_connection(server: ServerHandle) -> None:
    ws, _ = open_ws(server)
    other, _ = open_ws(server)
    with ws, other:
        assert ask(ws, {"type": "reset"}) == {"type": "reset", "sessions_cleared": 0}
        ask(ws, pi_obs())  # default session
        ask(ws, pi_obs(session_id="a"))
        ask(ws, pi_obs(session_id="b"))
        ask(ws, pi_obs(session_id="a"))
        ask(other, pi_obs(session_id="c"))
        assert ask(ws, {"type": "reset"}) == {"type": "reset", "sessions_cleared": 3}
        assert ask(ws, {"type": "reset"}) == {"type": "reset", "sessions_cleared": 0}
        assert ask(other, {"type": "reset"}) == {"type": "reset", "sessions_cleared": 1}


def test_needs_session_id() -> None:
    options = ServerOptions(models=("pi05",), needs_session_id=True)
    with run_server_in_thread(options) as handle:
        ws, meta = open_ws(handle)
        with ws:
            assert meta["needs_session_id"] is True
            assert ask(ws, pi_obs()) == INTERNAL
            assert_pi_actions(ask(ws, pi_obs(session_id="ep-1")), meta)


def test_same_seed_same_actions_no_seed_different(server: ServerHandle) -> None:
    ws, _ = open_ws(server)
    other, _ = open_ws(server)
    with ws, other:
        a = ask(ws, pi_obs(seed=7))["actions"]
        b = ask(ws, pi_obs(seed=7))["actions"]
        c = ask(other, pi_obs(seed=7))["actions"]  # another connection, same answer
        d = ask(ws, pi_obs(seed=8))["actions"]
        e = ask(ws, pi_obs())["actions"]
        f = ask(ws, pi_obs())["actions"]
    assert np.array_equal(a, b) and np.array_equal(a, c)
    assert not np.array_equal(a, d)
    assert not np.array_equal(e, f)


def test_groot_seed_determinism(server: ServerHandle) -> None:
    ws, meta = open_ws(server, "groot")
    with ws:
        obs = groot_obs(meta)
        obs["seed"] = -3
        a = ask(ws, obs)["actions"]
        b = ask(ws, obs)["actions"]
    for key in meta["action_keys"]:
        assert np.array_equal(a[key], b[key])


# ------------------------------------------------------- lifetime and timing


@pytest.mark.slow
def test_load_delay_holds_metadata() -> None:
    options = ServerOptions(models=("pi05",), load_delay_s=1.5)
    with run_server_in_thread(options) as handle:
        start = time.monotonic()
        ws = connect(handle.url("pi05"), open_timeout=TIMEOUT)
        with ws:
            with pytest.raises(TimeoutError):
                ws.recv(timeout=0.3)  # still "loading"
            meta = unpackb(ws.recv(timeout=TIMEOUT))
        assert time.monotonic() - start >= 1.0
        assert meta["model"] == "pi05"


def test_idle_connection_is_closed() -> None:
    options = ServerOptions(models=("pi05",), idle_timeout_s=0.5)
    with run_server_in_thread(options) as handle:
        ws, meta = open_ws(handle)
        assert_pi_actions(ask(ws, pi_obs()), meta)  # activity resets the clock
        with pytest.raises(ConnectionClosed) as info:
            ws.recv(timeout=TIMEOUT)
        assert info.value.rcvd is not None and info.value.rcvd.code == 1000
        assert handle.wait_closed_connections(1, TIMEOUT)
        assert handle.stats.open_connections == 0


def test_simulated_latency_reported_in_server_timing() -> None:
    options = ServerOptions(models=("pi05",), latency_ms=150.0, jitter_ms=20.0)
    with run_server_in_thread(options) as handle:
        ws, _ = open_ws(handle)
        with ws:
            timing = ask(ws, pi_obs())["server_timing"]
    assert timing["infer_ms"] >= 130.0


# -------------------------------------------------------------- custom policy


class _ConstantPolicy:
    """A stand-in model: fixed actions, a metadata override and a reset counter."""

    metadata = {"action_horizon": 10}

    def __init__(self) -> None:
        self.resets = 0
        self.seen: list[str] = []

    def infer(self, obs: dict[str, Any]) -> dict[str, Any]:
        if obs.get("prompt") == "explode":
            raise RuntimeError("model blew up")
        if obs.get("prompt") == "unencodable":
            return {"actions": np.zeros(2, np.complex64)}
        self.seen.append(obs["prompt"])
        return {"actions": np.ones((10, 32), np.float32), "policy_timing": {"infer_ms": 1.0}}

    def reset(self) -> None:
        self.resets += 1


def test_custom_policy_object() -> None:
    policy = _ConstantPolicy()
    with run_server_in_thread(ServerOptions(models=("pi05",), policy=lambda: policy)) as handle:
        ws, meta = open_ws(handle)
        with ws:
            assert meta["action_horizon"] == 10
            reply = ask(ws, pi_obs())
            assert np.array_equal(reply["actions"], np.ones((10, 32), np.float32))
            assert reply["policy_timing"] == {"infer_ms": 1.0}
            assert "infer_ms" in reply["server_timing"]
            assert ask(ws, pi_obs(prompt="explode")) == INTERNAL  # logged, not sent
            assert ask(ws, pi_obs(prompt="unencodable")) == INTERNAL
            assert ask(ws, pi_obs(state=np.zeros(3, np.float32))) == INTERNAL  # still validated
            assert ask(ws, {"type": "reset"}) == {"type": "reset", "sessions_cleared": 1}
            assert ask(ws, pi_obs(prompt="again"))["actions"].shape == (10, 32)
    assert policy.resets == 1
    assert policy.seen == ["fold the towel", "again"]


def test_custom_policy_from_module_spec(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "my_policy_mod.py").write_text(
        "import numpy as np\n"
        "class P:\n"
        "    def infer(self, obs):\n"
        "        return np.full((50, 32), 0.25, np.float32)\n"
        "def make():\n"
        "    return P()\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        options = ServerOptions(models=("pi0",), policy="my_policy_mod:make")
        with run_server_in_thread(options) as handle:
            ws, _ = open_ws(handle, "pi0")
            with ws:
                assert float(ask(ws, pi_obs())["actions"][0, 0]) == 0.25
        with pytest.raises(ServerStartError, match="'my_policy_mod:missing'"):
            run_server_in_thread(ServerOptions(policy="my_policy_mod:missing")).__enter__()
    finally:
        sys.modules.pop("my_policy_mod", None)
