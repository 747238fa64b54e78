"""Camera frames as the policy server wants them on the wire: raw arrays or JPEG bytes.

A π0.5 request with three raw 224x224 frames is 452 kB; over a 20 Mbit/s uplink
that alone takes about 180 ms, more than the model's inference. π0 and π0.5
servers also accept each frame as JPEG bytes (docs/protocol.md), about
a twentieth of the size; GR00T servers take raw arrays only.

:func:`encode_frame` does for a ``PolicyClient`` user what ``policy_node`` does with
``image_encoding: jpeg``: fit the frame into the server's ``image_size`` first
(openpi's ``resize_with_pad`` geometry, :func:`relay_ros.pipeline.images.resize_with_pad`),
then encode it, so the server receives exactly the pixels it would have resized
to, compressed::

    meta = client.get_server_metadata()
    obs = {"images": encode_images(frames, meta["image_size"]), "state": ..., "prompt": ...}

The JPEG holds the RGB image the standard way (a JPEG decoder that returns RGB,
such as PIL, gives the frame back; OpenCV's ``imdecode`` gives BGR, as for any
JPEG file). 4:2:0 chroma subsampling, baseline, optimized Huffman tables.

:data:`DEFAULT_JPEG_QUALITY` is chosen from measured bytes against mean absolute
pixel error (``bench/jpeg_quality.py``, docs/benchmarks.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import cv2
import numpy as np

from relay_ros.formats import FormatError, format_for
from relay_ros.pipeline.images import ImageConversionError, parse_image_size, resize_with_pad

__all__ = [
    "DEFAULT_JPEG_QUALITY",
    "IMAGE_ENCODINGS",
    "ImageEncodingError",
    "check_image_encoding",
    "decode_jpeg",
    "encode_frame",
    "encode_images",
    "encode_jpeg",
    "fit_and_encode",
]

#: The values of ``image_encoding``.
IMAGE_ENCODINGS: tuple[str, ...] = ("raw", "jpeg")

#: JPEG quality (1..100) used when none is given: where the bytes-against-error curve
#: bends, a few grey levels of mean error, and three frames of a textured scene stay
#: within a 60 kB request (``bench/jpeg_quality.py``; docs/benchmarks.md).
DEFAULT_JPEG_QUALITY = 90

_ENCODE_PARAMS_CACHE: dict[int, list[int]] = {}


class ImageEncodingError(ValueError):
    """A frame cannot be encoded, or the encoding does not fit the model."""


def _check_quality(quality: Any) -> int:
    if isinstance(quality, bool) or not isinstance(quality, (int, np.integer)):
        raise ImageEncodingError(f"jpeg_quality {quality!r} is not an integer in [1, 100]")
    if not 1 <= int(quality) <= 100:
        raise ImageEncodingError(f"jpeg_quality {quality!r} is outside [1, 100]")
    return int(quality)


def check_image_encoding(
    model: str, encoding: str, quality: Any = DEFAULT_JPEG_QUALITY, layout: str | None = None
) -> None:
    """Refuse an ``image_encoding`` / ``jpeg_quality`` the model's server cannot take.

    Raises:
        ImageEncodingError: an unknown encoding, a quality outside [1, 100], or
            ``"jpeg"`` for a wire format whose servers take raw arrays only (GR00T,
            a layout without ``jpeg: true``).
    """
    if encoding not in IMAGE_ENCODINGS:
        raise ImageEncodingError(
            f"image_encoding {encoding!r} is unknown; expected one of {list(IMAGE_ENCODINGS)}"
        )
    _check_quality(quality)
    if encoding != "jpeg":
        return
    try:
        fmt = format_for(model, layout)
    except FormatError as exc:
        raise ImageEncodingError(str(exc)) from None
    if not fmt.jpeg_allowed:
        what = f"model {model!r}" if not layout else f"model {model!r} with {fmt.name}"
        raise ImageEncodingError(
            f"image_encoding 'jpeg' does not work with {what}: its server takes raw "
            "arrays only; use image_encoding 'raw' (JPEG is for the pi0/pi05 family)"
        )


def encode_jpeg(rgb: np.ndarray, quality: int = DEFAULT_JPEG_QUALITY) -> bytes:
    """JPEG bytes of an (H, W, 3) uint8 RGB frame, without resizing.

    Raises:
        ImageEncodingError: not an (H, W, 3) uint8 array, a bad quality, or the
            encoder failed.
    """
    q = _check_quality(quality)
    if not isinstance(rgb, np.ndarray) or rgb.ndim != 3 or rgb.shape[2] != 3:
        raise ImageEncodingError(
            f"frame has shape {getattr(rgb, 'shape', None)}; expected (H, W, 3) RGB"
        )
    if rgb.dtype != np.uint8:
        raise ImageEncodingError(f"frame has dtype {rgb.dtype}; expected uint8")
    params = _ENCODE_PARAMS_CACHE.get(q)
    if params is None:
        params = [int(cv2.IMWRITE_JPEG_QUALITY), q, int(cv2.IMWRITE_JPEG_OPTIMIZE), 1]
        _ENCODE_PARAMS_CACHE[q] = params
    bgr = cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR)
    ok, buffer = cv2.imencode(".jpg", bgr, params)
    if not ok:
        raise ImageEncodingError(f"OpenCV could not encode a {rgb.shape} frame as JPEG")
    return buffer.tobytes()


def decode_jpeg(data: bytes) -> np.ndarray:
    """(H, W, 3) uint8 RGB from JPEG bytes (the inverse of :func:`encode_jpeg`).

    Raises:
        ImageEncodingError: the bytes do not decode to a colour image.
    """
    bgr = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
    if bgr is None:
        raise ImageEncodingError(f"{len(data)} bytes do not decode as a JPEG image")
    return cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)


def encode_frame(
    rgb: np.ndarray,
    image_size: Sequence[int],
    *,
    encoding: str = "jpeg",
    quality: int = DEFAULT_JPEG_QUALITY,
) -> np.ndarray | bytes:
    """Fit one RGB frame into the server's ``image_size`` and encode it for the wire.

    Args:
        rgb: (H, W, 3) uint8 RGB frame of any size (views are fine).
        image_size: [height, width] from the server metadata's ``image_size``.
        encoding: ``"jpeg"`` (bytes) or ``"raw"`` (the resized uint8 array).
        quality: JPEG quality 1..100.

    Returns:
        JPEG bytes, or for ``"raw"`` an (height, width, 3) uint8 array.

    Raises:
        ImageEncodingError: a bad frame, size, encoding or quality.
    """
    if encoding not in IMAGE_ENCODINGS:
        raise ImageEncodingError(
            f"encoding {encoding!r} is unknown; expected one of {list(IMAGE_ENCODINGS)}"
        )
    try:
        size = parse_image_size(image_size)
    except ValueError as exc:
        raise ImageEncodingError(str(exc)) from None
    return fit_and_encode(rgb, size, encoding, quality)


def fit_and_encode(
    rgb: np.ndarray, size: tuple[int, int], encoding: str, quality: int = DEFAULT_JPEG_QUALITY
) -> np.ndarray | bytes:
    """``rgb`` fitted into ``size`` (height, width) with openpi's ``resize_with_pad``,
    then as ``encoding`` gives it to the wire: a packed uint8 array (``"raw"``) or JPEG
    bytes (``"jpeg"``). The one place both :func:`encode_frame` and the node's camera
    frames (:mod:`relay_ros.pipeline.camera_frames`) turn a frame into wire data.

    Raises:
        ImageEncodingError: a frame that is not RGB uint8, or a bad quality.
    """
    try:
        fitted = resize_with_pad(rgb, *size)
    except ImageConversionError as exc:
        raise ImageEncodingError(str(exc)) from exc
    if encoding == "jpeg":
        return encode_jpeg(fitted, quality)
    # Already at the target size, ``fitted`` may be a strided view of the frame (an
    # immutable message buffer): the wire wants packed pixels.
    return np.ascontiguousarray(fitted)


def encode_images(
    images: Mapping[str, np.ndarray],
    image_size: Sequence[int],
    *,
    encoding: str = "jpeg",
    quality: int = DEFAULT_JPEG_QUALITY,
) -> dict[str, np.ndarray | bytes]:
    """:func:`encode_frame` for every camera of an observation's ``images`` map.

    Raises:
        ImageEncodingError: as :func:`encode_frame`; the message names the camera.
    """
    out: dict[str, np.ndarray | bytes] = {}
    for key, frame in images.items():
        try:
            out[key] = encode_frame(frame, image_size, encoding=encoding, quality=quality)
        except ImageEncodingError as exc:
            raise ImageEncodingError(f"camera {key!r}: {exc}") from exc
    return out
