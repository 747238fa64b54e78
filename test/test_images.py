"""Image conversion: real rclpy and rosbags messages, checked against rosbags-image.

``rosbags.image.message_to_cvimage`` is an independent implementation (it accepts rclpy
messages). It ignores ``step``, so for padded rows it is given the same buffer described
as a wider image (width = step / channels) and its result is cropped, and also the
unpadded twin of the message.
"""

from __future__ import annotations

import logging
import re
import struct

import cv2
import numpy as np
import pytest
from PIL import Image as PILImage
from rosbags.image import compressed_image_to_cvimage, message_to_cvimage
from rosbags.typesys import Stores, get_typestore

try:
    from sensor_msgs.msg import CompressedImage, Image
except ImportError:  # the ROS-free compat venvs (docs/compat.md): same fields, plain objects

    class _Header:
        def __init__(self) -> None:
            self.frame_id = ""

    class Image:  # type: ignore[no-redef]
        def __init__(self) -> None:
            self.header = _Header()
            self.height = self.width = self.step = self.is_bigendian = 0
            self.encoding = ""
            self.data = b""

    class CompressedImage:  # type: ignore[no-redef]
        def __init__(self) -> None:
            self.header = _Header()
            self.format = ""
            self.data = b""


from relay_ros.pipeline.images import (
    MAX_FRAME_PIXELS,
    SUPPORTED_ENCODINGS,
    FrameTooLargeError,
    ImageConversionError,
    compressed_size,
    compressed_to_rgb,
    cv_bridge_available,
    image_to_rgb,
    jpeg_size,
    parse_image_size,
    png_size,
    resize_with_pad,
)
from relay_ros.sim.scene import SceneRenderer

ENCODINGS = list(SUPPORTED_ENCODINGS)


