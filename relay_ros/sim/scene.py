"""Synthetic camera frames for the simulated robot, without rclpy.

`SceneRenderer` draws a table-top scene with a few coloured shapes that move on
smooth periodic paths, so that consecutive frames differ (a policy, a codec or a
bag recorder sees real motion) while every frame is a pure function of
``(seed, camera_name, t)``: the same inputs give the same pixels in any process.
Drawing uses OpenCV on a pre-rendered background, well under 2 ms at 640x480.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass

import cv2
import numpy as np

__all__ = ["SceneError", "SceneRenderer", "encode_jpeg"]

# Below this size the shapes degenerate to single pixels.
_MIN_SIDE = 16
_MAX_SIDE = 8192


class SceneError(ValueError):
    """A scene size, frame or JPEG quality is invalid."""


@dataclass(frozen=True)
class _Shape:
    kind: str  # "circle" | "box" | "triangle"
    color: tuple[int, int, int]  # RGB
    size: float  # pixels (radius or half side)
    center: tuple[float, float]  # pixels
    amplitude: tuple[float, float]  # pixels
    frequency: tuple[float, float]  # Hz
    phase: tuple[float, float]  # radians
    spin: float  # radians per second


class SceneRenderer:
    """Render frames of one synthetic camera.

    Args:
        width: Frame width in pixels (16..8192).
        height: Frame height in pixels (16..8192).
        seed: Scene seed; with ``camera_name`` it fixes colours and motion.
        camera_name: Camera name; different cameras of one seed see different scenes.
        shapes: Number of moving shapes (1..32).

    Raises:
        SceneError: A size or shape count out of range.
    """

    def __init__(
        self,
        width: int,
        height: int,
        seed: int = 0,
        camera_name: str = "camera",
        *,
        shapes: int = 5,
    ) -> None:
        for label, value in (("width", width), ("height", height)):
            if not isinstance(value, (int, np.integer)) or not _MIN_SIDE <= value <= _MAX_SIDE:
                raise SceneError(
                    f"scene {label} {value!r} is not an integer number of pixels "
                    f"in [{_MIN_SIDE}, {_MAX_SIDE}]"
                )
        if not isinstance(shapes, (int, np.integer)) or not 1 <= shapes <= 32:
            raise SceneError(f"shapes {shapes!r} is not an integer in [1, 32]")
        self._width = int(width)
        self._height = int(height)
        self._camera_name = str(camera_name)
        # crc32, not hash(): stable across processes (PYTHONHASHSEED).
        mixed = zlib.crc32(self._camera_name.encode("utf-8")) ^ (int(seed) & 0xFFFFFFFF)
        rng = np.random.default_rng(mixed)
        self._background = self._make_background(rng)
        self._shapes = [self._make_shape(rng, i) for i in range(int(shapes))]

    @property
    def width(self) -> int:
        """Frame width in pixels."""
        return self._width

    @property
    def height(self) -> int:
        """Frame height in pixels."""
        return self._height

    @property
    def camera_name(self) -> str:
        """Camera name the scene was generated for."""
        return self._camera_name

    def render(self, t: float) -> np.ndarray:
        """Return the frame at time ``t`` (seconds) as a (height, width, 3) uint8 RGB array."""
        t = float(t)
        frame = self._background.copy()
        for shape in self._shapes:
            cx = shape.center[0] + shape.amplitude[0] * math.sin(
                2.0 * math.pi * shape.frequency[0] * t + shape.phase[0]
            )
            cy = shape.center[1] + shape.amplitude[1] * math.sin(
                2.0 * math.pi * shape.frequency[1] * t + shape.phase[1]
            )
            if shape.kind == "circle":
                cv2.circle(
                    frame, (round(cx), round(cy)), round(shape.size), shape.color, -1, cv2.LINE_AA
                )
                continue
            corners = 4 if shape.kind == "box" else 3
            angles = shape.spin * t + np.arange(corners) * (2.0 * math.pi / corners)
            polygon = np.stack(
                [cx + shape.size * np.cos(angles), cy + shape.size * np.sin(angles)], axis=1
            )
            cv2.fillPoly(frame, [np.round(polygon).astype(np.int32)], shape.color, cv2.LINE_AA)
        # A progress bar along the bottom: frames differ even if all shapes pause.
        bar = max(2, self._height // 60)
        filled = round((t % 1.0) * self._width)
        frame[self._height - bar :, :filled] = (240, 240, 240)
        return frame

    def _make_background(self, rng: np.random.Generator) -> np.ndarray:
        top = rng.integers(40, 120, size=3).astype(np.float32)
        bottom = rng.integers(120, 200, size=3).astype(np.float32)
        ramp = np.linspace(0.0, 1.0, self._height, dtype=np.float32)[:, None]
        column = top[None, :] * (1.0 - ramp) + bottom[None, :] * ramp  # (H, 3)
        background = np.broadcast_to(column[:, None, :], (self._height, self._width, 3))
        background = np.ascontiguousarray(background.astype(np.uint8))
        # A table edge across the lower third, so the scene has a fixed horizon.
        table_y = int(self._height * 0.62)
        background[table_y:] = (background[table_y:] * 0.6 + np.array([90, 70, 50]) * 0.4).astype(
            np.uint8
        )
        return background

    def _make_shape(self, rng: np.random.Generator, index: int) -> _Shape:
        side = min(self._width, self._height)
        kind = ("circle", "box", "triangle")[index % 3]
        red, green, blue = (int(c) for c in rng.integers(30, 256, size=3))
        size = float(rng.uniform(0.05, 0.11) * side)
        center = (
            float(rng.uniform(0.3, 0.7) * self._width),
            float(rng.uniform(0.3, 0.7) * self._height),
        )
        amplitude = (
            float(rng.uniform(0.1, 0.25) * self._width),
            float(rng.uniform(0.08, 0.2) * self._height),
        )
        frequency = (float(rng.uniform(0.1, 0.4)), float(rng.uniform(0.1, 0.4)))
        phase = (float(rng.uniform(0, 2 * math.pi)), float(rng.uniform(0, 2 * math.pi)))
        spin = float(rng.uniform(-1.5, 1.5))
        return _Shape(kind, (red, green, blue), size, center, amplitude, frequency, phase, spin)


def encode_jpeg(frame: np.ndarray, quality: int = 90) -> bytes:
    """Encode a (H, W, 3) uint8 RGB frame as JPEG bytes.

    Args:
        frame: RGB image (channel order red, green, blue).
        quality: JPEG quality 1..100.

    Raises:
        SceneError: The frame is not (H, W, 3) uint8, or the quality is out of range.
    """
    if not isinstance(frame, np.ndarray) or frame.ndim != 3 or frame.shape[2] != 3:
        shape = getattr(frame, "shape", type(frame).__name__)
        raise SceneError(f"frame shape {shape} is not (height, width, 3)")
    if frame.dtype != np.uint8:
        raise SceneError(f"frame dtype {frame.dtype} is not uint8")
    if not isinstance(quality, (int, np.integer)) or not 1 <= quality <= 100:
        raise SceneError(f"JPEG quality {quality!r} is not an integer in [1, 100]")
    ok, encoded = cv2.imencode(
        ".jpg", cv2.cvtColor(frame, cv2.COLOR_RGB2BGR), [cv2.IMWRITE_JPEG_QUALITY, int(quality)]
    )
    if not ok:
        raise SceneError(f"OpenCV could not encode a {frame.shape} frame as JPEG")
    return encoded.tobytes()
