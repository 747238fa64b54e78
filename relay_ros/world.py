"""The simulated table-top world: a planar arm, two camera models and a moving target.

Plain NumPy, no rclpy, no OpenCV. Shared by the simulated cameras (which draw it),
the demo and bench (which measure how well the arm tracks the target) and the
reference server's visual policy (which, like a trained model, knows how the arm
and the cameras are built, but never the target's schedule: it has to find the
target in the images).

World frame, seen from above: metres, ``x`` to the right, ``y`` forward (away from
the robot's base at the origin).

- **Arm** (`PlanarArm`): the first two commanded joints move a two-link arm in the
  table plane. Joint 1 turns the shoulder (0 = upper arm pointing forward,
  positive = counter-clockwise), joint 2 bends the elbow (0 = forearm at a right
  angle to the right of the upper arm). The other joints do not move the end
  effector.
- **Base camera** (`BaseCameraModel`): fixed, looking straight down at the
  workspace; ``span_m`` metres of the world across the shorter image side,
  centred on ``center``, image up = world forward.
- **Wrist camera** (`WristCameraModel`): looks down from the end effector, centred
  on it, image up = the forearm's direction; ``span_m`` metres across the shorter
  side, so it shows the target large and only when the hand is near it.
- **Target** (`TargetSchedule`): a red disk that dwells at a waypoint, then glides
  to the next one (a smoothstep over ``move_s``), every ``period_s`` seconds; the
  waypoints are a pure function of ``(seed, stream, index)``, so the target is
  where it is at absolute time ``t`` in any process. A blue distractor disk
  follows its own schedule (``stream=1``).

Pixel coordinates are ``(u, v)`` = (column, row) as floats, ``(0, 0)`` the top-left
corner of the top-left pixel.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

import numpy as np

__all__ = [
    "ALIGNED_START_S",
    "BaseCameraModel",
    "PlanarArm",
    "TargetSchedule",
    "World",
    "WristCameraModel",
]

#: World time at the first published chunk when runs are aligned to it (so that two
#: runs of one seed see the same target motion from their first chunk on).
ALIGNED_START_S = 1000.0


@dataclass(frozen=True)
class PlanarArm:
    """Forward and inverse kinematics of the two-link arm (lengths in metres).

    Attributes:
        upper_m: shoulder to elbow.
        fore_m: elbow to end effector.
    """

    upper_m: float = 0.35
    fore_m: float = 0.30

    def _angles(self, q1: np.ndarray, q2: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        upper = math.pi / 2 + q1  # world angle of the upper arm
        fore = upper + q2 - math.pi / 2  # world angle of the forearm
        return upper, fore

    def elbow(self, q1: float, q2: float) -> np.ndarray:
        """World ``(x, y)`` of the elbow for joint positions ``q1, q2`` (rad)."""
        upper, _ = self._angles(np.float64(q1), np.float64(q2))
        return np.array([self.upper_m * math.cos(upper), self.upper_m * math.sin(upper)])

    def end_effector(self, q1: np.ndarray | float, q2: np.ndarray | float) -> np.ndarray:
        """World ``(..., 2)`` end-effector position(s) for joint positions (rad)."""
        q1a, q2a = np.asarray(q1, dtype=np.float64), np.asarray(q2, dtype=np.float64)
        upper, fore = self._angles(q1a, q2a)
        x = self.upper_m * np.cos(upper) + self.fore_m * np.cos(fore)
        y = self.upper_m * np.sin(upper) + self.fore_m * np.sin(fore)
        return np.stack([x, y], axis=-1)

    def heading(self, q1: float, q2: float) -> float:
        """World angle (rad, from +x) of the forearm: the wrist camera's "up"."""
        return float(self._angles(np.float64(q1), np.float64(q2))[1])

    def reach(self) -> tuple[float, float]:
        """Nearest and farthest reachable distance from the base (m)."""
        return abs(self.upper_m - self.fore_m), self.upper_m + self.fore_m

    def inverse(self, point: np.ndarray, margin_m: float = 0.02) -> tuple[float, float]:
        """Joint positions ``(q1, q2)`` that put the end effector at ``point``.

        Takes the elbow-right solution (the one the arm starts in and never leaves
        within its joint limits). A point out of reach is moved radially into the
        reachable ring (``margin_m`` inside its edges).
        """
        x, y = float(point[0]), float(point[1])
        near, far = self.reach()
        d = math.hypot(x, y)
        clipped = min(max(d, near + margin_m), far - margin_m)
        if d < 1e-9:
            x, y, d = 0.0, clipped, clipped
        elif clipped != d:
            x, y, d = x * clipped / d, y * clipped / d, clipped
        a, b = self.upper_m, self.fore_m
        cos_e = (d * d - a * a - b * b) / (2.0 * a * b)
        e = -math.acos(min(1.0, max(-1.0, cos_e)))  # relative elbow angle, elbow right
        upper = math.atan2(y, x) - math.atan2(b * math.sin(e), a + b * math.cos(e))
        q1 = math.remainder(upper - math.pi / 2, 2.0 * math.pi)
        return q1, e + math.pi / 2


