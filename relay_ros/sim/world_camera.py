"""Camera frames of the simulated world (`relay_ros.world`), drawn from the arm's state.

`WorldCamera` renders what the base camera or the wrist camera sees at time ``t``
with the arm at joint positions ``(q1, q2)``: the table with a 10 cm grid, the red
target and the blue distractor where their schedules put them, and (base camera)
the arm with a green ring at the end effector, or (wrist camera) the gripper's
fingers. Colours are chosen so that a channel mix-up shows: swapping red and blue
turns the distractor red and the target blue, while the table, grid, arm and ring
stay recognisable.

A frame is a pure function of ``(role, size, seed, t, q1, q2)``. OpenCV draws on a
background computed once per camera; a 320x240 frame takes about 0.1 ms.
"""

from __future__ import annotations

from collections.abc import Callable

import cv2
import numpy as np

from relay_ros.world import World

__all__ = [
    "CAMERA_ROLES",
    "DISTRACTOR_RGB",
    "END_EFFECTOR_RGB",
    "TARGET_RGB",
    "World",
    "WorldCamera",
]

CAMERA_ROLES = ("base", "wrist")
TARGET_RGB = (225, 30, 30)
DISTRACTOR_RGB = (30, 70, 225)
END_EFFECTOR_RGB = (40, 200, 70)
_TABLE_TOP_RGB = np.array([176, 156, 124], dtype=np.float32)
_TABLE_BOTTOM_RGB = np.array([150, 132, 104], dtype=np.float32)
_GRID_RGB = (128, 112, 88)
_ARM_RGB = (95, 95, 100)
_FINGER_RGB = (60, 60, 64)
_GRID_M = 0.1
# Sub-pixel drawing: coordinates are passed to OpenCV as integers with this many
# fractional bits, so the disks move smoothly instead of in whole pixels.
_SHIFT = 4
_ONE = 1 << _SHIFT
#: World points (N, 2) in metres -> their pixels in the frame being drawn.
_Project = Callable[[np.ndarray], np.ndarray]


def _fixed(points: np.ndarray) -> np.ndarray:
    """Float pixel coordinates as OpenCV's fixed-point integers (``_SHIFT`` bits)."""
    return np.round(np.asarray(points) * _ONE).astype(np.int32)


