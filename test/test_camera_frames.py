"""CameraFrames: keep the newest message per camera, convert only when an observation is built."""

from __future__ import annotations

import struct
from types import SimpleNamespace

import cv2
import numpy as np
import pytest

from relay_ros.pipeline.camera_frames import NEW_SIZE_AFTER_S, CameraFrames, FrameConversionError
from relay_ros.pipeline.camera_map import CameraEntry
from relay_ros.pipeline.image_encoding import ImageEncodingError, decode_jpeg
from relay_ros.pipeline.images import resize_with_pad
from relay_ros.sim.scene import SceneRenderer

SIZE = (224, 224)
RAW = [
    CameraEntry("base_0_rgb", "/cam/base", "raw", "sensor_data"),
    CameraEntry("left_wrist_0_rgb", "/cam/left", "raw", "sensor_data"),
]
COMPRESSED = [CameraEntry("base_0_rgb", "/cam/base/compressed", "compressed", "sensor_data")]


def _string(text: str, offset: int) -> tuple[bytes, int]:
    """A CDR string at ``offset`` (counted after the 4-byte header): padding, length, bytes."""
    pad = (-offset) % 4
    raw = text.encode() + b"\x00"
    out = b"\x00" * pad + struct.pack("<I", len(raw)) + raw
    return out, offset + len(out)


def cdr_image(rgb: np.ndarray, frame_id: str = "cam") -> bytes:
    """A little-endian CDR ``sensor_msgs/Image`` (rgb8), as rclpy delivers with raw=True."""
    height, width, _ = rgb.shape
    body = struct.pack("<iI", 7, 8)  # header.stamp sec = 7, nanosec = 8
    part, offset = _string(frame_id, len(body))  # header.frame_id
    body += part
    body += b"\x00" * ((-offset) % 4) + struct.pack("<II", height, width)  # height, width
    offset = len(body)
    part, offset = _string("rgb8", offset)  # encoding
    body += part
    body += b"\x00"  # is_bigendian
    body += b"\x00" * ((-len(body)) % 4) + struct.pack("<I", width * 3)  # step
    body += struct.pack("<I", rgb.nbytes) + rgb.tobytes()  # data: length, bytes
    return b"\x00\x01\x00\x00" + body  # encapsulation: CDR little endian


def scene(key: str, t: float = 0.3) -> np.ndarray:
    return SceneRenderer(640, 480, seed=1, camera_name=key).render(t)


def test_cdr_helper_matches_the_reader() -> None:
    from relay_ros.pipeline.image_cdr import parse_image_cdr

    rgb = scene("x")
    parsed = parse_image_cdr(cdr_image(rgb, frame_id="abcde"))
    assert (parsed.height, parsed.width, parsed.encoding, parsed.frame_id) == (
        480,
        640,
        "rgb8",
        "abcde",
    )
    assert bytes(parsed.data) == rgb.tobytes()


def test_only_the_newest_message_is_converted_once() -> None:
    frames = CameraFrames(RAW)
    assert frames.missing() == ["base_0_rgb", "left_wrist_0_rgb"]
    garbage = b"not an image"  # never converted: a newer message replaces it
    for i in range(30):
        frames.store("base_0_rgb", garbage, received=float(i))
    newest = {key: scene(key) for key in ("base_0_rgb", "left_wrist_0_rgb")}
    frames.store("base_0_rgb", cdr_image(newest["base_0_rgb"]), received=30.0)
    frames.store("left_wrist_0_rgb", cdr_image(newest["left_wrist_0_rgb"]), received=29.5)
    assert frames.missing() == []
    assert frames.stamps() == {"base_0_rgb": 30.0, "left_wrist_0_rgb": 29.5}

    first = frames.assemble(SIZE)
    assert first.converted == 2 and first.conversion_s > 0
    for key, rgb in newest.items():
        np.testing.assert_array_equal(first.frames[key], resize_with_pad(rgb, *SIZE))
    assert first.wire_bytes == 2 * 224 * 224 * 3
    again = frames.assemble(SIZE)
    assert again.converted == 0 and again.conversion_s == 0.0
    assert again.frames["base_0_rgb"] is first.frames["base_0_rgb"]
    # A new image size converts again.
    assert frames.assemble((112, 112)).frames["base_0_rgb"].shape == (112, 112, 3)


