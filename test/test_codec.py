"""relay_ros.wire.codec against frames written out by hand from openpi's msgpack_numpy format.

openpi is deliberately not imported: each expected frame below is spelled byte by
byte from the msgpack spec and the format in docs/protocol.md, one comment per field.
"""

from __future__ import annotations

import struct

import numpy as np
import pytest

from relay_ros.wire.codec import CodecError, packb, unpackb

# {"state": np.array([1.0, 2.0], dtype=np.float32)}
STATE_FRAME = (
    b"\x81"  # fixmap, 1 entry
    b"\xa5state"  # fixstr(5) "state"
    b"\x84"  # fixmap, 4 entries (the ndarray map)
    b"\xc4\x0b__ndarray__"  # bin8(11) b"__ndarray__"
    b"\xc3"  # true
    b"\xc4\x04data"  # bin8(4) b"data"
    b"\xc4\x08"  # bin8(8): 2 x float32
    b"\x00\x00\x80\x3f"  # 1.0f little-endian
    b"\x00\x00\x00\x40"  # 2.0f little-endian
    b"\xc4\x05dtype"  # bin8(5) b"dtype"
    b"\xa3<f4"  # fixstr(3) "<f4" (dtype.str)
    b"\xc4\x05shape"  # bin8(5) b"shape"
    b"\x91\x02"  # fixarray(1): [2]
)

# {"img": np.arange(12, dtype=np.uint8).reshape(2, 2, 3)}
IMAGE_FRAME = (
    b"\x81"  # fixmap, 1 entry
    b"\xa3img"  # fixstr(3) "img"
    b"\x84"  # fixmap, 4 entries
    b"\xc4\x0b__ndarray__"  # bin8(11) b"__ndarray__"
    b"\xc3"  # true
    b"\xc4\x04data"  # bin8(4) b"data"
    b"\xc4\x0c"  # bin8(12): the 12 pixels in C order
    b"\x00\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a\x0b"  # values 0..11
    b"\xc4\x05dtype"  # bin8(5) b"dtype"
    b"\xa3|u1"  # fixstr(3) "|u1" (byte order not applicable)
    b"\xc4\x05shape"  # bin8(5) b"shape"
    b"\x93\x02\x02\x03"  # fixarray(3): [2, 2, 3]
)

# np.float32(1.5) at top level
SCALAR_FRAME = (
    b"\x83"  # fixmap, 3 entries (the npgeneric map)
    b"\xc4\x0d__npgeneric__"  # bin8(13) b"__npgeneric__"
    b"\xc3"  # true
    b"\xc4\x04data"  # bin8(4) b"data"
    b"\xcb\x3f\xf8\x00\x00\x00\x00\x00\x00"  # float64 1.5 (item() is a Python float)
    b"\xc4\x05dtype"  # bin8(5) b"dtype"
    b"\xa3<f4"  # fixstr(3) "<f4"
)

# {"n": np.int64(7), "b": np.bool_(True)}
INT_BOOL_FRAME = (
    b"\x82"  # fixmap, 2 entries
    b"\xa1n"  # fixstr(1) "n"
    b"\x83"  # fixmap, 3 entries
    b"\xc4\x0d__npgeneric__"  # bin8(13) b"__npgeneric__"
    b"\xc3"  # true
    b"\xc4\x04data"  # bin8(4) b"data"
    b"\x07"  # positive fixint 7
    b"\xc4\x05dtype"  # bin8(5) b"dtype"
    b"\xa3<i8"  # fixstr(3) "<i8"
    b"\xa1b"  # fixstr(1) "b"
    b"\x83"  # fixmap, 3 entries
    b"\xc4\x0d__npgeneric__"  # bin8(13) b"__npgeneric__"
    b"\xc3"  # true
    b"\xc4\x04data"  # bin8(4) b"data"
    b"\xc3"  # true
    b"\xc4\x05dtype"  # bin8(5) b"dtype"
    b"\xa3|b1"  # fixstr(3) "|b1"
)


def _ndarray_frame(data: bytes, dtype: str, shape: list[int]) -> bytes:
    """A bare ndarray map with the given fields (for malformed-input tests)."""
    assert len(data) < 256 and len(dtype) < 32 and all(0 <= n < 128 for n in shape)
    return (
        b"\x84"  # fixmap, 4 entries
        b"\xc4\x0b__ndarray__\xc3"  # b"__ndarray__": true
        b"\xc4\x04data"
        + b"\xc4"
        + bytes([len(data)])
        + data  # b"data": bin8
        + b"\xc4\x05dtype"
        + bytes([0xA0 | len(dtype)])
        + dtype.encode()  # b"dtype": fixstr
        + b"\xc4\x05shape"
        + bytes([0x90 | len(shape)])
        + bytes(shape)  # b"shape": fixarray
    )


def test_pack_float32_vector_matches_hand_written_frame() -> None:
    assert packb({"state": np.array([1.0, 2.0], dtype=np.float32)}) == STATE_FRAME


def test_pack_uint8_image_matches_hand_written_frame() -> None:
    img = np.arange(12, dtype=np.uint8).reshape(2, 2, 3)
    assert packb({"img": img}) == IMAGE_FRAME


