"""How large an encoded frame says it is, read from its header without decoding it.

A 631-byte JPEG can declare 16000 x 16000 pixels: decoding it allocates 768 MB and
takes seconds. Every decoder of relay_ros (the node's cameras,
:mod:`relay_ros.pipeline.images`; the reference server's JPEG frames,
:mod:`relay_ros.formats.requests`) reads the size first with :func:`compressed_size`
(JPEG SOF, PNG IHDR) and refuses a frame over its bound, at most
:data:`MAX_FRAME_PIXELS`, undecoded. No dependency beyond NumPy.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["MAX_FRAME_PIXELS", "compressed_size", "jpeg_size", "png_size"]

#: Largest frame decoded, in pixels (16.8 MP; a 4K camera frame is 8.3 MP): the hard
#: cap of every bound, for the node's cameras and the reference server's JPEG frames.
MAX_FRAME_PIXELS = 4096 * 4096

# Markers that start a JPEG frame header: SOF0..SOF15 except DHT, JPG and DAC.
_SOF_MARKERS = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _as_bytes(data: Any) -> bytes | memoryview:
    if isinstance(data, np.ndarray):
        return np.ascontiguousarray(data).reshape(-1).view(np.uint8).data
    return memoryview(data).cast("B")


def jpeg_size(data: Any) -> tuple[int, int] | None:
    """``(height, width)`` declared by a JPEG's first frame header (SOF), read without
    decoding (the marker headers only, a few dozen bytes in a normal file); None when
    it is not a JPEG, the markers before the SOF are malformed, or there is none.

    ``data``: bytes, a memoryview or a uint8 array.
    """
    view = _as_bytes(data)
    size = len(view)
    if size < 4 or view[0] != 0xFF or view[1] != 0xD8:
        return None
    pos = 2  # after SOI (FF D8)
    while pos + 4 <= size:
        if view[pos] != 0xFF:
            return None
        marker = view[pos + 1]
        if marker == 0xFF:  # fill byte
            pos += 1
            continue
        if marker == 0x01 or 0xD0 <= marker <= 0xD7:  # TEM, RSTn: no length
            pos += 2
            continue
        if marker in (0xD9, 0xDA):  # EOI or start of scan before any frame header
            return None
        if marker in _SOF_MARKERS:
            if pos + 9 > size:
                return None
            height = (view[pos + 5] << 8) | view[pos + 6]
            width = (view[pos + 7] << 8) | view[pos + 8]
            return height, width
        length = (view[pos + 2] << 8) | view[pos + 3]
        if length < 2:
            return None
        pos += 2 + length
    return None


def png_size(data: Any) -> tuple[int, int] | None:
    """``(height, width)`` from a PNG's ``IHDR`` chunk (bytes 16-24), or None when it is
    not a PNG whose first chunk is ``IHDR``."""
    view = _as_bytes(data)
    if len(view) < 24 or bytes(view[:8]) != _PNG_SIGNATURE or bytes(view[12:16]) != b"IHDR":
        return None
    width = int.from_bytes(view[16:20], "big")
    height = int.from_bytes(view[20:24], "big")
    return height, width


def compressed_size(data: Any) -> tuple[int, int] | None:
    """``(height, width)`` a JPEG or PNG declares in its header, or None when the data
    is neither (or its header is unreadable)."""
    return jpeg_size(data) or png_size(data)