def test_message_objects_and_compressed_frames() -> None:
    rgb = scene("base_0_rgb")
    msg = SimpleNamespace(height=480, width=640, encoding="rgb8", step=640 * 3, data=rgb.tobytes())
    frames = CameraFrames(RAW[:1])
    frames.store("base_0_rgb", msg, received=1.0)
    np.testing.assert_array_equal(
        frames.assemble(SIZE).frames["base_0_rgb"], resize_with_pad(rgb, *SIZE)
    )

    ok, jpeg = cv2.imencode(
        ".jpg", cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR), [cv2.IMWRITE_JPEG_QUALITY, 95]
    )
    assert ok
    compressed = CameraFrames(COMPRESSED)
    compressed.store("base_0_rgb", SimpleNamespace(format="jpeg", data=jpeg.tobytes()), 1.0)
    out = compressed.assemble(SIZE).frames["base_0_rgb"]
    assert isinstance(out, np.ndarray) and out.shape == (224, 224, 3)
    assert np.abs(out.astype(int) - resize_with_pad(rgb, *SIZE).astype(int)).mean() < 2.0


def test_jpeg_encoding_sends_small_bytes() -> None:
    frames = CameraFrames(RAW, encoding="jpeg", jpeg_quality=90)
    for key in ("base_0_rgb", "left_wrist_0_rgb"):
        frames.store(key, cdr_image(scene(key)), received=1.0)
    wire = frames.assemble(SIZE)
    for key in ("base_0_rgb", "left_wrist_0_rgb"):
        data = wire.frames[key]
        assert isinstance(data, bytes) and data[:2] == b"\xff\xd8"
        fitted = resize_with_pad(scene(key), *SIZE)
        assert np.abs(decode_jpeg(data).astype(int) - fitted.astype(int)).mean() < 2.0
    assert wire.wire_bytes < 2 * 20_000
    assert frames.describe()["jpeg_quality"] == 90


def test_a_bad_message_names_camera_and_topic_and_falls_back() -> None:
    frames = CameraFrames(RAW)
    frames.store("base_0_rgb", cdr_image(scene("base_0_rgb")), received=1.0)
    frames.store("left_wrist_0_rgb", b"\x00\x01\x00\x00\x01", received=1.0)
    with pytest.raises(FrameConversionError, match=r"camera 'left_wrist_0_rgb' on /cam/left: "):
        frames.assemble(SIZE)
    assert frames.missing() == ["left_wrist_0_rgb"]  # no good frame before it
    good = cdr_image(scene("left_wrist_0_rgb"))
    frames.store("left_wrist_0_rgb", good, received=2.0)
    first = frames.assemble(SIZE)
    frames.store("left_wrist_0_rgb", b"\x00\x01\x00\x00\x01", received=3.0)
    with pytest.raises(FrameConversionError):
        frames.assemble(SIZE)
    # The last good frame stays, with its own arrival time (it ages out as stale).
    assert frames.stamps()["left_wrist_0_rgb"] == 2.0
    again = frames.assemble(SIZE)
    assert again.frames["left_wrist_0_rgb"] is first.frames["left_wrist_0_rgb"]


def test_unknown_cdr_goes_to_the_deserializer() -> None:
    rgb = scene("base_0_rgb")
    seen: list[bytes] = []

    def deserialize(buffer: bytes) -> SimpleNamespace:
        seen.append(buffer)
        return SimpleNamespace(
            height=480, width=640, encoding="rgb8", step=1920, data=rgb.tobytes()
        )

    frames = CameraFrames(RAW[:1], deserialize=deserialize)
    frames.store("base_0_rgb", b"\x00\x03\x00\x00xcdr2", received=1.0)  # not XCDR1
    assert frames.assemble(SIZE).frames["base_0_rgb"].shape == (224, 224, 3)
    assert seen == [b"\x00\x03\x00\x00xcdr2"]


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ImageEncodingError, match=r"image_encoding 'png' is unknown"):
        CameraFrames(RAW, encoding="png")
    with pytest.raises(ImageEncodingError, match=r"jpeg_quality 101 is outside \[1, 100\]"):
        CameraFrames(RAW, encoding="jpeg", jpeg_quality=101)
    with pytest.raises(KeyError, match=r"camera 'video.front' is not one of"):
        CameraFrames(RAW).store("video.front", b"", 0.0)


