"""Camera frames from ROS messages to the RGB arrays the policy server expects.

Three steps, each cheap because a 3-camera, 30 Hz pipeline has a few milliseconds:

- :func:`image_to_rgb` turns a ``sensor_msgs/Image`` (rclpy, whose ``data`` is an
  ``array.array`` or ``bytes``, or rosbags, whose ``data`` is a NumPy array) into an
  (H, W, 3) uint8 RGB array. ``rgb8``, ``rgba8`` and ``mono8`` become strided views
  of the message buffer (no copy, also with row padding, ``step > width * channels``);
  ``bgr8`` and ``bgra8`` need a channel swap and are copied once by ``cv2.cvtColor``.
  ``mono8`` is expanded to 3 channels (a stride-0 view) with a warning logged once per
  source. When ROS 2 ``cv_bridge`` is importable it does the conversion instead; both
  paths give identical pixels.
- :func:`compressed_to_rgb` decodes a ``sensor_msgs/CompressedImage`` (JPEG/PNG,
  as ``compressed_image_transport`` publishes) with ``cv2.imdecode``.

Every frame's size is bounded before any pixel is touched: a 631-byte JPEG can declare
16000 x 16000 pixels (768 MB and seconds to decode), so the size is read from the
JPEG frame header (SOF) or the PNG ``IHDR`` chunk (:func:`compressed_size`), or from
a raw image's ``height`` and ``width``, and a frame over ``max_pixels`` (at most
:data:`~relay_ros.image_size.MAX_FRAME_PIXELS`) is refused with
:class:`FrameTooLargeError`, undecoded (the header readers are in
:mod:`relay_ros.image_size`, shared with the server's request checks).
- :func:`resize_with_pad` fits a frame into the server's ``image_size`` keeping the
  aspect ratio and padding with zeros, with the geometry of openpi's
  ``openpi_client.image_tools.resize_with_pad`` (a 480x640 frame becomes 168x224
  centred in 224x224). Shrinking approximates PIL's antialiased bilinear filter,
  which openpi uses, with OpenCV: exact 2x2 averages while the frame is at least
  twice the target, then a small Gaussian blur and ``INTER_LINEAR``; enlarging is
  ``INTER_LINEAR``.

Arrays returned as views are read-only views of the message data: call ``.copy()``
before modifying one in place.
"""

from __future__ import annotations

import logging
import math
import threading
from typing import Any, Protocol

import cv2
import numpy as np
from numpy.lib.stride_tricks import as_strided

from relay_ros.image_size import MAX_FRAME_PIXELS, compressed_size, jpeg_size, png_size

__all__ = [
    "MAX_FRAME_PIXELS",
    "SUPPORTED_ENCODINGS",
    "FrameTooLargeError",
    "ImageConversionError",
    "check_pixels",
    "compressed_size",
    "compressed_to_rgb",
    "jpeg_size",
    "png_size",
    "cv_bridge_available",
    "image_to_rgb",
    "parse_image_size",
    "resize_with_pad",
]

logger = logging.getLogger(__name__)

#: Encodings :func:`image_to_rgb` accepts -> channels per pixel.
SUPPORTED_ENCODINGS: dict[str, int] = {"rgb8": 3, "bgr8": 3, "rgba8": 4, "bgra8": 4, "mono8": 1}

_SWAP_CODES: dict[str, int] = {"bgr8": cv2.COLOR_BGR2RGB, "bgra8": cv2.COLOR_BGRA2RGB}


class ImageConversionError(ValueError):
    """A frame cannot be converted: unsupported encoding, bad size or undecodable data."""


class FrameTooLargeError(ImageConversionError):
    """A frame declares more pixels than allowed; it was not decoded.

    Attributes:
        height, width: The declared size.
        max_pixels: The bound it exceeds.
    """

    def __init__(self, height: int, width: int, max_pixels: int, what: str, why: str = "") -> None:
        self.height = int(height)
        self.width = int(width)
        self.max_pixels = int(max_pixels)
        super().__init__(
            f"{what} declares {width}x{height} pixels ({height * width}); at most "
            f"{max_pixels} are decoded{why}"
        )


def check_pixels(height: int, width: int, max_pixels: int, what: str, why: str = "") -> None:
    """Raise :class:`FrameTooLargeError` when ``height * width`` exceeds ``max_pixels``
    (``what`` names the frame in the message, ``why`` follows the bound)."""
    if int(height) * int(width) > max_pixels:
        raise FrameTooLargeError(height, width, max_pixels, what, why)


