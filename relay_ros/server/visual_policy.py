"""The reference server's visual policy: find the red target in the cameras, move the arm to it.

A stand-in for a trained VLA in the simulated world of `relay_ros.world`. Like a
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
  ``max_speed_rad_s``); every other dimension relaxes to the robot's rest pose, 0
  unless given (``home_s``; `relay_ros.server.policy_robot`). Action 0 is
  the start (the state, or where the committed actions of an action prefix end),
  action ``i`` is for ``t_obs + i / control_hz``. No target in view: hold still.
- **Approach side** (a sampled mode, as a multi-modal VLA has them): the approach
  direction in joint space is turned by ``turn`` radians to either side of the
  straight line to the goal (``side`` = +1 or -1), so the arm curves in from the
  left or from the right. A sampled policy draws the side per chunk; given the
  actions the robot has committed to (an action prefix), it keeps the side those
  are on (`approach_side`), as RTC's guided inpainting stays in the committed
  mode. Without a prefix consecutive chunks may disagree on the side, which no
  client-side blend can undo.

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

from relay_ros.world import PlanarArm, World

__all__ = [
    "CAMERA_KEY_ROLES",
    "VisualParams",
    "VisualPolicy",
    "approach_side",
    "crop_letterbox",
    "find_red",
]

# Committed motion slower than this (rad per step on joints 1-2), or a goal nearer
# than this (rad), says nothing about the side the arm approaches from.
_SIDE_MIN_STEP = 1e-4
_SIDE_MIN_DISTANCE = 1e-3

#: Which model camera key is which camera, per the models' and layouts' conventions.
CAMERA_KEY_ROLES: dict[str, str] = {
    "base_0_rgb": "base",
    "left_wrist_0_rgb": "wrist",
    "video.front": "base",
    "video.wrist": "wrist",
    "exterior_image_1_left": "base",  # the DROID layout
    "wrist_image_left": "wrist",
    "cam_high": "base",  # the ALOHA layout
    "cam_left_wrist": "wrist",
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

    The reply's speed (noise and the prefix's cross-fade included) is bounded
    afterwards, as the robot's (:mod:`~relay_ros.server.policy_robot`).
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


def approach_side(committed: np.ndarray, goal: np.ndarray) -> int | None:
    """The side (+1: turned counter-clockwise from the straight line, -1: clockwise)
    that committed actions ``(d, >=2)`` approach ``goal`` (joints 1-2) from, judged
    by their last step; None when they stand (fewer than 2 rows, or no motion) or
    are at the goal."""
    if committed.shape[0] < 2:
        return None
    q = np.asarray(committed[-1, :2], dtype=np.float64)
    step = q - np.asarray(committed[-2, :2], dtype=np.float64)
    towards = np.asarray(goal, dtype=np.float64)[:2] - q
    if np.hypot(*step) < _SIDE_MIN_STEP or np.hypot(*towards) < _SIDE_MIN_DISTANCE:
        return None
    cross = towards[0] * step[1] - towards[1] * step[0]
    return 1 if cross > 0 else -1


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


def _widened(values: np.ndarray, width: int) -> np.ndarray:
    """``values`` as float64 of at least ``max(width, 2)`` entries (zeros appended)."""
    out = np.zeros(max(width, 2), dtype=np.float64)
    n = min(width, values.shape[0])
    out[:n] = values[:n]
    return out


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
        self,
        state: np.ndarray,
        images: Mapping[str, Any],
        *,
        action_dim: int | None = None,
        start: np.ndarray | None = None,
        turn: float = 0.0,
        side: int = 1,
        committed: np.ndarray | None = None,
        rest: np.ndarray | None = None,
    ) -> np.ndarray:
        """One chunk ``(H, action_dim)`` float32 from the state and the frames by camera key.

        Args:
            state: The observed state (where the cameras saw the arm).
            images: The frames by camera key.
            action_dim: Width of each action (default: the state's).
            start: Where the plan starts (action 0); default ``state``.
            turn: How far the approach turns off the straight line (rad, 0 = none).
            side: The sampled side of the turn (+1 or -1).
            committed: Committed actions (rows, action space) ending at ``start``:
                when they show a side (`approach_side`), it replaces ``side``.
            rest: The robot's rest pose (action space) the other dimensions relax
                to; default 0.
        """
        width = state.shape[0] if action_dim is None else action_dim
        observed = _widened(state, width)
        begin = observed if start is None else _widened(start, width)
        out = np.empty((self.action_horizon, begin.size), dtype=np.float64)
        if rest is None:
            out[:, 2:] = begin[2:] * self._home_decay
        else:
            home = _widened(np.asarray(rest, dtype=np.float64), width)[2:]
            out[:, 2:] = home + (begin[2:] - home) * self._home_decay
        target = self.locate(observed, images)
        if target is None:
            out[:, :2] = begin[:2]
        else:
            goal = np.array(self.arm.inverse(target))
            if committed is not None:
                side = approach_side(committed, goal) or side
            out[:, :2] = self._approach(begin[:2], goal, side * turn)
        return out[:, :width].astype(np.float32)

    def _approach(self, q0: np.ndarray, goal: np.ndarray, turn: float = 0.0) -> np.ndarray:
        """First-order approach from ``q0`` to ``goal`` with a speed limit, H rows; the
        direction turned by ``turn`` rad (counter-clockwise positive) off the line."""
        p = self.params
        alpha = 1.0 - math.exp(-self.dt / p.approach_s)
        max_step = p.max_speed_rad_s * self.dt
        # Turned, and lengthened so the approach along the line to the goal keeps
        # its pace: a side curves the path, it does not slow the arm down.
        c, s = 1.0, math.tan(turn)
        rows = np.empty((self.action_horizon, 2))
        a, b = float(q0[0]), float(q0[1])
        ga, gb = float(goal[0]), float(goal[1])
        for i in range(self.action_horizon):  # plain floats: 10x faster than 2-element arrays
            rows[i, 0], rows[i, 1] = a, b
            da, db = (ga - a) * alpha, (gb - b) * alpha
            a += min(max(c * da - s * db, -max_step), max_step)
            b += min(max(s * da + c * db, -max_step), max_step)
        return rows