def _scale(width: int, height: int, span_m: float) -> float:
    """Pixels per metre when ``span_m`` metres cover the shorter image side."""
    return min(width, height) / span_m


@dataclass(frozen=True)
class BaseCameraModel:
    """The fixed top-down camera: world <-> pixels.

    Attributes:
        span_m: metres of the world across the shorter image side.
        center: world point at the image centre.
    """

    span_m: float = 1.2
    center: tuple[float, float] = (0.0, 0.3)

    def to_pixels(self, points: np.ndarray, width: int, height: int) -> np.ndarray:
        """World ``(..., 2)`` -> pixel ``(..., 2)`` ``(u, v)``."""
        s = _scale(width, height, self.span_m)
        p = np.asarray(points, dtype=np.float64)
        u = width / 2.0 + (p[..., 0] - self.center[0]) * s
        v = height / 2.0 - (p[..., 1] - self.center[1]) * s
        return np.stack([u, v], axis=-1)

    def to_world(self, pixels: np.ndarray, width: int, height: int) -> np.ndarray:
        """Pixel ``(..., 2)`` -> world ``(..., 2)`` (on the table plane)."""
        s = _scale(width, height, self.span_m)
        px = np.asarray(pixels, dtype=np.float64)
        x = self.center[0] + (px[..., 0] - width / 2.0) / s
        y = self.center[1] - (px[..., 1] - height / 2.0) / s
        return np.stack([x, y], axis=-1)


@dataclass(frozen=True)
class WristCameraModel:
    """The camera at the end effector, image up = forearm direction.

    Attributes:
        span_m: metres of the world across the shorter image side.
    """

    span_m: float = 0.3

    def to_pixels(
        self, points: np.ndarray, ee: np.ndarray, heading: float, width: int, height: int
    ) -> np.ndarray:
        """World ``(..., 2)`` -> pixel ``(..., 2)`` for a hand at ``ee`` facing ``heading``."""
        s = _scale(width, height, self.span_m)
        d = np.asarray(points, dtype=np.float64) - np.asarray(ee, dtype=np.float64)
        c, n = math.cos(heading), math.sin(heading)
        forward = d[..., 0] * c + d[..., 1] * n
        left = -d[..., 0] * n + d[..., 1] * c
        return np.stack([width / 2.0 - left * s, height / 2.0 - forward * s], axis=-1)

    def to_world(
        self, pixels: np.ndarray, ee: np.ndarray, heading: float, width: int, height: int
    ) -> np.ndarray:
        """Pixel ``(..., 2)`` -> world ``(..., 2)`` for a hand at ``ee`` facing ``heading``."""
        s = _scale(width, height, self.span_m)
        px = np.asarray(pixels, dtype=np.float64)
        left = (width / 2.0 - px[..., 0]) / s
        forward = (height / 2.0 - px[..., 1]) / s
        c, n = math.cos(heading), math.sin(heading)
        x = ee[0] + forward * c - left * n
        y = ee[1] + forward * n + left * c
        return np.stack([x, y], axis=-1)