class ImageLike(Protocol):
    """What :func:`image_to_rgb` reads from a ``sensor_msgs/Image``."""

    height: int
    width: int
    encoding: str
    step: int
    data: Any


def _load_bridge() -> Any | None:
    try:
        from cv_bridge import CvBridge  # ROS 2 cv_bridge; absent outside a ROS install
    except ImportError:
        return None
    try:
        return CvBridge()
    except Exception:  # a broken install (e.g. the ROS 1 PyPI cv-bridge on NumPy 2)
        logger.warning("cv_bridge imports but cannot be used; using relay_ros's conversion")
        return None


_BRIDGE: Any | None = _load_bridge()
_mono_warned: set[str] = set()
_mono_lock = threading.Lock()


def cv_bridge_available() -> bool:
    """Return True when ROS 2 ``cv_bridge`` is used for ``sensor_msgs/Image``."""
    return _BRIDGE is not None


def _warn_mono_once(source: str, what: str) -> None:
    with _mono_lock:
        if source in _mono_warned:
            return
        _mono_warned.add(source)
    logger.warning(
        "camera %s sends %s frames; expanding grey to 3 channels (the policy expects RGB)",
        source,
        what,
    )


def _source_of(msg: Any, source: str | None) -> str:
    if source is not None:
        return source
    header = getattr(msg, "header", None)
    frame_id = getattr(header, "frame_id", "") if header is not None else ""
    return repr(frame_id) if frame_id else "'<unknown>'"


def _message_bytes(msg: Any) -> np.ndarray:
    """The message's data as a flat uint8 array, without copying."""
    data = msg.data
    if isinstance(data, np.ndarray):
        flat = data.reshape(-1)
        if flat.dtype != np.uint8:
            flat = flat.view(np.uint8)
        return flat
    return np.frombuffer(data, dtype=np.uint8)


def _check_geometry(
    msg: Any, channels: int, size: int, max_pixels: int = MAX_FRAME_PIXELS
) -> tuple[int, int, int]:
    height, width, step = int(msg.height), int(msg.width), int(msg.step)
    if height <= 0 or width <= 0:
        raise ImageConversionError(
            f"image has size {width}x{height}; expected a positive width and height"
        )
    check_pixels(height, width, max_pixels, f"{msg.encoding!r} image")
    if step < width * channels:
        raise ImageConversionError(
            f"image step {step} is smaller than width * channels = {width} * {channels} "
            f"for encoding {msg.encoding!r}"
        )
    needed = step * (height - 1) + width * channels
    if size < needed:
        raise ImageConversionError(
            f"image data has {size} bytes; {msg.encoding!r} {width}x{height} with step "
            f"{step} needs at least {needed}"
        )
    return height, width, step


def _own_to_rgb(msg: Any, channels: int) -> np.ndarray:
    """relay_ros's conversion: strided views of the buffer, a copy only to swap channels
    (the geometry is checked already)."""
    flat = _message_bytes(msg)
    height, width, step = int(msg.height), int(msg.width), int(msg.step)
    encoding = msg.encoding
    if encoding == "mono8":
        # Stride 0 on the channel axis repeats each grey byte three times: no copy.
        return as_strided(flat, (height, width, 3), (step, 1, 0), writeable=False)
    pixels = as_strided(flat, (height, width, channels), (step, channels, 1), writeable=False)
    if encoding in _SWAP_CODES:
        return cv2.cvtColor(pixels, _SWAP_CODES[encoding])
    return pixels[:, :, :3]  # rgb8 as is, rgba8 without alpha: still a view


def _bridge_to_rgb(msg: Any) -> np.ndarray:
    """ROS 2 cv_bridge's conversion (used when it is importable)."""
    assert _BRIDGE is not None
    return np.asarray(_BRIDGE.imgmsg_to_cv2(msg, desired_encoding="rgb8"))


