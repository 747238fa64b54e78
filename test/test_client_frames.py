"""The transport's frame writer: msgpack byte-identical to relay_ros.wire.codec.packb, and
valid masked WebSocket frames (parsed back with websockets' own frame parser)."""

from __future__ import annotations

import collections
from typing import Any

import numpy as np
import pytest
from websockets.frames import Frame, Opcode
from websockets.streams import StreamReader

from relay_ros.wire.codec import CodecError, pack_parts, packb
from relay_ros.wire.frame_writer import FrameWriter

Point = collections.namedtuple("Point", "x y")
RNG = np.random.default_rng(3)

SAMPLES: list[Any] = [
    None,
    True,
    0,
    -1,
    2**40,
    1.5,
    np.float64(2.5),
    np.float32(1.25),
    np.int16(-3),
    "prompt",
    "",
    b"short",
    b"\xff" * 5000,  # large bytes: written from their own memory
    bytearray(b"\x01" * 2000),
    [],
    (),
    [1, [2, [3]]],
    Point(1, 2),
    {},
    {"a": 1},
    {str(i): i for i in range(15)},  # fixmap limit
    {str(i): i for i in range(16)},  # map16
    list(range(15)),
    list(range(16)),
    list(range(70_000)),  # array32
    collections.OrderedDict(b=1, a=2),
    {1: "int key", b"k": "bytes key"},
    np.zeros(3, np.float32),  # small: through packb
    np.zeros(0, np.uint8),
    np.array(7, np.int64),  # 0-d
    RNG.integers(0, 256, (224, 224, 3), dtype=np.uint8),
    RNG.standard_normal((50, 32)).astype(np.float32),
    np.ones((40, 40), np.bool_),
    np.ones(2000, np.float16),
    np.ones(300, np.dtype(">f4")),  # non-native byte order: through packb
    np.ones((64, 64), np.float64)[:, ::2],  # not contiguous: through packb
    np.asfortranarray(np.ones((64, 64), np.float32)),
    np.array(["a", "bc"] * 300),  # unicode kind: through packb
    {
        "images": {
            "base_0_rgb": RNG.integers(0, 256, (224, 224, 3), dtype=np.uint8),
            "left_wrist_0_rgb": b"\xff\xd8" + b"\x00" * 3000,
        },
        "state": np.linspace(0, 1, 32, dtype=np.float32),
        "prompt": "pick",
        "seed": 3,
        "sampling_params": {"lora": {"name": "x", "scale": 0.5}},
    },
]


@pytest.mark.parametrize("obj", SAMPLES, ids=lambda o: type(o).__name__)
def test_parts_are_byte_identical_to_codec(obj: Any) -> None:
    parts = pack_parts(obj)
    assert b"".join(bytes(part) for part in parts) == packb(obj)


def parse_frame(data: bytes) -> Frame:
    reader = StreamReader()
    reader.feed_data(data)
    reader.feed_eof()
    parser = Frame.parse(reader.read_exact, mask=True)
    with pytest.raises(StopIteration) as done:
        next(parser)
    frame = done.value.value
    assert isinstance(frame, Frame)
    return frame


@pytest.mark.parametrize("obj", SAMPLES, ids=lambda o: type(o).__name__)
def test_frames_parse_back_to_the_payload(obj: Any) -> None:
    writer = FrameWriter()
    view = writer.frame(obj)
    data = bytes(view)
    view.release()
    frame = parse_frame(data)
    assert frame.opcode is Opcode.BINARY
    assert frame.fin
    assert bytes(frame.data) == packb(obj)


@pytest.mark.parametrize("size", [0, 1, 2, 3, 4, 5, 120, 125, 126, 127, 65535, 65536, 70001])
def test_header_lengths_at_the_boundaries(size: int) -> None:
    # packb(bytes of n) = header + n; pick the bytes so the payload hits the boundaries.
    for n in range(max(0, size - 5), size + 1):
        obj = b"x" * n
        if len(packb(obj)) != size:
            continue
        view = FrameWriter().frame(obj)
        data = bytes(view)
        view.release()
        assert bytes(parse_frame(data).data) == packb(obj)
        header = 2 + (2 if 126 <= size < 65536 else 8 if size >= 65536 else 0) + 4
        assert len(data) == header + size


def test_buffer_is_reused_and_grows() -> None:
    writer = FrameWriter()
    big = np.ones(1_000_000, np.uint8)
    for obj in ({"a": 1}, {"big": big}, {"a": 2}, {"big": big}):
        view = writer.frame(obj)
        data = bytes(view)
        view.release()
        assert bytes(parse_frame(data).data) == packb(obj)


def test_each_frame_has_a_fresh_mask() -> None:
    writer = FrameWriter()
    masks = set()
    for _ in range(8):
        view = writer.frame({"a": 1})
        masks.add(bytes(view[2:6]))
        view.release()
    assert len(masks) > 1


@pytest.mark.parametrize(
    "obj",
    [
        {"state": np.array([1 + 2j], np.complex64)},
        {"x": np.array([object()], dtype=object)},
        {"x": np.zeros(4000, dtype=[("a", "f4")])},
        {"x": object()},
    ],
    ids=["complex", "object", "structured", "python object"],
)
def test_refused_values_raise_codec_error(obj: Any) -> None:
    with pytest.raises(CodecError):
        FrameWriter().frame(obj)


@pytest.mark.parametrize("depth", [60, 100, 400])
def test_deep_nesting_is_encoded_like_the_codec(depth: int) -> None:
    obj: Any = {"leaf": np.ones(2000, np.uint8)}
    for _ in range(depth):
        obj = [obj]
    view = FrameWriter().frame(obj)
    data = bytes(view)
    view.release()
    assert bytes(parse_frame(data).data) == packb(obj)


def test_over_deep_nesting_raises_codec_error() -> None:
    obj: Any = 0
    for _ in range(10_000):
        obj = [obj]
    with pytest.raises(CodecError):
        FrameWriter().frame(obj)
