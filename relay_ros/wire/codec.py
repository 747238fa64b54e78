"""msgpack + NumPy wire codec, byte-for-byte compatible with openpi's ``msgpack_numpy``.

Why msgpack: it is safe to decode untrusted input (no code execution, unlike
pickle), fast, and what openpi's websocket policy servers speak, so our client can
talk to an openpi server and an openpi client to ours.

Format (identical to ``openpi_client.msgpack_numpy``):

- ``np.ndarray`` -> map ``{b"__ndarray__": True, b"data": <bin>, b"dtype": dtype.str,
  b"shape": [..]}``; the four keys are msgpack *bin* (Python ``bytes``), ``data`` is the
  C-order raw bytes of the array.
- NumPy scalar (``np.generic``) that msgpack cannot pack natively ->
  ``{b"__npgeneric__": True, b"data": item, b"dtype": dtype.str}``. (``np.float64`` is a
  Python ``float`` subclass, so msgpack packs it as a plain float, exactly as openpi does.)
- Object (``O``), void/structured (``V``) and complex (``c``) dtypes are refused.

Differences that do not change the bytes: C-contiguous arrays are packed from a
``memoryview`` instead of ``tobytes()`` (one copy less); decoding validates every
array map and raises :class:`CodecError` instead of whatever NumPy or msgpack raise.
Decoded arrays are read-only views of the ``bytes`` object msgpack extracted from
the frame (no further copy).

Two more jobs live here because they must agree with the format above:

- :func:`pack_parts` writes the same bytes as :func:`packb` as a list of pieces, large
  arrays and byte strings as views of their own memory, so the transport can copy
  them once into its frame buffer. The array map is defined once, in
  :func:`_ndarray_map`, and both encoders use it.
- :func:`unpackb` takes :class:`DecodeLimits`: a frame is measured (bytes, objects,
  nesting) by a scan of its msgpack headers before msgpack builds anything, so a
  small frame that declares millions of empty containers is refused instead of
  costing gigabytes of memory.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

import msgpack
import numpy as np

__all__ = [
    "OBSERVATION_LIMITS",
    "REPLY_LIMITS",
    "CodecError",
    "DecodeLimits",
    "pack_parts",
    "packb",
    "unpackb",
]

# dtype kinds openpi refuses: object, void (structured), complex.
_REFUSED_KINDS = frozenset("OVc")
# Kinds NumPy cannot export through the buffer protocol (datetime, timedelta):
# those are packed with tobytes() like every non-contiguous array.
_NO_BUFFER_KINDS = frozenset("Mm")


class CodecError(ValueError):
    """A value cannot be encoded, or a frame cannot be decoded."""


def _check_dtype(dtype: np.dtype) -> None:
    if dtype.kind in _REFUSED_KINDS:
        raise CodecError(
            f"dtype {dtype.str!r} ({dtype}) is not supported; "
            "expected a numeric, bool or string dtype (not object, structured or complex)"
        )


def _array_data(arr: np.ndarray) -> bytes | memoryview:
    """Raw C-order bytes of ``arr``; a zero-copy view when the layout allows it."""
    if arr.flags.c_contiguous and arr.size and arr.dtype.kind not in _NO_BUFFER_KINDS:
        # msgpack packs a flat byte memoryview as bin with the same bytes as tobytes().
        try:
            return arr.data.cast("B")
        except (TypeError, ValueError, BufferError):
            pass  # a buffer format memoryview cannot cast: copy like openpi does
    return arr.tobytes()


_DATA_KEY = b"data"


def _ndarray_map(arr: np.ndarray, data: Any) -> dict[bytes, Any]:
    """The openpi array map, in openpi's key order; ``data`` is the raw bytes (or a
    stand-in that :func:`pack_parts` replaces by a view of them)."""
    return {b"__ndarray__": True, _DATA_KEY: data, b"dtype": arr.dtype.str, b"shape": arr.shape}


def _encode_default(obj: Any) -> Any:
    """msgpack ``default`` hook: NumPy arrays and scalars -> openpi maps."""
    if isinstance(obj, np.ndarray):
        _check_dtype(obj.dtype)
        return _ndarray_map(obj, _array_data(obj))
    if isinstance(obj, np.generic):
        _check_dtype(obj.dtype)
        return {
            b"__npgeneric__": True,
            b"data": obj.item(),
            b"dtype": obj.dtype.str,
        }
    raise CodecError(
        f"cannot encode a value of type {type(obj).__name__}; expected None, bool, int, "
        "float, str, bytes, list, tuple, dict or a numeric NumPy array/scalar"
    )


def _decode_dtype(value: Any) -> np.dtype:
    if not isinstance(value, str):
        raise CodecError(f"array dtype {value!r} is not a dtype string such as '<f4'")
    try:
        dtype = np.dtype(value)
    except TypeError as exc:
        raise CodecError(f"array dtype {value!r} is not a valid NumPy dtype string") from exc
    _check_dtype(dtype)
    return dtype


def _decode_ndarray(obj: dict[Any, Any]) -> np.ndarray:
    data = obj.get(b"data")
    shape = obj.get(b"shape")
    dtype = _decode_dtype(obj.get(b"dtype"))
    if not isinstance(data, bytes):
        raise CodecError(f"array data is {type(data).__name__}; expected bin (bytes)")
    if not isinstance(shape, list) or not all(
        isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape
    ):
        raise CodecError(f"array shape {shape!r} is not a list of non-negative integers")
    count = 1
    for n in shape:
        count *= n
    if count * dtype.itemsize != len(data):
        raise CodecError(
            f"array of shape {tuple(shape)} and dtype {dtype.str!r} needs "
            f"{count * dtype.itemsize} bytes; data has {len(data)}"
        )
    # A view of the immutable bytes object: read-only, no copy.
    return np.ndarray(buffer=data, dtype=dtype, shape=tuple(shape))


def _decode_generic(obj: dict[Any, Any]) -> np.generic:
    dtype = _decode_dtype(obj.get(b"dtype"))
    try:
        return dtype.type(obj.get(b"data"))
    except (TypeError, ValueError, OverflowError) as exc:
        raise CodecError(
            f"scalar {obj.get(b'data')!r} cannot be converted to dtype {dtype.str!r}"
        ) from exc


def _decode_hook(obj: dict[Any, Any]) -> Any:
    """msgpack ``object_hook``: openpi maps -> NumPy arrays and scalars."""
    if b"__ndarray__" in obj:
        return _decode_ndarray(obj)
    if b"__npgeneric__" in obj:
        return _decode_generic(obj)
    return obj


def packb(obj: Any) -> bytes:
    """Encode ``obj`` as msgpack with NumPy arrays/scalars in openpi's format.

    Raises:
        CodecError: ``obj`` holds an object, structured or complex array or scalar, or a
            value msgpack cannot encode.
    """
    try:
        return msgpack.packb(obj, default=_encode_default, use_bin_type=True)
    except CodecError:
        raise
    except (TypeError, ValueError, OverflowError) as exc:
        raise CodecError(f"cannot encode value: {exc}") from exc


@dataclass(frozen=True)
class DecodeLimits:
    """Bounds on one decoded frame; a frame over any of them raises :class:`CodecError`.

    Attributes:
        max_bytes: frame size.
        max_objects: msgpack values in the frame (every container and scalar counts),
            which bounds the memory of the decoded objects to a small multiple of it.
        max_depth: container nesting.
        max_str_len, max_bin_len, max_array_len, max_map_len: passed to msgpack.
    """

    max_bytes: int
    max_objects: int
    max_depth: int = 32
    max_str_len: int = 2**20
    max_bin_len: int | None = None  # None: max_bytes
    max_array_len: int = 100_000
    max_map_len: int = 10_000


#: Policy replies: a few arrays (π0/π0.5) or action groups (GR00T) and timing maps.
REPLY_LIMITS = DecodeLimits(max_bytes=8 * 2**20, max_objects=100_000)
#: Observations: camera frames (arrays or JPEG bytes), state, prompt, options.
OBSERVATION_LIMITS = DecodeLimits(max_bytes=64 * 2**20, max_objects=100_000)

# Header byte -> bytes that follow it for fixed-size values (scalars, fixext).
_FIXED_TAIL: dict[int, int] = {0xC0: 0, 0xC2: 0, 0xC3: 0, 0xCA: 4, 0xCB: 8}
_FIXED_TAIL.update({0xCC: 1, 0xCD: 2, 0xCE: 4, 0xCF: 8, 0xD0: 1, 0xD1: 2, 0xD2: 4, 0xD3: 8})
_FIXED_TAIL.update({0xD4: 2, 0xD5: 3, 0xD6: 5, 0xD7: 9, 0xD8: 17})
# Header byte -> (length field format, extra bytes after it) for str, bin and ext.
_SIZED: dict[int, tuple[str, int]] = {
    0xC4: (">B", 0),
    0xC5: (">H", 0),
    0xC6: (">I", 0),
    0xC7: (">B", 1),
    0xC8: (">H", 1),
    0xC9: (">I", 1),
    0xD9: (">B", 0),
    0xDA: (">H", 0),
    0xDB: (">I", 0),
}
# Header byte -> (count field format, items per count) for array16/32, map16/32.
_CONTAINERS: dict[int, tuple[str, int]] = {
    0xDC: (">H", 1),
    0xDD: (">I", 1),
    0xDE: (">H", 2),
    0xDF: (">I", 2),
}


def _scan(data: memoryview, limits: DecodeLimits) -> None:
    """Walk the msgpack headers of one value without building it; raise
    :class:`CodecError` when it has more objects or deeper nesting than ``limits``
    allow, or is truncated. Payloads (str, bin, ext) are skipped, not read."""
    size = len(data)
    pos = 0
    objects = 0
    stack: list[int] = []  # items still expected by each open container
    while True:
        if pos >= size:
            raise CodecError(f"frame of {size} bytes is truncated msgpack")
        head = data[pos]
        pos += 1
        objects += 1
        if objects > limits.max_objects:
            raise CodecError(
                f"frame of {size} bytes holds more than {limits.max_objects} msgpack values"
            )
        items = 0
        if head <= 0x7F or head >= 0xE0:
            pass
        elif head <= 0x8F:
            items = 2 * (head & 0x0F)
        elif head <= 0x9F:
            items = head & 0x0F
        elif head <= 0xBF:
            pos += head & 0x1F
        elif head in _FIXED_TAIL:
            pos += _FIXED_TAIL[head]
        elif head in _SIZED:
            fmt, extra = _SIZED[head]
            width = struct.calcsize(fmt)
            if pos + width > size:
                raise CodecError(f"frame of {size} bytes is truncated msgpack")
            pos += width + extra + struct.unpack_from(fmt, data, pos)[0]
        elif head in _CONTAINERS:
            fmt, per = _CONTAINERS[head]
            width = struct.calcsize(fmt)
            if pos + width > size:
                raise CodecError(f"frame of {size} bytes is truncated msgpack")
            items = per * struct.unpack_from(fmt, data, pos)[0]
            pos += width
        else:  # 0xC1 is never used
            raise CodecError(f"frame of {size} bytes is not valid msgpack (byte 0x{head:02x})")
        if items:
            if len(stack) >= limits.max_depth:
                raise CodecError(
                    f"frame of {size} bytes nests containers deeper than {limits.max_depth}"
                )
            stack.append(items)
            continue
        while stack:
            stack[-1] -= 1
            if stack[-1]:
                break
            stack.pop()
        if not stack:
            if pos > size:
                raise CodecError(f"frame of {size} bytes is truncated msgpack")
            return


def unpackb(data: bytes | bytearray | memoryview, limits: DecodeLimits | None = None) -> Any:
    """Decode one msgpack frame; array maps become read-only NumPy arrays.

    Args:
        data: the frame.
        limits: bounds checked before anything is built (:class:`DecodeLimits`);
            None trusts the frame (for data this process wrote itself).

    Raises:
        CodecError: ``data`` is not one complete msgpack value, exceeds ``limits``, or
            holds a malformed array map or a refused dtype.
    """
    view = memoryview(data).cast("B")
    options: dict[str, Any] = {}
    if limits is not None:
        if view.nbytes > limits.max_bytes:
            raise CodecError(
                f"frame of {view.nbytes} bytes exceeds the limit of {limits.max_bytes} bytes"
            )
        _scan(view, limits)
        options = {
            "max_str_len": limits.max_str_len,
            "max_bin_len": limits.max_bytes if limits.max_bin_len is None else limits.max_bin_len,
            "max_array_len": limits.max_array_len,
            "max_map_len": limits.max_map_len,
            "max_ext_len": limits.max_str_len,
        }
    try:
        return msgpack.unpackb(data, object_hook=_decode_hook, raw=False, **options)
    except CodecError:
        raise
    except (ValueError, TypeError, msgpack.UnpackException, RecursionError) as exc:
        # ExtraData, FormatError, StackError, OutOfData and bad map keys all land here.
        raise CodecError(
            f"frame of {view.nbytes} bytes is not valid msgpack ({type(exc).__name__}: {exc})"
        ) from exc


# Arrays and bytes at least this large are written from their own memory by
# pack_parts; smaller ones and everything else go through packb as a whole.
_DIRECT_BYTES = 1024
# Kinds written from their own memory: bool, signed, unsigned, float.
_DIRECT_KINDS = frozenset("biuf")
# Containers nested deeper than this are left to packb (msgpack's own limit applies).
_PARTS_DEPTH = 64


class _TooDeep(Exception):
    """Nesting beyond what _pack_into walks; pack_parts falls back to packb."""


def _container_header(length: int, fix: int, code16: int, code32: int) -> bytes:
    if length < 16:
        return bytes((fix | length,))
    if length < 0x10000:
        return struct.pack(">BH", code16, length)
    return struct.pack(">BI", code32, length)


def _bin_header(length: int) -> bytes:
    if length < 0x100:
        return struct.pack(">BB", 0xC4, length)
    if length < 0x10000:
        return struct.pack(">BH", 0xC5, length)
    return struct.pack(">BI", 0xC6, length)


def _pack_into(obj: Any, parts: list[bytes | memoryview], depth: int) -> None:
    if depth > _PARTS_DEPTH:
        raise _TooDeep
    if isinstance(obj, dict):
        parts.append(_container_header(len(obj), 0x80, 0xDE, 0xDF))
        for key, value in obj.items():
            _pack_into(key, parts, depth + 1)
            _pack_into(value, parts, depth + 1)
    elif isinstance(obj, (list, tuple)):
        parts.append(_container_header(len(obj), 0x90, 0xDC, 0xDD))
        for value in obj:
            _pack_into(value, parts, depth + 1)
    elif (
        isinstance(obj, np.ndarray)
        and obj.nbytes >= _DIRECT_BYTES
        and obj.dtype.kind in _DIRECT_KINDS
        and obj.flags.c_contiguous
    ):
        try:
            data = obj.data.cast("B")
        except (TypeError, ValueError, BufferError):  # e.g. non-native byte order
            parts.append(packb(obj))
            return
        fields = _ndarray_map(obj, None)
        parts.append(_container_header(len(fields), 0x80, 0xDE, 0xDF))
        for key, value in fields.items():
            parts.append(packb(key))
            if key == _DATA_KEY:
                parts.append(_bin_header(data.nbytes))
                parts.append(data)
            else:
                parts.append(packb(value))
    elif isinstance(obj, (bytes, bytearray)) and len(obj) >= _DIRECT_BYTES:
        # e.g. JPEG frames: msgpack bin, written from the object's own memory.
        parts.append(_bin_header(len(obj)))
        parts.append(memoryview(obj))
    else:
        parts.append(packb(obj))


def pack_parts(obj: Any) -> list[bytes | memoryview]:
    """The msgpack encoding of ``obj`` as pieces whose concatenation equals
    ``packb(obj)``; large contiguous arrays and byte strings are views of their own
    memory (no copy), so the caller can copy them once into its frame buffer.

    Raises:
        CodecError: ``obj`` cannot be encoded (as :func:`packb`).
    """
    parts: list[bytes | memoryview] = []
    try:
        _pack_into(obj, parts, 0)
    except _TooDeep:
        return [packb(obj)]
    return parts