class WorldCamera:
    """Render the base or wrist view of a `World`.

    Args:
        role: ``"base"`` or ``"wrist"``.
        width: Frame width in pixels (16..8192).
        height: Frame height in pixels (16..8192).
        world: The world (seed, arm, camera models).

    Raises:
        ValueError: an unknown role or a size outside 16..8192 pixels.
    """

    def __init__(self, role: str, width: int, height: int, world: World | None = None) -> None:
        if role not in CAMERA_ROLES:
            raise ValueError(f"camera role {role!r} is not one of {list(CAMERA_ROLES)}")
        for label, value in (("width", width), ("height", height)):
            if not isinstance(value, (int, np.integer)) or not 16 <= value <= 8192:
                raise ValueError(
                    f"scene {label} {value!r} is not an integer number of pixels in [16, 8192]"
                )
        self.role = role
        self.width = int(width)
        self.height = int(height)
        self.world = world or World()
        self._target = self.world.target
        self._distractor = self.world.distractor
        ramp = np.linspace(0.0, 1.0, self.height, dtype=np.float32)[:, None]
        column = _TABLE_TOP_RGB * (1.0 - ramp) + _TABLE_BOTTOM_RGB * ramp
        self._table = np.ascontiguousarray(
            np.broadcast_to(column[:, None, :], (self.height, self.width, 3)).astype(np.uint8)
        )
        if role == "base":
            self._background = self._table.copy()
            model = self.world.base

            def project(p: np.ndarray) -> np.ndarray:
                return model.to_pixels(p, self.width, self.height)

            self._draw_grid(self._background, project, np.array(model.center), model.span_m)
            base = _fixed(project(np.zeros(2)))
            radius = round(0.05 * min(self.width, self.height) / model.span_m * _ONE)
            cv2.circle(self._background, tuple(base), radius, _ARM_RGB, -1, cv2.LINE_AA, _SHIFT)

    def render(self, t: float, q1: float, q2: float) -> np.ndarray:
        """The (height, width, 3) uint8 RGB frame at time ``t`` (s), arm at ``q1, q2`` (rad)."""
        if self.role == "base":
            return self._render_base(t, q1, q2)
        return self._render_wrist(t, q1, q2)

    # ------------------------------------------------------------------ internals

    def _disk_radius_px(self) -> float:
        span = self.world.base.span_m if self.role == "base" else self.world.wrist.span_m
        return self._target.radius_m * min(self.width, self.height) / span

    def _draw_disks(self, frame: np.ndarray, t: float, project: _Project) -> None:
        radius = round(self._disk_radius_px() * _ONE)
        for schedule, colour in ((self._distractor, DISTRACTOR_RGB), (self._target, TARGET_RGB)):
            center = project(schedule.position(t))
            if np.all(np.abs(center) < 1e5):
                cv2.circle(frame, tuple(_fixed(center)), radius, colour, -1, cv2.LINE_AA, _SHIFT)

    def _render_base(self, t: float, q1: float, q2: float) -> np.ndarray:
        frame = self._background.copy()
        w, h, model, arm = self.width, self.height, self.world.base, self.world.arm

        def project(p: np.ndarray) -> np.ndarray:
            return model.to_pixels(p, w, h)

        self._draw_disks(frame, t, project)
        joints = project(np.stack([np.zeros(2), arm.elbow(q1, q2), arm.end_effector(q1, q2)]))
        thickness = max(2, round(min(w, h) / 60))
        cv2.polylines(frame, [_fixed(joints)], False, _ARM_RGB, thickness, cv2.LINE_AA, _SHIFT)
        ring = 0.045 * min(w, h) / model.span_m  # around the target when on it
        cv2.circle(
            frame,
            tuple(_fixed(joints[2])),
            round(ring * _ONE),
            END_EFFECTOR_RGB,
            max(2, thickness - 1),
            cv2.LINE_AA,
            _SHIFT,
        )
        return frame

    def _render_wrist(self, t: float, q1: float, q2: float) -> np.ndarray:
        frame = self._table.copy()
        w, h, model, arm = self.width, self.height, self.world.wrist, self.world.arm
        ee = arm.end_effector(q1, q2)
        heading = arm.heading(q1, q2)

        def project(p: np.ndarray) -> np.ndarray:
            return model.to_pixels(p, ee, heading, w, h)

        self._draw_grid(frame, project, ee, model.span_m)
        self._draw_disks(frame, t, project)
        # Two fingers rising from the bottom edge, left and right of the centre.
        finger_w, finger_h = max(2, w // 14), max(3, h // 7)
        for side in (-1, 1):
            x0 = w // 2 + side * (w // 5) - finger_w // 2
            frame[h - finger_h :, max(0, x0) : x0 + finger_w] = _FINGER_RGB
        return frame

    def _draw_grid(
        self, frame: np.ndarray, project: _Project, around: np.ndarray, span: float
    ) -> None:
        """Grid lines every 10 cm within ``span`` (m, scaled up for the diagonal) of ``around``."""
        reach = span * 1.5 + _GRID_M
        lo = np.floor((around - reach) / _GRID_M).astype(int)
        hi = np.ceil((around + reach) / _GRID_M).astype(int)
        segments = []
        for k in range(lo[0], hi[0] + 1):
            x = k * _GRID_M
            segments.append(project(np.array([[x, around[1] - reach], [x, around[1] + reach]])))
        for k in range(lo[1], hi[1] + 1):
            y = k * _GRID_M
            segments.append(project(np.array([[around[0] - reach, y], [around[0] + reach, y]])))
        cv2.polylines(
            frame, [_fixed(s) for s in segments], False, _GRID_RGB, 1, cv2.LINE_AA, _SHIFT
        )
