"""Each camera's newest message, converted to a wire frame only when an observation is built.

Three cameras at 30 Hz deliver 90 frames a second, but the node sends an observation
a few times a second (every ``execute_horizon`` actions). Converting every frame on
arrival (decode, resize, maybe JPEG-encode) wastes most of that work.
:class:`CameraFrames` keeps only a reference to each camera's newest message and
its arrival time; :meth:`CameraFrames.assemble` converts the newest message of every
camera when a request is made:

- ``sensor_msgs/Image`` (as a serialized CDR buffer, read by
  :mod:`relay_ros.pipeline.image_cdr`, or as a message object): to RGB without a
  copy where possible, then ``resize_with_pad`` to the server's ``image_size``;
- an (H, W, 3) uint8 RGB array: taken as it is;
- ``sensor_msgs/CompressedImage``: decoded (at half scale when the frame is at
  least twice the target size), then ``resize_with_pad``;
- then, with ``encoding="jpeg"``, JPEG-encoded for π0/π0.5 servers (fitting and
  encoding: :func:`relay_ros.pipeline.image_encoding.fit_and_encode`).

A converted frame is cached until a newer message of that camera arrives, so a
camera slower than the request rate is converted once per message. The node may
also convert a message as it arrives (:meth:`CameraFrames.prepare`) when a request
is due within a camera period or two: then the request finds its frames ready and
only the work of the frames that arrived since is on its path to the wire. The
cameras are converted one after the other on the caller's thread.

**Frame size bound.** Before a message is decoded its size is read from its header
(JPEG SOF, PNG IHDR, a raw image's ``height`` and ``width``) and checked: at most
:data:`~relay_ros.pipeline.images.MAX_FRAME_PIXELS` (16.8 MP), and once a camera has
delivered a frame that converted, at most :data:`SIZE_GROWTH_FACTOR` (4) times that
frame's pixels: a 631-byte JPEG declaring 16000 x 16000 pixels (768 MB and seconds of
decoding on the executor thread) is refused undecoded. A camera that really changed
its size (a driver reconfigured) keeps sending the new size: one size under the hard
cap received on every frame for :data:`NEW_SIZE_AFTER_S` (1 s) becomes the camera's
size. A refused frame leaves the camera on its last good one until that is stale;
the refusal is kept (:meth:`CameraFrames.refusal`) so the hold that follows says why.

This module has no rclpy: a serialized buffer that the CDR reader does not
understand is handed to the ``deserialize`` callable the node gives (rclpy's
``deserialize_message``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from relay_ros.pipeline.camera_map import CameraEntry
from relay_ros.pipeline.image_cdr import CdrImageError, parse_image_cdr
from relay_ros.pipeline.image_encoding import (
    DEFAULT_JPEG_QUALITY,
    IMAGE_ENCODINGS,
    ImageEncodingError,
    encode_jpeg,
    fit_and_encode,
)
from relay_ros.pipeline.images import (
    MAX_FRAME_PIXELS,
    check_pixels,
    compressed_size,
    compressed_to_rgb,
    image_to_rgb,
)

__all__ = [
    "FRAME_LOOKAHEAD_S",
    "LAST_READ_LEAD_S",
    "NEW_SIZE_AFTER_S",
    "SIZE_GROWTH_FACTOR",
    "CameraFrames",
    "FrameConversionError",
    "WireFrames",
]

# A frame is converted on arrival when the next request is due within this many of
# its camera's frame periods: the next frame might not come before the request.
_PREPARE_PERIODS = 1.5
# Bounds of that window, seconds (a camera's first frame has no period yet).
_PREPARE_WINDOW_MIN_S = 0.01
_PREPARE_WINDOW_MAX_S = 0.1
# Longer intervals between two messages of a camera are not taken as its period.
_MAX_PERIOD_S = 0.2
#: A node that reads frames on demand hands them over from this long before a
#: request is due: the widest window in which a frame may be converted on arrival.
FRAME_LOOKAHEAD_S = _PREPARE_WINDOW_MAX_S
#: ... and reads them one last time this long before the request, so that only the
#: frames that arrive after that are converted on the request's own tick (a burst
#: of three camera frames takes 1-3 ms to convert).
LAST_READ_LEAD_S = 0.003
#: A camera's frame may have at most this many times the pixels of its last frame
#: that converted (twice its width and height).
SIZE_GROWTH_FACTOR = 4
#: ... unless the camera sent that one larger size (under the hard cap) on every frame
#: for this long, seconds: then it is the camera's new size.
NEW_SIZE_AFTER_S = 1.0

logger = logging.getLogger(__name__)


class FrameConversionError(ValueError):
    """The newest message of a camera could not be converted.

    Attributes:
        key: The camera key.
        topic: The topic the message came from.
        reason: What is wrong with the message (without the camera and topic).
    """

    def __init__(self, key: str, topic: str, reason: str) -> None:
        super().__init__(f"camera '{key}' on {topic}: {reason}")
        self.key = key
        self.topic = topic
        self.reason = reason


@dataclass(frozen=True)
class WireFrames:
    """The frames of one observation, ready for the wire.

    Attributes:
        frames: Camera key -> (height, width, 3) uint8 array, or JPEG bytes.
        received: Camera key -> arrival time (node clock) of the message used.
        conversion_s: Wall time this call spent converting (0 when every frame came
            from the cache).
        converted: How many cameras were converted now (the rest were cached).
        wire_bytes: Bytes of frame data the observation will carry.
        newest_prepared_s: Processing time (read and conversion) of the newest frame
            when it was converted on arrival (:meth:`CameraFrames.prepare`), else 0:
            with ``conversion_s`` it is the frame work between the newest frame's
            arrival and the wire.
        read_s: Time spent reading the frames converted now from the middleware
            (before this call; see :meth:`CameraFrames.store`).
    """

    frames: dict[str, np.ndarray | bytes]
    received: dict[str, float]
    conversion_s: float
    converted: int
    wire_bytes: int
    newest_prepared_s: float = 0.0
    read_s: float = 0.0


class _SizeBound:
    """How many pixels one camera's next frame may declare (module docstring)."""

    def __init__(self) -> None:
        self.expected: tuple[int, int] | None = None
        self._candidate: tuple[int, int] | None = None
        self._since = 0.0

    def check(self, key: str, height: int, width: int, received: float) -> None:
        """Raise :class:`~relay_ros.pipeline.images.FrameTooLargeError` for a frame of
        ``height`` x ``width`` received at ``received`` that is over the bound."""
        check_pixels(height, width, MAX_FRAME_PIXELS, "frame")
        if self.expected is None:
            return
        eh, ew = self.expected
        limit = SIZE_GROWTH_FACTOR * eh * ew
        if height * width <= limit:
            self._candidate = None
            return
        if self._candidate != (height, width):
            self._candidate, self._since = (height, width), received
        elif received - self._since >= NEW_SIZE_AFTER_S:
            logger.warning(
                "camera '%s' sends %dx%d frames since %.1f s instead of %dx%d; taking that "
                "as its new size",
                key,
                width,
                height,
                received - self._since,
                ew,
                eh,
            )
            self._candidate = None
            return
        check_pixels(
            height,
            width,
            limit,
            "frame",
            f" ({SIZE_GROWTH_FACTOR} x the {ew}x{eh} of this camera's frames; a new size is "
            f"taken after {NEW_SIZE_AFTER_S:g} s of it)",
        )

    def converted(self, height: int, width: int) -> None:
        """A frame of this size converted: the camera's size."""
        self.expected = (height, width)
        self._candidate = None