def test_pack_numpy_scalars_match_hand_written_frames() -> None:
    assert packb(np.float32(1.5)) == SCALAR_FRAME
    assert packb({"n": np.int64(7), "b": np.bool_(True)}) == INT_BOOL_FRAME


def test_float64_scalar_is_a_plain_msgpack_float() -> None:
    # np.float64 subclasses float, so msgpack packs it natively (as openpi does).
    assert packb(np.float64(1.5)) == b"\xcb" + struct.pack(">d", 1.5)


def test_non_contiguous_array_packs_same_bytes_as_contiguous_copy() -> None:
    base = np.arange(24, dtype=np.uint8).reshape(2, 3, 4)
    view = base[:, :, ::2]
    assert not view.flags.c_contiguous
    assert packb(view) == packb(np.ascontiguousarray(view))
    fortran = np.asfortranarray(np.arange(6, dtype="<f4").reshape(2, 3))
    assert packb(fortran) == packb(np.ascontiguousarray(fortran))


def test_big_endian_and_empty_arrays() -> None:
    big = np.array([1, 2], dtype=">i4")
    frame = packb(big)
    assert b"\xc4\x08\x00\x00\x00\x01\x00\x00\x00\x02" in frame  # data in big-endian order
    assert b"\xa3>i4" in frame
    out = unpackb(frame)
    assert out.dtype == np.dtype(">i4") and out.tolist() == [1, 2]
    empty = unpackb(packb(np.zeros((0, 3), np.float32)))
    assert empty.shape == (0, 3) and empty.dtype == np.float32


def test_unpack_hand_written_frames() -> None:
    state = unpackb(STATE_FRAME)["state"]
    assert state.dtype == np.float32 and state.shape == (2,)
    assert state.tolist() == [1.0, 2.0]
    img = unpackb(IMAGE_FRAME)["img"]
    assert img.shape == (2, 2, 3) and img.dtype == np.uint8
    assert img[1, 1, 2] == 11
    scalar = unpackb(SCALAR_FRAME)
    assert isinstance(scalar, np.float32) and scalar == 1.5
    both = unpackb(INT_BOOL_FRAME)
    assert isinstance(both["n"], np.int64) and both["n"] == 7
    assert isinstance(both["b"], np.bool_) and bool(both["b"]) is True


def test_decoded_arrays_are_read_only_views_of_the_bytes() -> None:
    img = unpackb(memoryview(IMAGE_FRAME))["img"]
    assert not img.flags.writeable
    assert isinstance(img.base, bytes)  # a view of msgpack's bin object, not a copy
    with pytest.raises(ValueError):
        img[0, 0, 0] = 1
    assert img.copy().flags.writeable


def test_plain_values_round_trip() -> None:
    obj = {"prompt": "pick", "seed": 3, "x": 1.5, "ok": True, "none": None, "raw": b"\xff\xd8"}
    obj["nested"] = {"list": [1, "a"]}
    assert unpackb(packb(obj)) == obj


@pytest.mark.parametrize(
    ("value", "dtype_text"),
    [
        (np.array([object()], dtype=object), "|O"),
        (np.zeros(2, dtype=[("a", "<f4")]), "|V4"),
        (np.zeros(2, dtype=np.complex64), "<c8"),
        (np.complex128(1j), "<c16"),
    ],
)
def test_refused_dtypes_name_the_dtype(value: object, dtype_text: str) -> None:
    with pytest.raises(CodecError, match=dtype_text.replace("|", r"\|")):
        packb({"x": value})


def test_refused_dtypes_in_received_frames() -> None:
    with pytest.raises(CodecError, match=r"'\|O'"):
        unpackb(_ndarray_frame(b"\x00" * 8, "|O8", [1]))  # NumPy spells it "|O"
    with pytest.raises(CodecError, match="'<c8'"):
        unpackb(_ndarray_frame(b"\x00" * 8, "<c8", [1]))
    with pytest.raises(CodecError, match="'|V4'".replace("|", r"\|")):
        unpackb(_ndarray_frame(b"\x00" * 4, "|V4", [1]))


def test_malformed_array_maps_raise_codec_error() -> None:
    with pytest.raises(CodecError, match=r"needs 8 bytes; data has 7"):
        unpackb(_ndarray_frame(b"\x00" * 7, "<f4", [2]))
    with pytest.raises(CodecError, match="'nonsense'"):
        unpackb(_ndarray_frame(b"\x00" * 4, "nonsense", [1]))
    assert unpackb(_ndarray_frame(b"\x00" * 8, "<f4", [2])).tolist() == [0.0, 0.0]


@pytest.mark.parametrize(
    "frame",
    [
        b"\xc1",  # 0xc1 is "never used" in msgpack
        b"\x92\x01",  # fixarray(2) with only one element: truncated
        b"\x01\x02",  # two values: extra data
        b"",  # empty frame
        b"\x81\x01\x02",  # map with an int key (msgpack's strict_map_key refuses it)
    ],
)
def test_invalid_msgpack_raises_codec_error(frame: bytes) -> None:
    with pytest.raises(CodecError):
        unpackb(frame)


def test_unencodable_python_object() -> None:
    with pytest.raises(CodecError, match="cannot encode a value of type set"):
        packb({"x": {1, 2}})