def pixels(height: int, width: int, channels: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    shape = (height, width) if channels == 1 else (height, width, channels)
    return rng.integers(0, 256, size=shape, dtype=np.uint8)


def ros_image(encoding: str, px: np.ndarray, padding: int = 0) -> Image:
    """A real rclpy sensor_msgs/Image holding ``px`` with ``padding`` bytes per row."""
    height, width = px.shape[:2]
    channels = SUPPORTED_ENCODINGS[encoding]
    rows = px.reshape(height, width * channels)
    padded = np.concatenate([rows, np.full((height, padding), 0xAB, np.uint8)], axis=1)
    msg = Image()
    msg.header.frame_id = f"cam_{encoding}"
    msg.height, msg.width = height, width
    msg.encoding = encoding
    msg.is_bigendian = 0
    msg.step = width * channels + padding
    msg.data = padded.tobytes()
    return msg


def rosbags_reference(msg: Image) -> np.ndarray:
    """rosbags-image's RGB conversion of ``msg``, padding handled by widening + crop."""
    channels = SUPPORTED_ENCODINGS[msg.encoding]
    if msg.step == msg.width * channels:
        return np.asarray(message_to_cvimage(msg, "rgb8"))
    assert msg.step % channels == 0
    wide = Image()
    wide.height, wide.width, wide.encoding = msg.height, msg.step // channels, msg.encoding
    wide.step, wide.data = msg.step, msg.data
    return np.asarray(message_to_cvimage(wide, "rgb8"))[:, : msg.width]


@pytest.mark.parametrize("encoding", ENCODINGS)
@pytest.mark.parametrize("padding_pixels", [0, 3])
def test_matches_rosbags_image(encoding, padding_pixels):
    channels = SUPPORTED_ENCODINGS[encoding]
    px = pixels(37, 53, channels, seed=len(encoding) + padding_pixels)
    msg = ros_image(encoding, px, padding=padding_pixels * channels)
    rgb = image_to_rgb(msg, use_cv_bridge=False)
    assert rgb.shape == (37, 53, 3) and rgb.dtype == np.uint8
    np.testing.assert_array_equal(rgb, rosbags_reference(msg))
    # The unpadded twin converts to the same pixels.
    np.testing.assert_array_equal(rgb, rosbags_reference(ros_image(encoding, px)))


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_odd_padding_matches_unpadded(encoding):
    px = pixels(9, 11, SUPPORTED_ENCODINGS[encoding], seed=7)
    padded = image_to_rgb(ros_image(encoding, px, padding=5), use_cv_bridge=False)
    np.testing.assert_array_equal(padded, rosbags_reference(ros_image(encoding, px)))


def test_expected_channel_order():
    rgb = np.array([[[10, 20, 30]]], np.uint8)
    alpha = np.array([[255]], np.uint8)
    cases = {
        "rgb8": rgb,
        "bgr8": rgb[..., ::-1],
        "rgba8": np.dstack([rgb, alpha]),
        "bgra8": np.dstack([rgb[..., ::-1], alpha]),
    }
    for encoding, px in cases.items():
        np.testing.assert_array_equal(image_to_rgb(ros_image(encoding, px)), rgb)
    grey = image_to_rgb(ros_image("mono8", np.array([[77]], np.uint8)), source="/g")
    np.testing.assert_array_equal(grey, [[[77, 77, 77]]])


@pytest.mark.parametrize(
    ("encoding", "zero_copy"),
    [("rgb8", True), ("rgba8", True), ("mono8", True), ("bgr8", False), ("bgra8", False)],
)
def test_zero_copy_where_no_channel_swap(encoding, zero_copy):
    msg = ros_image(encoding, pixels(8, 6, SUPPORTED_ENCODINGS[encoding]), padding=4)
    rgb = image_to_rgb(msg, source="/zero_copy")
    buffer = np.frombuffer(msg.data, np.uint8)
    assert np.shares_memory(rgb, buffer) is zero_copy
    if zero_copy:
        assert not rgb.flags.writeable


def test_rosbags_messages_with_numpy_data():
    typestore = get_typestore(Stores.ROS2_JAZZY)
    RosbagsImage = typestore.types["sensor_msgs/msg/Image"]
    Header = typestore.types["std_msgs/msg/Header"]
    Time = typestore.types["builtin_interfaces/msg/Time"]
    px = pixels(5, 7, 3, seed=3)
    padded = np.concatenate([px.reshape(5, 21), np.zeros((5, 3), np.uint8)], axis=1)
    msg = RosbagsImage(
        header=Header(stamp=Time(sec=0, nanosec=0), frame_id="bag_cam"),
        height=5,
        width=7,
        encoding="bgr8",
        is_bigendian=0,
        step=24,
        data=padded.reshape(-1),
    )
    np.testing.assert_array_equal(image_to_rgb(msg), px[..., ::-1])


def test_mono8_warns_once_per_source(caplog):
    msg = ros_image("mono8", pixels(4, 4, 1))
    with caplog.at_level(logging.WARNING, logger="relay_ros.pipeline.images"):
        image_to_rgb(msg, source="/mono_a")
        image_to_rgb(msg, source="/mono_a")
        image_to_rgb(msg, source="/mono_b")
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [
        "camera /mono_a sends mono8 frames; expanding grey to 3 channels (the policy expects RGB)",
        "camera /mono_b sends mono8 frames; expanding grey to 3 channels (the policy expects RGB)",
    ]


def test_unsupported_encoding():
    msg = ros_image("rgb8", pixels(2, 2, 3))
    msg.encoding = "16UC1"
    with pytest.raises(ImageConversionError) as info:
        image_to_rgb(msg)
    assert str(info.value) == (
        "image encoding '16UC1' is not supported; supported encodings: "
        "['rgb8', 'bgr8', 'rgba8', 'bgra8', 'mono8']"
    )


def test_bad_geometry():
    msg = ros_image("rgb8", pixels(4, 4, 3))
    msg.step = 10
    with pytest.raises(ImageConversionError) as info:
        image_to_rgb(msg)
    assert str(info.value) == (
        "image step 10 is smaller than width * channels = 4 * 3 for encoding 'rgb8'"
    )
    msg = ros_image("rgb8", pixels(4, 4, 3))
    msg.height = 5
    with pytest.raises(ImageConversionError) as info:
        image_to_rgb(msg)
    assert str(info.value) == ("image data has 48 bytes; 'rgb8' 4x5 with step 12 needs at least 60")
    msg = Image()
    msg.encoding = "rgb8"
    with pytest.raises(ImageConversionError, match="image has size 0x0"):
        image_to_rgb(msg)


def test_cv_bridge_path_is_separate():
    # cv_bridge is not installable here; the own conversion is used and forcing the
    # bridge fails clearly instead of silently falling back.
    assert not cv_bridge_available()
    with pytest.raises(ImageConversionError, match="cv_bridge is not importable"):
        image_to_rgb(ros_image("rgb8", pixels(2, 2, 3)), use_cv_bridge=True)


def compressed(fmt: str, data: bytes) -> CompressedImage:
    msg = CompressedImage()
    msg.header.frame_id = "cam"
    msg.format = fmt
    msg.data = data
    return msg


def smooth_rgb(height: int = 48, width: int = 64) -> np.ndarray:
    y, x = np.mgrid[0:height, 0:width]
    return np.dstack([x * 255 // width, y * 255 // height, (x + y) % 256]).astype(np.uint8)


@pytest.mark.parametrize(
    "fmt", ["jpeg", "rgb8; jpeg compressed bgr8", "bgr8; jpeg compressed bgr8"]
)
def test_compressed_jpeg_matches_rosbags(fmt):
    rgb = smooth_rgb()
    ok, jpeg = cv2.imencode(".jpg", cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR))
    assert ok
    msg = compressed(fmt, jpeg.tobytes())
    out = compressed_to_rgb(msg)
    assert out.shape == (48, 64, 3) and out.dtype == np.uint8
    np.testing.assert_array_equal(out, compressed_image_to_cvimage(msg, "rgb8"))
    assert np.abs(out.astype(int) - rgb).mean() < 3  # JPEG is lossy, but RGB order is right


@pytest.mark.parametrize("progressive", [False, True])
def test_jpeg_size_reads_the_frame_header(progressive):
    params = [cv2.IMWRITE_JPEG_PROGRESSIVE, 1] if progressive else []
    _, jpeg = cv2.imencode(".jpg", smooth_rgb(480, 640), params)
    assert jpeg_size(jpeg.reshape(-1)) == (480, 640)
    assert jpeg_size(np.frombuffer(b"not a jpeg", np.uint8)) is None
    assert jpeg_size(jpeg.reshape(-1)[:20]) is None  # truncated before the frame header


def test_png_size_reads_the_ihdr_chunk():
    _, png = cv2.imencode(".png", smooth_rgb(48, 64))
    assert png_size(png.tobytes()) == compressed_size(png.reshape(-1)) == (48, 64)
    assert png_size(png.tobytes()[:20]) is None and png_size(b"GIF89a" + b"\0" * 30) is None
    assert compressed_size(b"BM" + b"\0" * 60) is None  # a BMP: neither


def _patched(encoded: bytes, offset: int, value: bytes) -> bytes:
    return encoded[:offset] + value + encoded[offset + len(value) :]


def test_a_decompression_bomb_is_refused_from_its_header():
    """A 631-byte JPEG and a 69-byte PNG declaring 16000 x 16000: refused before any
    pixel is decoded (decoding would allocate 768 MB)."""
    jpeg = cv2.imencode(".jpg", np.zeros((8, 8, 3), np.uint8))[1].tobytes()
    sof = jpeg.index(b"\xff\xc0")
    jpeg_bomb = _patched(jpeg, sof + 5, struct.pack(">HH", 16000, 16000))
    png = cv2.imencode(".png", np.zeros((8, 8, 3), np.uint8))[1].tobytes()
    png_bomb = _patched(png, 16, struct.pack(">II", 16000, 16000))
    for fmt, data in (("jpeg", jpeg_bomb), ("png", png_bomb)):
        assert compressed_size(data) == (16000, 16000)
        with pytest.raises(FrameTooLargeError) as info:
            compressed_to_rgb(compressed(fmt, data))
        assert str(info.value) == (
            f"compressed image ({fmt!r}) declares 16000x16000 pixels (256000000); at most "
            f"{MAX_FRAME_PIXELS} are decoded"
        )
        assert (info.value.height, info.value.width) == (16000, 16000)
    # A bound of the caller's: 64x48 is one pixel too many for 3071.
    small = compressed("jpeg", cv2.imencode(".jpg", smooth_rgb(48, 64))[1].tobytes())
    with pytest.raises(FrameTooLargeError, match=r"at most 3071 are decoded"):
        compressed_to_rgb(small, max_pixels=3071)
    assert compressed_to_rgb(small, max_pixels=3072).shape == (48, 64, 3)


@pytest.mark.parametrize("use_cv_bridge", [False, None])
def test_a_raw_image_declaring_absurd_sizes_is_refused_before_it_is_read(use_cv_bridge):
    msg = Image()
    msg.height, msg.width, msg.encoding, msg.step = 70_000, 70_000, "rgb8", 210_000
    msg.data = b"\0" * 64
    with pytest.raises(FrameTooLargeError, match=r"'rgb8' image declares 70000x70000 pixels"):
        image_to_rgb(msg, use_cv_bridge=use_cv_bridge)
    msg.height, msg.width, msg.step = 480, 640, 1920  # in bounds, but 64 bytes of data
    with pytest.raises(ImageConversionError, match=r"image data has 64 bytes"):
        image_to_rgb(msg, use_cv_bridge=use_cv_bridge)


def test_large_jpeg_is_decoded_at_half_scale_for_a_small_target():
    rgb = smooth_rgb(480, 640)
    _, jpeg = cv2.imencode(".jpg", cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR))
    msg = compressed("jpeg", jpeg.tobytes())
    full = compressed_to_rgb(msg)
    half = compressed_to_rgb(msg, target_size=(224, 224))
    assert full.shape == (480, 640, 3) and half.shape == (240, 320, 3)
    fitted_full = resize_with_pad(full, 224, 224)
    fitted_half = resize_with_pad(half, 224, 224)
    assert fitted_half.shape == fitted_full.shape == (224, 224, 3)
    assert np.abs(fitted_half.astype(int) - fitted_full).mean() < 1.5
    # A frame less than twice the target is decoded at full size.
    assert compressed_to_rgb(msg, target_size=(400, 400)).shape == (480, 640, 3)


def camera_like(height: int, width: int, seed: int = 3) -> np.ndarray:
    """The sim scene with sensor noise: fine detail, where a shrink can alias."""
    base = SceneRenderer(width, height, seed=seed, camera_name="base_0_rgb").render(0.3)
    noise = np.random.default_rng(seed).normal(0.0, 8.0, size=base.shape)
    return np.clip(base + noise, 0, 255).astype(np.uint8)


@pytest.mark.parametrize("shape", [(480, 640), (240, 320), (480, 848), (720, 1280)])
def test_shrinking_is_as_close_to_openpi_as_an_area_filter(shape):
    # openpi shrinks with PIL's antialiased bilinear; ours (halvings, a small blur,
    # bilinear) must be about as close to it as OpenCV's area filter, and much closer
    # than bilinear without the blur, which aliases the noise.
    frame = camera_like(*shape)
    height, width = shape
    ratio = max(width / 224, height / 224)
    size = (int(width / ratio), int(height / ratio))  # (w, h), as cv2.resize takes it
    top, left = (224 - size[1]) // 2, (224 - size[0]) // 2
    picture = (slice(top, top + size[1]), slice(left, left + size[0]))
    reference = openpi_resize_with_pad(frame, 224, 224)[picture].astype(int)

    def diff(resized: np.ndarray) -> float:
        return float(np.abs(resized.astype(int) - reference).mean())

    ours = diff(resize_with_pad(frame, 224, 224)[picture])
    area = diff(cv2.resize(frame, size, interpolation=cv2.INTER_AREA))
    half = frame
    while half.shape[0] >= 2 * size[1] and half.shape[1] >= 2 * size[0]:
        half = cv2.resize(
            half, (half.shape[1] // 2, half.shape[0] // 2), interpolation=cv2.INTER_AREA
        )
    aliased = diff(cv2.resize(half, size, interpolation=cv2.INTER_LINEAR))
    assert ours <= area + 0.3, (ours, area)
    assert ours < 0.8 * aliased, (ours, aliased)


def test_resize_blurs_only_when_shrinking_by_a_non_integer_factor():
    # An exact halving is a plain 2x2 average (no blur); a 1:1 copy keeps every pixel.
    frame = pixels(448, 448, 3, seed=4)
    halved = cv2.resize(frame, (224, 224), interpolation=cv2.INTER_AREA)
    np.testing.assert_array_equal(resize_with_pad(frame, 224, 224), halved)
    assert resize_with_pad(frame, 448, 448) is frame


@pytest.mark.parametrize("fmt", ["png", "rgb8; png compressed bgr8"])
def test_compressed_png_is_lossless(fmt):
    rgb = pixels(20, 30, 3, seed=11)
    ok, png = cv2.imencode(".png", cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR))
    assert ok
    np.testing.assert_array_equal(compressed_to_rgb(compressed(fmt, png.tobytes())), rgb)


def test_compressed_mono_is_expanded(caplog):
    grey = pixels(10, 12, 1, seed=5)
    ok, png = cv2.imencode(".png", grey)
    with caplog.at_level(logging.WARNING, logger="relay_ros.pipeline.images"):
        out = compressed_to_rgb(
            compressed("mono8; png compressed mono8", png.tobytes()), source="/cmono"
        )
    np.testing.assert_array_equal(out, np.dstack([grey] * 3))
    assert any("/cmono" in r.getMessage() for r in caplog.records)


def test_compressed_errors():
    with pytest.raises(ImageConversionError) as info:
        compressed_to_rgb(compressed("16UC1; compressedDepth png", b"\x00" * 20))
    assert str(info.value) == (
        "compressed image format '16UC1; compressedDepth png' is not supported; expected "
        "JPEG or PNG (e.g. 'jpeg', 'png', 'rgb8; jpeg compressed bgr8')"
    )
    with pytest.raises(ImageConversionError) as info:
        compressed_to_rgb(compressed("jpeg", b"not a jpeg at all"))
    assert str(info.value) == (
        "compressed image ('jpeg', 17 bytes) has no readable JPEG frame header or PNG IHDR: "
        "its size is unknown, so it is not decoded"
    )
    # A readable header and garbage after it: decoded, and refused by the decoder.
    header = cv2.imencode(".jpg", np.zeros((8, 8, 3), np.uint8))[1].tobytes()
    with pytest.raises(ImageConversionError) as info:
        compressed_to_rgb(compressed("jpeg", header[: header.index(b"\xff\xda")] + b"\xff\xd9"))
    assert str(info.value).endswith("could not be decoded")
    with pytest.raises(ImageConversionError, match=r"^compressed image \('jpeg'\) has no data$"):
        compressed_to_rgb(compressed("jpeg", b""))


def openpi_resize_with_pad(image: np.ndarray, height: int, width: int) -> np.ndarray:
    """openpi_client.image_tools._resize_with_pad_pil, for the geometry reference."""
    pil = PILImage.fromarray(image)
    cur_width, cur_height = pil.size
    if (cur_width, cur_height) == (width, height):
        return image
    ratio = max(cur_width / width, cur_height / height)
    resized_height = int(cur_height / ratio)
    resized_width = int(cur_width / ratio)
    resized = pil.resize((resized_width, resized_height), resample=PILImage.BILINEAR)
    canvas = PILImage.new(resized.mode, (width, height), 0)
    pad_height = max(0, int((height - resized_height) / 2))
    pad_width = max(0, int((width - resized_width) / 2))
    canvas.paste(resized, (pad_width, pad_height))
    return np.asarray(canvas)


def test_resize_640x480_to_224():
    frame = np.full((480, 640, 3), 200, np.uint8)
    out = resize_with_pad(frame, 224, 224)
    assert out.shape == (224, 224, 3) and out.dtype == np.uint8
    # 640x480 scales to 224x168, centred: 28 rows of padding above and below.
    assert (out[:28] == 0).all() and (out[196:] == 0).all()
    assert (out[28:196] == 200).all()


@pytest.mark.parametrize(
    "shape", [(480, 640), (640, 480), (720, 1280), (100, 100), (50, 90), (224, 300), (33, 17)]
)
def test_resize_geometry_matches_openpi(shape):
    frame = smooth_rgb(*shape)
    ours = resize_with_pad(frame, 224, 224)
    reference = openpi_resize_with_pad(frame, 224, 224)
    content = np.full(shape + (3,), 255, np.uint8)
    np.testing.assert_array_equal(
        resize_with_pad(content, 224, 224) > 0, openpi_resize_with_pad(content, 224, 224) > 0
    )
    # Same picture up to interpolation differences (our blur + bilinear vs PIL antialiased).
    assert np.abs(ours.astype(int) - reference.astype(int)).mean() < 4


def test_resize_keeps_right_size_and_accepts_views():
    frame = pixels(224, 224, 3)
    assert resize_with_pad(frame, 224, 224) is frame
    rgba = image_to_rgb(ros_image("rgba8", pixels(48, 64, 4, seed=2), padding=8))
    mono = image_to_rgb(ros_image("mono8", pixels(48, 64, 1, seed=2)), source="/view")
    for view in (rgba, mono):
        np.testing.assert_array_equal(
            resize_with_pad(view, 24, 24), resize_with_pad(np.ascontiguousarray(view), 24, 24)
        )


def test_resize_errors():
    with pytest.raises(ImageConversionError) as info:
        resize_with_pad(np.zeros((3, 48, 64), np.float32), 224, 224)
    assert str(info.value) == (
        "frame has shape (3, 48, 64) and dtype float32; expected (H, W, 3) uint8"
    )
    with pytest.raises(ImageConversionError, match="target size 0x224 must be positive"):
        resize_with_pad(np.zeros((4, 4, 3), np.uint8), 0, 224)


def test_parse_image_size_is_the_one_check_for_server_and_encoder() -> None:
    from relay_ros.pipeline.image_encoding import ImageEncodingError, encode_frame
    from relay_ros.pipeline.server_spec import ServerSpecError, _image_size

    assert parse_image_size([224, 256]) == (224, 256)
    assert parse_image_size(np.array([96, 128])) == (96, 128)
    for bad, message in (
        ([224], "image_size [224] is not [height, width]; expected two integers"),
        ("ab", "image_size 'ab' is not [height, width]; expected two integers"),
        ([0, 224], "image_size [0, 224] must be positive"),
    ):
        with pytest.raises(ValueError, match=re.escape(message)):
            parse_image_size(bad)
        # The node's metadata check and the client helper say the same, in their types.
        with pytest.raises(ServerSpecError, match=re.escape("server metadata " + message)):
            _image_size(bad)
        with pytest.raises(ImageEncodingError, match=re.escape(message)):
            encode_frame(np.zeros((4, 4, 3), np.uint8), bad)