def image_to_rgb(
    msg: ImageLike,
    *,
    source: str | None = None,
    use_cv_bridge: bool | None = None,
    max_pixels: int = MAX_FRAME_PIXELS,
) -> np.ndarray:
    """Convert a ``sensor_msgs/Image`` to an (H, W, 3) uint8 RGB array.

    Args:
        msg: Any object with ``height``, ``width``, ``encoding``, ``step`` (bytes
            per row, padding included) and ``data`` (bytes, ``array.array`` or a
            uint8 NumPy array).
        source: Name used in the once-per-source ``mono8`` warning, usually the
            topic; defaults to the message's ``header.frame_id``.
        use_cv_bridge: Force (True) or avoid (False) cv_bridge; None uses it when
            it is importable.
        max_pixels: Largest ``height * width`` converted.

    Returns:
        The RGB frame; for ``rgb8``, ``rgba8`` and ``mono8`` a read-only view of
        ``msg.data``.

    Raises:
        FrameTooLargeError: More than ``max_pixels`` pixels (checked first).
        ImageConversionError: Unsupported encoding (the message lists the supported
            ones), or a size/step that does not fit the data.
    """
    encoding = msg.encoding
    channels = SUPPORTED_ENCODINGS.get(encoding)
    if channels is None:
        raise ImageConversionError(
            f"image encoding {encoding!r} is not supported; "
            f"supported encodings: {list(SUPPORTED_ENCODINGS)}"
        )
    _check_geometry(msg, channels, _message_bytes(msg).size, max_pixels)
    if encoding == "mono8":
        _warn_mono_once(_source_of(msg, source), "mono8")
    bridge = _BRIDGE is not None if use_cv_bridge is None else use_cv_bridge
    if bridge:
        if _BRIDGE is None:
            raise ImageConversionError("use_cv_bridge=True but cv_bridge is not importable")
        return _bridge_to_rgb(msg)
    return _own_to_rgb(msg, channels)


def _fit_ratio(height: int, width: int, target: tuple[int, int]) -> float:
    """How many times larger the frame is than its aspect-kept fit into ``target``."""
    return max(width / target[1], height / target[0])


def compressed_to_rgb(
    msg: Any,
    *,
    source: str | None = None,
    target_size: tuple[int, int] | None = None,
    max_pixels: int = MAX_FRAME_PIXELS,
) -> np.ndarray:
    """Decode a ``sensor_msgs/CompressedImage`` to an (H, W, 3) uint8 RGB array.

    Args:
        msg: Object with ``format`` (``"jpeg"``, ``"png"``, or image_transport's
            ``"rgb8; jpeg compressed bgr8"`` form) and ``data`` (the encoded bytes).
        source: Name for the once-per-source warning about grey frames.
        target_size: (height, width) the frame will be fitted into by
            :func:`resize_with_pad`. A JPEG at least twice that size is decoded at
            half scale (libjpeg skips half of the inverse DCT work): the result is
            what ``resize_with_pad`` needs, at about half the decode time.
        max_pixels: Largest ``height * width`` decoded, as the header declares it.

    Returns:
        A new RGB array (OpenCV decodes to BGR; the channels are swapped). With
        ``target_size`` it may be half the encoded size.

    Raises:
        FrameTooLargeError: The header declares more than ``max_pixels`` pixels (the
            data is not decoded).
        ImageConversionError: A format that is not JPEG/PNG (e.g. ``compressedDepth``),
            data without a readable JPEG or PNG header, or data that does not decode.
    """
    fmt = str(msg.format)
    lowered = fmt.lower()
    if "compresseddepth" in lowered or not (
        lowered == "" or "jpeg" in lowered or "jpg" in lowered or "png" in lowered
    ):
        raise ImageConversionError(
            f"compressed image format {fmt!r} is not supported; expected JPEG or PNG "
            "(e.g. 'jpeg', 'png', 'rgb8; jpeg compressed bgr8')"
        )
    buffer = _message_bytes(msg)
    if buffer.size == 0:
        raise ImageConversionError(f"compressed image ({fmt!r}) has no data")
    declared = compressed_size(buffer)
    if declared is None or 0 in declared:
        raise ImageConversionError(
            f"compressed image ({fmt!r}, {buffer.size} bytes) has no readable JPEG frame "
            "header or PNG IHDR: its size is unknown, so it is not decoded"
        )
    check_pixels(declared[0], declared[1], max_pixels, f"compressed image ({fmt!r})")
    flags = cv2.IMREAD_COLOR
    if (
        target_size is not None
        and jpeg_size(buffer) is not None
        and _fit_ratio(declared[0], declared[1], target_size) >= 2.0
    ):
        flags = cv2.IMREAD_REDUCED_COLOR_2
    bgr = cv2.imdecode(buffer, flags)
    if bgr is None:
        raise ImageConversionError(
            f"compressed image ({fmt!r}, {buffer.size} bytes) could not be decoded"
        )
    if lowered.startswith(("mono", "8uc1")) or "compressed mono" in lowered:
        _warn_mono_once(_source_of(msg, source), fmt)
    return cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)


