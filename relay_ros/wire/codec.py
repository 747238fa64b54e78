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
"""

from __future__ import annotations

from typing import Any

import msgpack
import numpy as np

__all__ = ["CodecError", "packb", "unpackb"]

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
            return memoryview(arr).cast("B")
        except (TypeError, ValueError, BufferError):
            pass  # a buffer format memoryview cannot cast: copy like openpi does
    return arr.tobytes()


def _encode_default(obj: Any) -> Any:
    """msgpack ``default`` hook: NumPy arrays and scalars -> openpi maps."""
    if isinstance(obj, np.ndarray):
        _check_dtype(obj.dtype)
        return {
            b"__ndarray__": True,
            b"data": _array_data(obj),
            b"dtype": obj.dtype.str,
            b"shape": obj.shape,
        }
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


def unpackb(data: bytes | bytearray | memoryview) -> Any:
    """Decode one msgpack frame; array maps become read-only NumPy arrays.

    Raises:
        CodecError: ``data`` is not one complete msgpack value, or holds a malformed
            array map or a refused dtype.
    """
    try:
        return msgpack.unpackb(data, object_hook=_decode_hook, raw=False)
    except CodecError:
        raise
    except (ValueError, TypeError, msgpack.UnpackException, RecursionError) as exc:
        # ExtraData, FormatError, StackError, OutOfData and bad map keys all land here.
        raise CodecError(
            f"frame of {memoryview(data).nbytes} bytes is not valid msgpack "
            f"({type(exc).__name__}: {exc})"
        ) from exc