@dataclass
class _Latest:
    msg: Any
    received: float
    converted: np.ndarray | bytes | None = None
    size: tuple[int, int] | None = None
    read_s: float = 0.0  # wall time of reading it from the middleware
    processing_s: float = 0.0  # wall time of reading and converting it
    number: int = 0  # position in the order of all stored messages (see CameraFrames.stored)


class CameraFrames:
    """The newest message of each camera, converted on demand.

    Args:
        cameras: The camera map's entries (key, topic, transport).
        encoding: ``"raw"`` (uint8 arrays) or ``"jpeg"`` (JPEG bytes).
        jpeg_quality: JPEG quality 1..100 for ``"jpeg"``.
        deserialize: Turns a serialized ``sensor_msgs/Image`` the CDR reader does not
            understand into a message object (the node passes rclpy's
            ``deserialize_message`` bound to ``Image``); None refuses such buffers.

    Not thread-safe: call :meth:`store` and :meth:`assemble` from one thread (the
    node's executor thread).

    Raises:
        ImageEncodingError: an unknown encoding or a bad quality.
    """

    def __init__(
        self,
        cameras: Sequence[CameraEntry],
        *,
        encoding: str = "raw",
        jpeg_quality: int = DEFAULT_JPEG_QUALITY,
        deserialize: Callable[[bytes], Any] | None = None,
    ) -> None:
        if encoding not in IMAGE_ENCODINGS:
            raise ImageEncodingError(
                f"image_encoding {encoding!r} is unknown; expected one of {list(IMAGE_ENCODINGS)}"
            )
        if encoding == "jpeg":
            encode_jpeg(np.zeros((8, 8, 3), np.uint8), jpeg_quality)  # validates the quality
        self._cameras = {c.key: c for c in cameras}
        self.encoding = encoding
        self.jpeg_quality = int(jpeg_quality)
        self._deserialize = deserialize
        self._latest: dict[str, _Latest] = {}
        self._good: dict[str, _Latest] = {}  # the newest message that converted, per camera
        # Why the newest message of a camera did not convert (until one does).
        self._rejected: dict[str, str] = {}
        self._period: dict[str, float] = {}  # last interval between two messages per camera
        self._stored = 0  # messages stored so far, all cameras
        self._bounds = {key: _SizeBound() for key in self._cameras}

    # Arrival: keep a reference, nothing else.

    def store(self, key: str, msg: Any, received: float, *, read_s: float = 0.0) -> None:
        """Keep ``msg`` as the newest message of camera ``key`` (arrived at ``received``;
        reading it from the middleware took ``read_s``, part of its processing time).

        Raises:
            KeyError: ``key`` is not a camera of the map.
        """
        if key not in self._cameras:
            raise KeyError(f"camera {key!r} is not one of {list(self._cameras)}")
        previous = self._latest.get(key)
        gap = received - previous.received if previous is not None else 0.0
        # A node that reads frames only before requests sees gaps of a request
        # period between windows: those are not the camera's frame period.
        if 0.0 < gap <= _MAX_PERIOD_S:
            self._period[key] = gap
        self._stored += 1
        self._latest[key] = _Latest(msg, received, read_s=read_s, number=self._stored)

    @property
    def stored(self) -> int:
        """How many messages :meth:`store` has kept so far (all cameras): a mark for
        :meth:`assemble`'s ``timed_after``."""
        return self._stored

    def due_soon(self, key: str, now: float, request_at: float | None) -> bool:
        """Whether camera ``key``'s newest message should be converted now.

        True when the next request (at ``request_at`` on the node clock; None = not
        planned) is due before the camera's next frame is likely to arrive: within
        1.5 of its frame periods (at least 10 ms, at most 100 ms).
        """
        if request_at is None:
            return False
        period = self._period.get(key, _PREPARE_WINDOW_MAX_S / _PREPARE_PERIODS)
        window = min(_PREPARE_WINDOW_MAX_S, max(_PREPARE_WINDOW_MIN_S, _PREPARE_PERIODS * period))
        return now >= request_at - window

    def period(self, key: str) -> float | None:
        """Camera ``key``'s last interval between two messages (s), None before two came
        close enough together (at most 0.2 s) to tell."""
        return self._period.get(key)

    def stamps(self) -> dict[str, float]:
        """Camera key -> arrival time of its newest message (cameras with one only)."""
        return {key: latest.received for key, latest in self._latest.items()}

    def missing(self) -> list[str]:
        """Cameras of the map with no usable message yet, in map order."""
        return [key for key in self._cameras if key not in self._latest]

    def describe_camera(self, key: str) -> str:
        """``camera '<key>' on <topic>``: how messages name a camera of the map."""
        return f"camera '{key}' on {self._cameras[key].topic}"

    def why_missing(self, key: str) -> str:
        """Why camera ``key`` has no usable frame: none came yet, or the last one did
        not convert (its reason: an unsupported encoding stays the cause on
        ``/diagnostics``, not "no frame yet")."""
        rejected = self._rejected.get(key)
        if rejected is not None:
            return f"no usable frame from {self.describe_camera(key)}: {rejected}"
        return f"no frame yet from {self.describe_camera(key)}"

    def _reject(self, key: str) -> None:
        """The newest message of ``key`` did not convert: fall back to the last one
        that did (it ages out through the freshness check), or to none."""
        good = self._good.get(key)
        if good is None:
            self._latest.pop(key, None)
        else:
            self._latest[key] = good

    def clear(self) -> None:
        """Forget every message (after a reconnect: the image size may change)."""
        self._latest.clear()
        self._good.clear()
        self._period.clear()
        self._rejected.clear()

    def refusal(self, key: str) -> str | None:
        """Why camera ``key``'s newest message was refused (naming the camera and its
        topic), while no later one of it has converted; None otherwise."""
        rejected = self._rejected.get(key)
        return None if rejected is None else f"{self.describe_camera(key)}: {rejected}"

    def prepare(self, key: str, image_size: tuple[int, int]) -> float:
        """Convert camera ``key``'s newest message now (a request is due soon).

        Returns:
            The conversion time in seconds (0 when it was converted already).

        Raises:
            KeyError: no message from ``key`` yet.
            FrameConversionError: the message does not convert; the camera falls
                back to its last message that did (or none).
        """
        latest = self._latest[key]
        size = (int(image_size[0]), int(image_size[1]))
        if latest.converted is not None and latest.size == size:
            return 0.0
        start = time.perf_counter()
        try:
            latest.converted = self._convert(key, latest.msg, size, latest.received)
        except FrameConversionError as exc:
            self._rejected[key] = exc.reason
            self._reject(key)
            raise
        self._rejected.pop(key, None)
        latest.size = size
        latest.processing_s = latest.read_s + time.perf_counter() - start
        self._good[key] = latest
        return latest.processing_s

    # Request time: convert what is new.

    def _convert(
        self, key: str, msg: Any, size: tuple[int, int], received: float
    ) -> np.ndarray | bytes:
        entry = self._cameras[key]
        bound = self._bounds[key]
        declared: tuple[int, int] | None
        try:
            if isinstance(msg, np.ndarray):
                rgb = msg  # an RGB frame already (tests, bag tools)
                declared = (int(msg.shape[0]), int(msg.shape[1]))
            elif entry.transport == "compressed":
                declared = compressed_size(np.frombuffer(msg.data, np.uint8))
                if declared is not None:  # (else compressed_to_rgb refuses it)
                    bound.check(key, declared[0], declared[1], received)
                rgb = compressed_to_rgb(msg, source=entry.topic, target_size=size)
            else:
                image = msg
                if isinstance(msg, (bytes, bytearray, memoryview)):
                    try:
                        image = parse_image_cdr(msg)
                    except CdrImageError:
                        if self._deserialize is None:
                            raise
                        image = self._deserialize(bytes(msg))
                declared = (int(image.height), int(image.width))
                bound.check(key, declared[0], declared[1], received)
                rgb = image_to_rgb(image, source=entry.topic)
            converted = fit_and_encode(rgb, size, self.encoding, self.jpeg_quality)
        except ValueError as exc:  # ImageConversionError, CdrImageError, ImageEncodingError
            raise FrameConversionError(key, entry.topic, str(exc)) from exc
        assert declared is not None
        bound.converted(*declared)
        return converted

    def assemble(
        self, image_size: tuple[int, int], *, timed_after: int | None = None
    ) -> WireFrames:
        """Convert the newest message of every camera that changed since the last call.

        Args:
            image_size: (height, width) the server takes (its metadata ``image_size``).
            timed_after: A value of :attr:`stored` from when the caller started timing
                its request: messages stored after it were read (and maybe converted)
                inside the caller's own measurement, so the newest frame's earlier
                processing (``newest_prepared_s``) is 0 for them, not counted twice.

        Raises:
            KeyError: a camera has no message yet (check :meth:`missing` first).
            FrameConversionError: a camera's newest message does not convert; the
                message names the camera, topic and reason. The camera falls back to
                its last message that converted (or none); the caller tries again.
        """
        size = (int(image_size[0]), int(image_size[1]))
        todo = []
        for key in self._cameras:
            latest = self._latest[key]
            if latest.converted is None or latest.size != size:
                todo.append((key, latest))
        start = time.perf_counter()
        for key, _ in todo:
            self.prepare(key, size)
        elapsed = time.perf_counter() - start if todo else 0.0
        fresh = {key for key, _ in todo}
        newest_key = max(self._cameras, key=lambda k: self._latest[k].received)
        newest = self._latest[newest_key]
        timed = newest_key in fresh or (timed_after is not None and newest.number > timed_after)
        newest_prepared = 0.0 if timed else newest.processing_s
        frames: dict[str, np.ndarray | bytes] = {}
        wire_bytes = 0
        for key in self._cameras:
            converted = self._latest[key].converted
            assert converted is not None
            frames[key] = converted
            wire_bytes += len(converted) if isinstance(converted, bytes) else converted.nbytes
        return WireFrames(
            frames=frames,
            received={key: self._latest[key].received for key in self._cameras},
            conversion_s=elapsed,
            converted=len(todo),
            wire_bytes=wire_bytes,
            newest_prepared_s=newest_prepared,
            read_s=sum(latest.read_s for _, latest in todo),
        )

    def describe(self) -> Mapping[str, Any]:
        """The settings, for logs and diagnostics."""
        return {
            "image_encoding": self.encoding,
            "jpeg_quality": self.jpeg_quality if self.encoding == "jpeg" else None,
        }