def test_prepare_converts_on_arrival_and_assemble_reuses_it() -> None:
    frames = CameraFrames(RAW)
    frames.store("base_0_rgb", cdr_image(scene("base_0_rgb")), received=1.0)
    frames.store("left_wrist_0_rgb", cdr_image(scene("left_wrist_0_rgb")), received=2.0)
    spent = frames.prepare("left_wrist_0_rgb", SIZE)
    assert spent > 0 and frames.prepare("left_wrist_0_rgb", SIZE) == 0.0
    wire = frames.assemble(SIZE)
    assert wire.converted == 1  # only base_0_rgb was left
    assert wire.newest_prepared_s == spent  # the newest frame was ready before the request
    frames.store("left_wrist_0_rgb", b"\x00\x01\x00\x00\x01", received=3.0)
    with pytest.raises(FrameConversionError, match=r"camera 'left_wrist_0_rgb' on /cam/left"):
        frames.prepare("left_wrist_0_rgb", SIZE)
    assert frames.stamps()["left_wrist_0_rgb"] == 2.0  # back to the frame that converted


def test_a_frame_read_inside_the_callers_timing_is_not_counted_twice() -> None:
    # policy_node reads and converts frames on the request's own tick; that time is
    # already in its request_to_wire, so newest_prepared_s must not add it again.
    frames = CameraFrames(RAW)
    frames.store("base_0_rgb", cdr_image(scene("base_0_rgb")), received=1.0, read_s=0.002)
    frames.store("left_wrist_0_rgb", cdr_image(scene("left_wrist_0_rgb")), 2.0, read_s=0.002)
    earlier = frames.prepare("left_wrist_0_rgb", SIZE)
    assert earlier >= 0.002  # its read counts in its processing time
    mark = frames.stored
    assert mark == 2
    # The newest frame was converted before the mark: its processing is added.
    assert frames.assemble(SIZE, timed_after=mark).newest_prepared_s == earlier
    # A newer frame read and converted after the mark: inside the caller's timing.
    frames.store("base_0_rgb", cdr_image(scene("base_0_rgb", 0.4)), received=3.0, read_s=0.002)
    assert frames.prepare("base_0_rgb", SIZE) >= 0.002
    wire = frames.assemble(SIZE, timed_after=mark)
    assert wire.converted == 0 and wire.newest_prepared_s == 0.0
    # Without a mark the same frame counts as prepared before the request.
    assert frames.assemble(SIZE).newest_prepared_s > 0.0


def test_due_soon_follows_the_camera_period() -> None:
    frames = CameraFrames(RAW)
    frames.store("base_0_rgb", b"a", received=10.0)
    assert not frames.due_soon("base_0_rgb", 10.0, None)  # no request planned
    assert frames.due_soon("base_0_rgb", 10.0, 10.09)  # first frame: 100 ms window
    frames.store("base_0_rgb", b"b", received=10.033)  # 30 Hz: a 50 ms window
    assert frames.due_soon("base_0_rgb", 10.033, 10.08)
    assert not frames.due_soon("base_0_rgb", 10.033, 10.09)
    assert frames.due_soon("base_0_rgb", 10.033, float("-inf"))  # at once


def test_a_gap_between_reads_is_not_taken_for_the_camera_period() -> None:
    # policy_node reads frames only before requests: the half second between two
    # windows must not widen the 30 Hz camera's conversion window to 100 ms.
    frames = CameraFrames(RAW)
    frames.store("base_0_rgb", b"a", received=10.0)
    frames.store("base_0_rgb", b"b", received=10.033)
    frames.store("base_0_rgb", b"c", received=10.533)  # next window
    assert not frames.due_soon("base_0_rgb", 10.533, 10.6)  # 67 ms away: after the next frame
    assert frames.due_soon("base_0_rgb", 10.533, 10.58)  # within 1.5 periods


# ------------------------------------------------------------------ frame size bound


def bomb_jpeg(height: int, width: int) -> bytes:
    """A real 8x8 JPEG (631 bytes) whose frame header is patched to declare ``height x
    width``: decoding it would allocate the declared size."""
    data = bytearray(cv2.imencode(".jpg", np.zeros((8, 8, 3), np.uint8))[1].tobytes())
    sof = data.index(b"\xff\xc0")
    data[sof + 5 : sof + 9] = struct.pack(">HH", height, width)
    return bytes(data)


def jpeg_msg(rgb_or_bytes) -> SimpleNamespace:
    data = rgb_or_bytes
    if isinstance(rgb_or_bytes, np.ndarray):
        data = cv2.imencode(".jpg", rgb_or_bytes[:, :, ::-1])[1].tobytes()
    return SimpleNamespace(format="jpeg", data=data)