@dataclass(frozen=True)
class TargetSchedule:
    """Where the target (stream 0) or the distractor (stream 1) is at time ``t``.

    Waypoint ``i`` holds from ``i * period_s + move_s`` to ``(i + 1) * period_s``;
    during the first ``move_s`` of its period the disk glides from waypoint
    ``i - 1`` (smoothstep in time). Waypoints lie ``0.25..0.55`` m from the base
    within 50 degrees of straight ahead: inside the arm's reach and the base camera's
    view.

    Attributes:
        seed: fixes every waypoint.
        stream: 0 = the target, 1 = the distractor (a different sequence).
        period_s: seconds from one waypoint to the next.
        move_s: seconds of gliding at the start of each period (< period_s).
        radius_m: disk radius.
    """

    seed: int = 0
    stream: int = 0
    period_s: float = 3.0
    move_s: float = 0.8
    radius_m: float = 0.03

    def __post_init__(self) -> None:
        if not (self.period_s > 0 and 0 < self.move_s < self.period_s):
            raise ValueError(
                f"period_s={self.period_s!r}, move_s={self.move_s!r}; "
                "expected 0 < move_s < period_s"
            )

    def waypoint(self, index: int) -> np.ndarray:
        """World ``(x, y)`` of waypoint ``index`` (any integer)."""
        return np.array(_waypoint(self.seed, self.stream, int(index)))

    def position(self, t: np.ndarray | float) -> np.ndarray:
        """World ``(..., 2)`` position at absolute time(s) ``t`` (seconds)."""
        ts = np.asarray(t, dtype=np.float64)
        flat = ts.reshape(-1)
        index = np.floor(flat / self.period_s).astype(np.int64)
        phase = flat - index * self.period_s
        a = np.clip(phase / self.move_s, 0.0, 1.0)
        a = a * a * (3.0 - 2.0 * a)
        out = np.empty((flat.size, 2))
        for i in np.unique(index):
            rows = index == i
            start, end = self.waypoint(int(i) - 1), self.waypoint(int(i))
            out[rows] = start + a[rows, None] * (end - start)
        return out.reshape(ts.shape + (2,))


@functools.lru_cache(maxsize=1024)
def _waypoint(seed: int, stream: int, index: int) -> tuple[float, float]:
    """Waypoint ``index`` of a schedule; cached, since every frame asks for two of them."""
    rng = np.random.default_rng([seed & 0xFFFFFFFF, stream, index & 0xFFFFFFFF])
    distance = rng.uniform(0.25, 0.55)
    bearing = math.radians(rng.uniform(-50.0, 50.0))  # from straight ahead, + = left
    return (-distance * math.sin(bearing), distance * math.cos(bearing))


@dataclass(frozen=True)
class World:
    """Everything a camera and a measurement need to know about the world.

    Attributes:
        seed: fixes the target's and the distractor's waypoints.
        arm: the arm's kinematics.
        base: the base camera's model.
        wrist: the wrist camera's model.
    """

    seed: int = 0
    arm: PlanarArm = field(default_factory=PlanarArm)
    base: BaseCameraModel = field(default_factory=BaseCameraModel)
    wrist: WristCameraModel = field(default_factory=WristCameraModel)

    @property
    def target(self) -> TargetSchedule:
        """The red target's schedule."""
        return TargetSchedule(seed=self.seed, stream=0)

    @property
    def distractor(self) -> TargetSchedule:
        """The blue distractor's schedule."""
        return TargetSchedule(seed=self.seed, stream=1)
