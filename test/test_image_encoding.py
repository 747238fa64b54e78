"""JPEG on the wire: encode_frame / encode_images, and what the reference server makes of them."""

from __future__ import annotations

import io
from collections.abc import Iterator

import numpy as np
import pytest
from PIL import Image

from relay_ros import PolicyClient
from relay_ros.pipeline.image_encoding import (
    DEFAULT_JPEG_QUALITY,
    ImageEncodingError,
    check_image_encoding,
    decode_jpeg,
    encode_frame,
    encode_images,
    encode_jpeg,
)
from relay_ros.pipeline.images import resize_with_pad
from relay_ros.server import ServerHandle, ServerOptions, run_server_in_thread
from relay_ros.sim.link import LinkThread
from relay_ros.sim.scene import SceneRenderer

PI_CAMERAS = ("base_0_rgb", "left_wrist_0_rgb", "right_wrist_0_rgb")


@pytest.fixture(scope="module")
def server() -> Iterator[ServerHandle]:
    with run_server_in_thread(ServerOptions()) as handle:
        yield handle


def scene_frames(t: float = 0.5) -> dict[str, np.ndarray]:
    return {key: SceneRenderer(640, 480, seed=0, camera_name=key).render(t) for key in PI_CAMERAS}


def test_jpeg_frame_is_the_fitted_frame_compressed() -> None:
    frame = scene_frames()["base_0_rgb"]
    data = encode_frame(frame, [224, 224])
    assert isinstance(data, bytes) and data[:3] == b"\xff\xd8\xff"
    decoded = decode_jpeg(data)
    fitted = resize_with_pad(frame, 224, 224)
    assert decoded.shape == (224, 224, 3)
    error = np.abs(decoded.astype(np.int16) - fitted.astype(np.int16))
    assert error.mean() < 2.0
    assert len(data) < 20_000


def test_jpeg_holds_rgb_the_standard_way() -> None:
    red = np.zeros((64, 64, 3), np.uint8)
    red[..., 0] = 220  # R
    decoded = np.asarray(Image.open(io.BytesIO(encode_jpeg(red))).convert("RGB"))
    assert decoded[..., 0].mean() > 200 and decoded[..., 2].mean() < 20


def test_raw_encoding_is_the_resized_array() -> None:
    frame = scene_frames()["left_wrist_0_rgb"]
    raw = encode_frame(frame, (224, 224), encoding="raw")
    assert isinstance(raw, np.ndarray) and raw.flags.c_contiguous
    np.testing.assert_array_equal(raw, resize_with_pad(frame, 224, 224))


def test_bad_arguments_name_the_value() -> None:
    frame = np.zeros((48, 64, 3), np.uint8)
    with pytest.raises(ImageEncodingError, match=r"jpeg_quality 0 is outside \[1, 100\]"):
        encode_frame(frame, (224, 224), quality=0)
    with pytest.raises(ImageEncodingError, match=r"jpeg_quality 90.0 is not an integer"):
        encode_frame(frame, (224, 224), quality=90.0)  # type: ignore[arg-type]
    with pytest.raises(ImageEncodingError, match=r"encoding 'png' is unknown"):
        encode_frame(frame, (224, 224), encoding="png")
    with pytest.raises(ImageEncodingError, match=r"image_size \[224\] is not \[height, width\]"):
        encode_frame(frame, [224])
    with pytest.raises(ImageEncodingError, match=r"camera 'wrist': frame has shape \(48, 64\)"):
        encode_images({"wrist": np.zeros((48, 64), np.uint8)}, (224, 224))
    with pytest.raises(ImageEncodingError, match=r"frame has dtype float32; expected uint8"):
        encode_jpeg(np.zeros((8, 8, 3), np.float32))


def test_jpeg_with_groot_is_a_configuration_error() -> None:
    check_image_encoding("pi05", "jpeg", 90)
    check_image_encoding("groot", "raw")
    with pytest.raises(
        ImageEncodingError,
        match=r"image_encoding 'jpeg' does not work with model 'groot': its server takes raw "
        r"arrays only; use image_encoding 'raw'",
    ):
        check_image_encoding("groot", "jpeg")
    with pytest.raises(ImageEncodingError, match=r"image_encoding 'webp' is unknown"):
        check_image_encoding("pi0", "webp")


def test_reference_server_accepts_jpeg_frames(server: ServerHandle) -> None:
    with PolicyClient("pi05", url=server.url("pi05")) as client:
        meta = client.get_server_metadata()
        obs = {
            "images": encode_images(scene_frames(), meta["image_size"]),
            "state": np.zeros(meta["action_dim"], np.float32),
            "prompt": "pick",
        }
        actions = client.infer(obs)
    assert isinstance(actions, np.ndarray)
    assert actions.shape == (meta["action_horizon"], meta["action_dim"])


def test_jpeg_request_is_small_and_fast_over_wan(server: ServerHandle) -> None:
    """Bytes on the wire per request (WebSocket framing included), raw vs JPEG."""
    with LinkThread("wan", ("127.0.0.1", server.port), lifetime_s=60, seed=7) as link:
        with PolicyClient("pi05", url=link.proxied_url(server.url("pi05"))) as client:
            meta = client.get_server_metadata()
            state = np.zeros(meta["action_dim"], np.float32)
            sent: dict[str, int] = {}
            times: dict[str, float] = {}
            for encoding in ("raw", "jpeg"):
                images = encode_images(scene_frames(), meta["image_size"], encoding=encoding)
                before = link.stats().bytes_up
                reply = client.infer_reply({"images": images, "state": state, "prompt": "pick"})
                assert reply.roundtrip_s is not None
                times[encoding] = reply.roundtrip_s
                sent[encoding] = link.stats().bytes_up - before
    assert sent["raw"] > 450_000
    assert sent["jpeg"] <= 60_000, f"{sent['jpeg']} bytes at quality {DEFAULT_JPEG_QUALITY}"
    assert times["jpeg"] < times["raw"]


def _node_values(model: str, **change: object) -> dict:
    import yaml

    from relay_ros.paths import config_dir

    data = yaml.safe_load((config_dir() / f"{model}.yaml").read_text())
    from relay_ros.node.param_spec import flatten_parameters

    values = flatten_parameters(data["/**"]["ros__parameters"])
    values.update(change)
    return values


def test_node_parameters_image_encoding() -> None:
    from relay_ros.node.node_config import build_config
    from relay_ros.node.param_spec import ParameterError

    assert build_config(_node_values("pi05")).image_encoding == "raw"
    config = build_config(_node_values("pi0", image_encoding="jpeg", jpeg_quality=80))
    assert (config.image_encoding, config.jpeg_quality) == ("jpeg", 80)
    with pytest.raises(
        ParameterError,
        match=r"parameter image_encoding 'jpeg' does not work with model 'groot': its server "
        r"takes raw arrays only",
    ):
        build_config(_node_values("groot", image_encoding="jpeg"))
    with pytest.raises(
        ParameterError, match=r"'jpeg_quality' is 0; expected an integer from 1 to 100"
    ):
        build_config(_node_values("pi05", image_encoding="jpeg", jpeg_quality=0))
    with pytest.raises(ParameterError, match="'image_encoding' is 'png'; expected one of"):
        build_config(_node_values("pi05", image_encoding="png"))
