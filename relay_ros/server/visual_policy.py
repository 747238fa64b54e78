"""The reference server's visual policy: find the red target in the cameras, move the arm to it.

A stand-in for a trained VLA in the simulated world of `relay_ros.sim.world`. Like a
trained model it knows how the arm and the cameras are built (their geometry is
what it was "trained" on) and what each camera key means, but not where the target
is: it only sees the images and the state of the observation, under the model's
camera keys. That is what makes wiring mistakes visible as task failures rather
than errors, as on a real robot:

- **Base camera** (``base_0_rgb``, GR00T ``video.front``): the red pixels' centroid,
  mapped through the fixed top-down camera, gives the target's world position.
- **Wrist camera** (``left_wrist_0_rgb``, GR00T ``video.wrist``): when the target is in
  view, its centroid relative to the image centre, turned by the forearm's direction
  (from the state), gives a finer estimate; it wins when available.
- **Plan**: inverse kinematics to the estimate, then a first-order approach with a
  speed limit for joints 1-2 (time constant ``approach_s``, at most
  ``max_speed_rad_s``); every other dimension relaxes to 0 (``home_s``). Action 0 is
  the state, action ``i`` is for ``t_obs + i / control_hz``. No target in view:
  hold still.

Swap the base and wrist cameras and each estimate is computed in the wrong camera's
geometry; swap red and blue and the policy chases the blue distractor. Either way
the arm ends up away from the target, which the demo and the tests measure.

Frames may be letterboxed (``resize_with_pad``: zero rows or columns); the policy
crops the padding first, so the geometry holds for any aspect ratio. JPEG bytes are
decoded with OpenCV. About 0.5 ms per request for two 224x224 frames.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import cv2
import numpy as np

from relay_ros.sim.world import PlanarArm, World

__all__ = ["CAMERA_KEY_ROLES", "VisualParams", "VisualPolicy", "crop_letterbox", "find_red"]

#: Which model camera key is which camera, per the models' conventions.
CAMERA_KEY_ROLES: dict[str, str] = {
    "base_0_rgb": "base",
    "left_wrist_0_rgb": "wrist",
    "video.front": "base",
    "video.wrist": "wrist",
}

# A pixel is "red" when R is high and both G and B are low (RGB order).
_RED_MIN = 140
_OTHER_MAX = 100
# Rows/columns whose brightest value is at most this are letterbox padding (JPEG
# leaves small non-zero values at the edge of a zero band).
_PAD_MAX = 12


@dataclass(frozen=True)
class VisualParams:
    """How the visual policy moves.

    Attributes:
        approach_s: time constant of the approach to the target (s).
        max_speed_rad_s: speed limit of joints 1-2 (rad/s).
        home_s: time constant of the other joints' return to 0 (s).
        min_pixels: fewest red pixels that count as "target in view".
    """

    approach_s: float = 0.2
    max_speed_rad_s: float = 1.2
    home_s: float = 1.0
    min_pixels: int = 6


def crop_letterbox(frame: np.ndarray) -> np.ndarray:
    """``frame`` without the zero rows and columns ``resize_with_pad`` adds around it."""
    h, w = frame.shape[:2]
    # Reductions over the long contiguous axes: max over the last axis of 3 is slow.
    rows = np.flatnonzero(frame.reshape(h, w * 3).max(axis=1) > _PAD_MAX)
    cols = np.flatnonzero(frame.max(axis=0).max(axis=1) > _PAD_MAX)
    if rows.size == 0 or cols.size == 0:
        return frame[:0, :0]
    return frame[rows[0] : rows[-1] + 1, cols[0] : cols[-1] + 1]


def find_red(frame: np.ndarray, min_pixels: int = 6) -> tuple[float, float] | None:
    """Centroid ``(u, v)`` (pixel centres at +0.5) of the red pixels of an RGB frame, or None."""
    red = (
        (frame[..., 0] >= _RED_MIN) & (frame[..., 1] <= _OTHER_MAX) & (frame[..., 2] <= _OTHER_MAX)
    )
    vs, us = np.nonzero(red)
    if us.size < min_pixels:
        return None
    return float(us.mean()) + 0.5, float(vs.mean()) + 0.5


def _as_rgb(frame: Any) -> np.ndarray | None:
    """An (H, W, 3) uint8 RGB array from an observation frame (array, float array or JPEG)."""
    if isinstance(frame, (bytes, bytearray, memoryview)):
        decoded = cv2.imdecode(np.frombuffer(bytes(frame), np.uint8), cv2.IMREAD_COLOR)
        return None if decoded is None else cv2.cvtColor(decoded, cv2.COLOR_BGR2RGB)
    arr = np.asarray(frame)
    if arr.ndim == 4:  # GR00T (1, H, W, 3)
        arr = arr[0]
    if arr.ndim != 3 or arr.shape[2] != 3:
        return None
    if arr.dtype != np.uint8:
        arr = np.clip(arr * 255.0, 0, 255).astype(np.uint8)
    return arr


class VisualPolicy:
    """(state, camera frames) -> chunk that moves the arm towards the red target.

    Args:
        action_horizon: actions per chunk ``H``.
        control_hz: action rate (Hz).
        world: the world the policy was "trained" in (arm and camera geometry).
        params: how it moves.
    """

    def __init__(
        self,
        *,
        action_horizon: int,
        control_hz: float,
        world: World | None = None,
        params: VisualParams | None = None,
    ) -> None:
        if action_horizon < 1 or control_hz <= 0:
            raise ValueError(
                f"action_horizon={action_horizon}, control_hz={control_hz}; "
                "expected action_horizon >= 1 and control_hz > 0"
            )
        self.action_horizon = action_horizon
        self.dt = 1.0 / float(control_hz)
        self.world = world or World()
        self.params = params or VisualParams()
        t = np.arange(action_horizon, dtype=np.float64) * self.dt
        self._home_decay = np.exp(-t / self.params.home_s)[:, None]

    @property
    def arm(self) -> PlanarArm:
        """The arm's kinematics."""
        return self.world.arm

    def locate(self, state: np.ndarray, images: Mapping[str, Any]) -> np.ndarray | None:
        """World ``(x, y)`` of the target as the cameras show it, or None when not in view.

        The wrist camera's estimate is used when it sees the target, else the base
        camera's. Keys without a known role (e.g. ``right_wrist_0_rgb``) are ignored.
        """
        q1, q2 = float(state[0]), float(state[1])
        estimates: dict[str, np.ndarray] = {}
        for key, raw in images.items():
            role = CAMERA_KEY_ROLES.get(key)
            if role is None or role in estimates:
                continue
            frame = _as_rgb(raw)
            if frame is None:
                continue
            frame = crop_letterbox(frame)
            h, w = frame.shape[:2]
            if h < 2 or w < 2:
                continue
            found = find_red(frame, self.params.min_pixels)
            if found is None:
                continue
            pixel = np.array(found)
            if role == "base":
                estimates[role] = self.world.base.to_world(pixel, w, h)
            else:
                ee = self.arm.end_effector(q1, q2)
                heading = self.arm.heading(q1, q2)
                estimates[role] = self.world.wrist.to_world(pixel, ee, heading, w, h)
        return estimates.get("wrist", estimates.get("base"))

    def chunk(
        self, state: np.ndarray, images: Mapping[str, Any], *, action_dim: int | None = None
    ) -> np.ndarray:
        """One chunk ``(H, action_dim)`` float32 from the state and the frames by camera key."""
        width = state.shape[0] if action_dim is None else action_dim
        start = np.zeros(max(width, 2), dtype=np.float64)
        n = min(width, state.shape[0])
        start[:n] = state[:n]
        out = np.empty((self.action_horizon, start.size), dtype=np.float64)
        out[:, 2:] = start[2:] * self._home_decay
        target = self.locate(start, images)
        if target is None:
            out[:, :2] = start[:2]
        else:
            goal = np.array(self.arm.inverse(target))
            out[:, :2] = self._approach(start[:2], goal)
        return out[:, :width].astype(np.float32)

    def _approach(self, q0: np.ndarray, goal: np.ndarray) -> np.ndarray:
        """First-order approach from ``q0`` to ``goal`` with a speed limit, H rows."""
        p = self.params
        alpha = 1.0 - math.exp(-self.dt / p.approach_s)
        max_step = p.max_speed_rad_s * self.dt
        rows = np.empty((self.action_horizon, 2))
        a, b = float(q0[0]), float(q0[1])
        ga, gb = float(goal[0]), float(goal[1])
        for i in range(self.action_horizon):  # plain floats: 10x faster than 2-element arrays
            rows[i, 0], rows[i, 1] = a, b
            a += min(max((ga - a) * alpha, -max_step), max_step)
            b += min(max((gb - b) * alpha, -max_step), max_step)
        return rows