def test_a_jpeg_bomb_is_refused_undecoded_and_the_camera_keeps_its_frame() -> None:
    frames = CameraFrames(COMPRESSED)
    frames.store("base_0_rgb", jpeg_msg(scene("base_0_rgb")), received=1.0)
    good = frames.assemble(SIZE).frames["base_0_rgb"]
    assert frames.refusal("base_0_rgb") is None
    for height, width, why in [
        (16000, 16000, "256000000); at most 16777216 are decoded"),
        # Under the hard cap, but 4.3 x the camera's 640x480 (1.2 MP at most).
        (1080, 1200, "1296000); at most 1228800 are decoded (4 x the 640x480 of this camera's"),
    ]:
        frames.store("base_0_rgb", jpeg_msg(bomb_jpeg(height, width)), received=2.0)
        with pytest.raises(FrameConversionError) as info:
            frames.assemble(SIZE)
        assert str(info.value).startswith(
            f"camera 'base_0_rgb' on /cam/base/compressed: frame declares {width}x{height} "
            f"pixels ({why}"
        )
        assert frames.refusal("base_0_rgb") == str(info.value)
        # Fallen back to the last frame that converted.
        assert frames.stamps() == {"base_0_rgb": 1.0}
        np.testing.assert_array_equal(frames.assemble(SIZE).frames["base_0_rgb"], good)
    frames.store("base_0_rgb", jpeg_msg(scene("base_0_rgb", 0.5)), received=3.0)
    frames.assemble(SIZE)
    assert frames.refusal("base_0_rgb") is None


def test_the_first_frame_is_bound_by_the_hard_cap_only() -> None:
    frames = CameraFrames(COMPRESSED)
    frames.store("base_0_rgb", jpeg_msg(bomb_jpeg(16000, 16000)), received=1.0)
    with pytest.raises(FrameConversionError, match="declares 16000x16000 pixels"):
        frames.assemble(SIZE)
    assert frames.missing() == ["base_0_rgb"]
    big = np.zeros((1080, 1920, 3), np.uint8)
    frames.store("base_0_rgb", jpeg_msg(big), received=2.0)
    assert frames.assemble(SIZE).converted == 1


def test_a_camera_that_changed_size_is_taken_at_its_new_size_after_a_second() -> None:
    """A driver reconfigured from 64x48 to 640x480 (100 x the pixels): refused for
    NEW_SIZE_AFTER_S while every frame has the new size, then taken; a good frame in
    between restarts the count (bombs among real frames never become the size)."""
    frames = CameraFrames(COMPRESSED)
    small, large = np.zeros((48, 64, 3), np.uint8), scene("base_0_rgb")
    frames.store("base_0_rgb", jpeg_msg(small), received=0.0)
    frames.assemble(SIZE)
    t = 0.0
    for _ in range(20):  # large frames, a small one now and then: never taken
        for msg in (jpeg_msg(large), jpeg_msg(large), jpeg_msg(small)):
            t = round(t + 0.1, 6)
            frames.store("base_0_rgb", msg, received=t)
            try:
                frames.assemble(SIZE)
            except FrameConversionError as exc:
                assert "declares 640x480 pixels" in str(exc)
    assert frames.stamps()["base_0_rgb"] == pytest.approx(t)  # the last small one
    start = t
    while True:
        t = round(t + 0.1, 6)
        frames.store("base_0_rgb", jpeg_msg(large), received=t)
        try:
            wire = frames.assemble(SIZE)
        except FrameConversionError:
            assert t - start < NEW_SIZE_AFTER_S + 0.15
            continue
        break
    assert t - start == pytest.approx(NEW_SIZE_AFTER_S + 0.1, abs=0.01)
    assert wire.converted == 1 and frames.stamps()["base_0_rgb"] == pytest.approx(t)


def test_a_raw_image_is_bound_before_anything_is_read() -> None:
    frames = CameraFrames(RAW[:1])
    # 100 000 x 100 000 declared in a 24-byte message: refused on its fields.
    header = SimpleNamespace(frame_id="cam")
    absurd = SimpleNamespace(
        header=header, height=100_000, width=100_000, encoding="rgb8", step=300_000, data=b"x" * 24
    )
    frames.store("base_0_rgb", absurd, received=1.0)
    with pytest.raises(FrameConversionError, match=r"declares 100000x100000 pixels"):
        frames.assemble(SIZE)
    # Sizes that fit the cap but not the data: the geometry check names them.
    short = SimpleNamespace(
        header=header, height=480, width=640, encoding="rgb8", step=1920, data=b"x" * 1000
    )
    frames.store("base_0_rgb", short, received=2.0)
    with pytest.raises(FrameConversionError, match=r"image data has 1000 bytes; 'rgb8' 640x480"):
        frames.assemble(SIZE)
