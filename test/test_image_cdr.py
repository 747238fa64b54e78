"""image_cdr reads serialized sensor_msgs/Image exactly as rclpy does, without a copy."""

from __future__ import annotations

import numpy as np
import pytest
from rclpy.serialization import serialize_message
from sensor_msgs.msg import Image

from relay_ros.pipeline.image_cdr import CdrImageError, parse_image_cdr
from relay_ros.pipeline.images import image_to_rgb


def _image(frame_id: str, encoding: str, height: int, width: int, channels: int, pad: int):
    rng = np.random.default_rng(len(frame_id) + pad)
    rows = rng.integers(0, 256, size=(height, width * channels + pad), dtype=np.uint8)
    msg = Image(height=height, width=width, encoding=encoding, step=width * channels + pad)
    msg.header.frame_id = frame_id
    msg.header.stamp.sec = 1_700_000_123
    msg.header.stamp.nanosec = 456_789
    msg.data = rows.tobytes()
    return msg


# frame_id lengths 0..4 move every later field across alignment boundaries.
@pytest.mark.parametrize("frame_id", ["", "a", "ab", "abc", "camera_base_optical"])
@pytest.mark.parametrize(
    "encoding, channels, pad", [("rgb8", 3, 0), ("bgr8", 3, 4), ("mono8", 1, 3), ("rgba8", 4, 0)]
)
def test_fields_match_rclpy(frame_id, encoding, channels, pad):
    msg = _image(frame_id, encoding, 7, 5, channels, pad)
    raw = serialize_message(msg)
    parsed = parse_image_cdr(raw)
    assert (parsed.stamp_sec, parsed.stamp_nanosec) == (1_700_000_123, 456_789)
    assert parsed.frame_id == frame_id
    assert (parsed.height, parsed.width, parsed.encoding) == (7, 5, encoding)
    assert (parsed.is_bigendian, parsed.step) == (0, msg.step)
    assert bytes(parsed.data) == bytes(msg.data)
    assert not parsed.data.flags.writeable
    np.testing.assert_array_equal(image_to_rgb(parsed), image_to_rgb(msg))


def test_data_is_a_view_of_the_received_bytes():
    raw = serialize_message(_image("cam", "rgb8", 4, 4, 3, 0))
    parsed = parse_image_cdr(raw)
    assert parsed.data.base is not None and not parsed.data.flags.owndata


def test_big_endian_cdr():
    # A big-endian writer: encapsulation 00 00, then every number big endian.
    frame = b"cam"
    body = (
        (12).to_bytes(4, "big", signed=True)  # header.stamp.sec = 12
        + (34).to_bytes(4, "big")  # header.stamp.nanosec = 34
        + (len(frame) + 1).to_bytes(4, "big")  # frame_id length incl. NUL
        + frame
        + b"\x00"  # NUL, ends at body offset 16: aligned
        + (2).to_bytes(4, "big")  # height = 2
        + (1).to_bytes(4, "big")  # width = 1
        + (5).to_bytes(4, "big")  # encoding length incl. NUL
        + b"rgb8\x00"  # encoding, ends at offset 33
        + b"\x01"  # is_bigendian = 1 (offset 33), then 2 bytes to align step at 36
        + b"\x00\x00"
        + (3).to_bytes(4, "big")  # step = 3
        + (6).to_bytes(4, "big")  # data length = 6
        + bytes([1, 2, 3, 4, 5, 6])  # data
    )
    parsed = parse_image_cdr(b"\x00\x00\x00\x00" + body)
    assert (parsed.stamp_sec, parsed.stamp_nanosec, parsed.frame_id) == (12, 34, "cam")
    assert (parsed.height, parsed.width, parsed.encoding, parsed.step) == (2, 1, "rgb8", 3)
    assert parsed.is_bigendian == 1 and list(parsed.data) == [1, 2, 3, 4, 5, 6]


def test_errors_name_the_problem():
    raw = bytes(serialize_message(_image("cam", "rgb8", 4, 4, 3, 0)))
    with pytest.raises(CdrImageError, match="encapsulation 0007 is not supported"):
        parse_image_cdr(b"\x00\x07" + raw[2:])
    with pytest.raises(CdrImageError, match="inside data"):
        parse_image_cdr(raw[:-5])
    with pytest.raises(CdrImageError, match="expected a CDR header"):
        parse_image_cdr(b"\x00")