def parse_image_size(value: Any) -> tuple[int, int]:
    """A server's ``image_size`` ([height, width], positive integers) as a tuple.

    The one check behind the node's server metadata (``ServerSpec``) and the
    client-side frame encoder (``encode_frame``).

    Raises:
        ValueError: not two integers, or not positive; the message quotes the value.
    """
    try:
        height, width = (int(v) for v in value)
    except (TypeError, ValueError):
        raise ValueError(
            f"image_size {value!r} is not [height, width]; expected two integers"
        ) from None
    if height <= 0 or width <= 0:
        raise ValueError(f"image_size {value!r} must be positive")
    return height, width


# Blurs narrower than this change no pixel of a uint8 frame; they are skipped.
_MIN_SIGMA = 0.1


def _antialias_sigma(ratio: float) -> float:
    """Gaussian sigma (source pixels) that, followed by bilinear sampling, smooths a
    shrink by ``ratio`` (at most 2, after the halvings) about as much as PIL's
    antialiased bilinear filter does; 0 when no blur is needed (``ratio`` near 1, or
    enlarging).

    PIL's triangle filter as wide as ``ratio`` has variance ``ratio**2 / 6``, bilinear
    sampling alone about ``1 / 6``; the blur makes up most of the difference. The
    factor (``sqrt(ratio**2 - 1) / 2``, i.e. 1.2 times the variance difference's
    square root) was chosen by comparing with PIL on camera-like frames, clean and
    noisy, from 300x300 to 1920x1080 (bench/resize_filter.py).
    """
    if ratio <= 1.0:
        return 0.0
    sigma = 0.5 * math.sqrt(ratio * ratio - 1.0)
    return sigma if sigma >= _MIN_SIGMA else 0.0


def resize_with_pad(img: np.ndarray, height: int, width: int) -> np.ndarray:
    """Resize ``img`` to fit (height, width), keep its aspect ratio, pad with zeros.

    Same geometry as ``openpi_client.image_tools.resize_with_pad``: scale by
    ``max(w / width, h / height)``, truncate the scaled size to integers, centre
    it (the padding offsets are truncated halves).

    Same filter, approximately: openpi shrinks with PIL's antialiased bilinear (a
    triangle filter as wide as the scale factor). Here a frame at least twice the
    fitted size is first halved (exact 2x2 averages, ``cv2.INTER_AREA``), and the
    remaining factor ``r`` (1 to 2) is a Gaussian blur of sigma ``sqrt(r**2 - 1) / 2``
    source pixels followed by ``cv2.INTER_LINEAR``: for a 640x480 camera about a
    third of the time of ``INTER_AREA`` (OpenCV's slow path for non-integer factors),
    and at least as close to openpi's result (bench/resize_filter.py). Enlarging is
    ``cv2.INTER_LINEAR``.

    Args:
        img: (H, W, 3) uint8 frame (views with any strides are fine).
        height: Target height in pixels.
        width: Target width in pixels.

    Returns:
        ``img`` itself when it already has the target size, else a new
        (height, width, 3) uint8 array.

    Raises:
        ImageConversionError: ``img`` is not (H, W, 3) uint8, or the target size is
            not positive.
    """
    if height <= 0 or width <= 0:
        raise ImageConversionError(f"target size {height}x{width} must be positive")
    if img.ndim != 3 or img.shape[2] != 3 or img.dtype != np.uint8:
        raise ImageConversionError(
            f"frame has shape {img.shape} and dtype {img.dtype}; expected (H, W, 3) uint8"
        )
    cur_height, cur_width = int(img.shape[0]), int(img.shape[1])
    if (cur_height, cur_width) == (height, width):
        return img
    ratio = max(cur_width / width, cur_height / height)
    new_height = max(1, min(height, int(cur_height / ratio)))
    new_width = max(1, min(width, int(cur_width / ratio)))
    src = img
    if src.strides[2] != 1 or src.strides[1] != 3:
        src = np.ascontiguousarray(src)  # OpenCV needs packed pixels (views of rgba8, mono8)
    while src.shape[0] >= 2 * new_height and src.shape[1] >= 2 * new_width:
        half = (src.shape[1] // 2, src.shape[0] // 2)
        src = cv2.resize(src, half, interpolation=cv2.INTER_AREA)
    sigma_x = _antialias_sigma(src.shape[1] / new_width)
    sigma_y = _antialias_sigma(src.shape[0] / new_height)
    if sigma_x or sigma_y:
        src = cv2.GaussianBlur(src, (0, 0), sigmaX=sigma_x, sigmaY=sigma_y)
    resized = cv2.resize(src, (new_width, new_height), interpolation=cv2.INTER_LINEAR)
    out = np.zeros((height, width, 3), dtype=np.uint8)
    top = (height - new_height) // 2
    left = (width - new_width) // 2
    out[top : top + new_height, left : left + new_width] = resized
    return out
