"""One camera's episode as an MP4 video, encoded with PyAV as LeRobot encodes it.

The settings are LeRobot's defaults (``src/lerobot/configs/video.py``,
``RGBEncoderConfig`` at huggingface/lerobot 7427f31801f944f5ec9ce53cda02862ce7d1638b):
``libsvtav1``, ``yuv420p``, a keyframe every 2 frames (``g=2``), ``crf=30``, preset
12, ``fast-decode=0``; ``h264`` (libx264) and ``hevc`` (libx265) take ``crf`` and
``preset`` as LeRobot's ``get_codec_options`` gives them. Frames get pts 0, 1, 2, ...
in a 1/fps time base (LeRobot's streaming encoder), so frame ``i`` of an episode is
at ``i / fps`` seconds: the ``timestamp`` column of the data.

:func:`video_info` is the ``info`` block of a camera feature in info.json (LeRobot's
``get_video_info``: what the stream says, then the encoder's settings), predicted
from the settings so that info.json is complete before the first video exists;
:func:`probe_video_info` reads the same block from a file (tests compare them).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import numpy as np
from av.video.stream import VideoStream

__all__ = [
    "VIDEO_CODECS",
    "VideoCodecError",
    "VideoSettings",
    "VideoWriter",
    "available_codecs",
    "probe_video_info",
    "video_info",
]

#: Codecs the recorder can write (the LeRobot names), with the stream's codec name.
VIDEO_CODECS: dict[str, str] = {"libsvtav1": "av1", "h264": "h264", "hevc": "hevc"}

# libav logs through Python logging: keep it to warnings. SVT-AV1 writes a dozen
# "Svt[info]" lines to stderr for every video it opens unless SVT_LOG says otherwise
# (1: errors only); the library reads it when an encoder starts.
logging.getLogger("libav").setLevel(logging.WARNING)
os.environ.setdefault("SVT_LOG", "1")


class VideoCodecError(ValueError):
    """A codec this PyAV build cannot encode, or a frame size it cannot take."""


def available_codecs() -> list[str]:
    """The codecs of :data:`VIDEO_CODECS` this PyAV build can encode."""
    out = []
    for name in VIDEO_CODECS:
        try:
            av.codec.Codec(name, "w")
        except Exception:  # av.codec.codec.UnknownCodecError and friends
            continue
        out.append(name)
    return out


@dataclass(frozen=True)
class VideoSettings:
    """Encoder settings (LeRobot's ``VideoEncoderConfig`` fields, RGB defaults)."""

    vcodec: str = "libsvtav1"
    pix_fmt: str = "yuv420p"
    g: int | None = 2
    crf: int | None = 30
    preset: int | str | None = None
    fast_decode: int = 0
    video_backend: str = "pyav"
    extra_options: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.vcodec not in VIDEO_CODECS:
            raise VideoCodecError(f"video codec {self.vcodec!r} is not one of {list(VIDEO_CODECS)}")
        if self.preset is None and self.vcodec == "libsvtav1":
            object.__setattr__(self, "preset", 12)  # LIBSVTAV1_DEFAULT_PRESET

    def check_available(self) -> None:
        """Raise :class:`VideoCodecError` when this PyAV build cannot encode ``vcodec``."""
        if self.vcodec not in available_codecs():
            raise VideoCodecError(
                f"video codec {self.vcodec!r} is not available in this PyAV build "
                f"(PyAV {av.__version__}); available: {available_codecs()}"
            )

    def codec_options(self) -> dict[str, str]:
        """The codec options, as LeRobot's ``get_codec_options(as_strings=True)``."""
        opts: dict[str, str] = {}
        if self.g is not None:
            opts["g"] = str(self.g)
        if self.crf is not None:
            opts["crf"] = str(self.crf)
        if self.preset is not None:
            opts["preset"] = str(self.preset)
        if self.vcodec == "libsvtav1":
            opts["svtav1-params"] = f"fast-decode={max(0, min(2, self.fast_decode))}"
        elif self.fast_decode:
            opts["tune"] = "fastdecode"
        for key, value in self.extra_options.items():
            opts.setdefault(key, str(value))
        return opts


def video_info(settings: VideoSettings, image_size: tuple[int, int], fps: int) -> dict[str, Any]:
    """The ``info`` block of a camera feature for videos written with ``settings``,
    in the order LeRobot leaves it (``is_depth_map`` first from the feature's
    creation, then ``get_video_info``'s stream fields and the encoder's)."""
    height, width = image_size
    return {
        "is_depth_map": False,
        "video.height": int(height),
        "video.width": int(width),
        "video.codec": VIDEO_CODECS[settings.vcodec],
        "video.pix_fmt": settings.pix_fmt,
        "video.fps": int(fps),
        "video.channels": 3,
        "has_audio": False,
        "video.g": settings.g,
        "video.crf": settings.crf,
        "video.preset": settings.preset,
        "video.fast_decode": settings.fast_decode,
        "video.video_backend": settings.video_backend,
        "video.extra_options": dict(settings.extra_options),
    }


def probe_video_info(path: Path) -> dict[str, Any]:
    """The stream fields of ``get_video_info`` read from the file at ``path``."""
    with av.open(str(path), "r") as container:
        stream = container.streams.video[0]
        info = {
            "video.height": stream.height,
            "video.width": stream.width,
            "video.codec": stream.codec.canonical_name,
            "video.pix_fmt": stream.pix_fmt,
            "video.fps": int(stream.base_rate),
            "video.channels": len(av.VideoFormat(stream.pix_fmt).components),
            "has_audio": bool(container.streams.audio),
        }
    return info


class VideoWriter:
    """One camera's frames of one episode into one MP4 file, as they come.

    Args:
        path: The file to write (its directory must exist).
        fps: Frames per second (pts ``i`` is at ``i / fps`` s).
        image_size: (height, width) of every frame; even (``yuv420p``).
        settings: The encoder settings.

    Raises:
        VideoCodecError: the codec is not available, or an odd frame size.
        OSError: the file cannot be created (a full disk included).
    """

    def __init__(
        self, path: Path, fps: int, image_size: tuple[int, int], settings: VideoSettings
    ) -> None:
        height, width = image_size
        if height % 2 or width % 2:
            raise VideoCodecError(
                f"frames of {height}x{width} cannot be stored as {settings.pix_fmt}: "
                "it needs an even height and width"
            )
        self.path = path
        self.frames = 0
        self._size = (int(height), int(width))
        self._container = av.open(str(path), "w")
        try:
            stream = self._container.add_stream(
                settings.vcodec, rate=fps, options=settings.codec_options()
            )
        except Exception as exc:
            self._container.close()
            raise VideoCodecError(f"cannot encode {settings.vcodec}: {exc}") from exc
        if not isinstance(stream, VideoStream):  # VIDEO_CODECS are all video codecs
            self._container.close()
            raise VideoCodecError(f"codec {settings.vcodec!r} does not encode video")
        self._stream = stream
        self._stream.pix_fmt = settings.pix_fmt
        self._stream.width = int(width)
        self._stream.height = int(height)
        self._time_base = Fraction(1, int(fps))
        self._stream.time_base = self._time_base

    def add(self, rgb: np.ndarray) -> None:
        """Encode one (H, W, 3) uint8 RGB frame as the next frame."""
        if rgb.shape != (*self._size, 3):
            raise ValueError(f"frame of shape {rgb.shape}; expected {(*self._size, 3)}")
        frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(rgb), format="rgb24")
        frame.pts = self.frames
        frame.time_base = self._time_base
        for packet in self._stream.encode(frame):
            self._container.mux(packet)
        self.frames += 1

    def close(self) -> float:
        """Flush the encoder and close the file; returns the video's duration (s)."""
        for packet in self._stream.encode():
            self._container.mux(packet)
        self._container.close()
        return self.frames * float(self._time_base)

    def abandon(self) -> None:
        """Close without flushing (an episode being discarded); never raises."""
        try:
            self._container.close()
        except Exception:  # noqa: BLE001 - the file is deleted next; nothing to report
            pass
