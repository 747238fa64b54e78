"""Simulated robot for relay_ros: a joint_trajectory_controller stand-in, a world with a
task, and cameras that see it.

The plain modules (`trajectory_follower`, `trajectory_command`,
`controller_measures`, `motion_measures`, `task`, `world_camera`, `scene`,
`closed_loop`) need no rclpy; the thin nodes (`arm_node`, `cameras_node`) wrap them
for ROS 2. Only the plain names are re-exported here so that ``import relay_ros.sim``
works without ROS; the camera names are imported lazily because they pull in OpenCV.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from relay_ros.sim.controller_measures import (
    BoundaryStep,
    ControllerMeasures,
    FollowerHistory,
    FollowerMetrics,
)
from relay_ros.sim.trajectory_command import (
    REJECT_CODES,
    Acceptance,
    TrajectoryCommand,
    TrajectoryPoint,
)
from relay_ros.sim.trajectory_follower import (
    FollowerConfigError,
    FollowerSample,
    TrajectoryFollower,
)
from relay_ros.world import (
    BaseCameraModel,
    PlanarArm,
    TargetSchedule,
    World,
    WristCameraModel,
)

if TYPE_CHECKING:
    from relay_ros.sim.scene import SceneError, SceneRenderer, encode_jpeg
    from relay_ros.sim.world_camera import WorldCamera

__all__ = [
    "REJECT_CODES",
    "Acceptance",
    "BaseCameraModel",
    "BoundaryStep",
    "ControllerMeasures",
    "FollowerConfigError",
    "FollowerHistory",
    "FollowerMetrics",
    "FollowerSample",
    "PlanarArm",
    "SceneError",
    "SceneRenderer",
    "TargetSchedule",
    "TrajectoryCommand",
    "TrajectoryFollower",
    "TrajectoryPoint",
    "World",
    "WorldCamera",
    "WristCameraModel",
    "encode_jpeg",
    "format_t_obs",
    "parse_t_obs",
]


def __getattr__(name: str) -> Any:
    if name in ("SceneError", "SceneRenderer", "encode_jpeg"):
        from relay_ros.sim import scene  # OpenCV: only when asked for

        return getattr(scene, name)
    if name == "WorldCamera":
        from relay_ros.sim import world_camera  # OpenCV: only when asked for

        return world_camera.WorldCamera
    raise AttributeError(f"module 'relay_ros.sim' has no attribute {name!r}")
