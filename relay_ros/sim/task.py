"""How well the arm did its task.

Plain NumPy over recorded series, shared by the demo and the benches (smoothness is
`relay_ros.sim.motion_measures`):

- **tracking error**: at each control cycle, the distance from the end effector
  (forward kinematics of the followed joint positions) to the target where its
  seeded schedule put it (`relay_ros.world`); the policy never sees the
  schedule, only the cameras;
- **time on target**: the share of cycles with the end effector over the target
  disk (error <= its radius, 3 cm).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from relay_ros.world import World

__all__ = ["TaskMeasures", "task_measures"]


@dataclass(frozen=True)
class TaskMeasures:
    """The task measures of one run.

    Attributes:
        errors_m: (N,) end effector to target distance at each measured cycle (m).
        on_target_m: the distance that counts as "on target" (m).
    """

    errors_m: np.ndarray
    on_target_m: float

    @property
    def median_m(self) -> float | None:
        """Median tracking error (m), or None without samples."""
        return float(np.median(self.errors_m)) if self.errors_m.size else None

    @property
    def p90_m(self) -> float | None:
        """90th percentile of the tracking error (m), or None."""
        return float(np.percentile(self.errors_m, 90)) if self.errors_m.size else None

    @property
    def on_target_share(self) -> float | None:
        """Share of cycles on target (0..1), or None."""
        if self.errors_m.size == 0:
            return None
        return float(np.mean(self.errors_m <= self.on_target_m))


def task_measures(
    world: World, times_s: np.ndarray, q1: np.ndarray, q2: np.ndarray
) -> TaskMeasures:
    """Tracking error of the end effector at ``times_s`` (absolute s) with joints ``q1, q2``.

    Cycles with a non-finite joint position are left out.
    """
    times = np.asarray(times_s, dtype=np.float64)
    q1, q2 = np.asarray(q1, dtype=np.float64), np.asarray(q2, dtype=np.float64)
    keep = np.isfinite(times) & np.isfinite(q1) & np.isfinite(q2)
    ee = world.arm.end_effector(q1[keep], q2[keep])
    errors = np.linalg.norm(ee - world.target.position(times[keep]), axis=-1)
    return TaskMeasures(errors_m=errors, on_target_m=world.target.radius_m)
