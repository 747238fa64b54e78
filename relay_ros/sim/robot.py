"""The simulated robot of a node configuration: where its joints rest, how the policy moves it.

``make demo`` and ``bench/motion.py`` simulate the robot a node configuration
describes (config/<model>.yaml, or a layout's config/<layout>.yaml: a Franka for
DROID, ALOHA's arms): its joints start at :func:`resting_position`, and for a layout
the reference server's policy is told that robot (:func:`policy_robot`: its speed,
acceleration and rest pose, ``relay-policy-server --max-speed``, ``--max-acceleration``,
``--rest-pose``), as a policy trained on its demonstrations moves. Without it the
reference policy moves like the simulated arm of config/sim_arm.urdf (1.6 rad/s,
resting at 0): faster than a Franka's 2.175 rad/s allows once the controller's cubics
run it (up to 1.5x the secant: 2.4 rad/s), and towards 0, outside its joint 4's range.

Plain Python.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from relay_ros.node.node_config import NodeConfig
from relay_ros.pipeline.joint_limits import JointLimit

__all__ = ["ACCELERATION_SHARE", "SPEED_SHARE", "RobotMotion", "policy_robot", "resting_position"]

#: The policy's speed bound over a joint's velocity limit: the reference visual plan's
#: 1.6 rad/s (``server.policy_robot.VISUAL_MAX_SPEED``) of the simulated arm's 2.5
#: (the controller's monotone cubics peak at up to 1.5x their secant). Not imported
#: from there: this module is imported by the demo's launch helpers, which must load
#: without the server (and its websockets) when ROS's apt websockets is too old.
SPEED_SHARE = 0.64
#: The policy's acceleration bound over a joint's acceleration limit: the splice's
#: fade may take up to half of it (test/test_acceleration_limits.py).
ACCELERATION_SHARE = 0.3


def resting_position(limit: JointLimit) -> float:
    """Where a simulated joint starts: 0, unless that is outside or within a tenth of
    the range of a position limit (DROID's gripper 0..1, the Franka's joint 4), then the
    middle of the range (the demo's arm starts there too)."""
    lower, upper = limit.min_position, limit.max_position
    margin = 0.1 * (upper - lower)
    return 0.0 if lower + margin <= 0.0 <= upper - margin else (lower + upper) / 2.0


class RobotMotion(NamedTuple):
    """A ``PolicyRobot``'s fields (``server/policy_robot.py``), per action dimension."""

    max_speed: tuple[float, ...]
    max_acceleration: tuple[float, ...]
    rest: tuple[float, ...]


def policy_robot(config: NodeConfig) -> RobotMotion | None:
    """The robot ``config`` commands, as the reference policy's action dimensions see it
    (each output's ``dims``): per dimension :data:`SPEED_SHARE` of its joint's velocity
    limit, :data:`ACCELERATION_SHARE` of its acceleration limit where every joint has
    one, and its :func:`resting_position`; dimensions no joint drives take the
    slowest. None when the outputs name no dimensions (GR00T's action groups)."""
    columns: dict[int, JointLimit] = {}
    for output in config.outputs:
        for joint, dim in zip(output.joints, output.dims or ()):
            columns.setdefault(int(dim), config.joint_limits[joint])
    if not columns:
        return None
    width = max(columns) + 1
    speeds = [SPEED_SHARE * limit.max_velocity for limit in columns.values()]
    accelerations = [limit.max_acceleration for limit in columns.values()]
    bounded = all(math.isfinite(a) for a in accelerations)
    speed, acceleration, rest = [], [], []
    for dim in range(width):
        limit = columns.get(dim)
        if limit is None:
            speed.append(min(speeds))
            acceleration.append(ACCELERATION_SHARE * min(accelerations))
            rest.append(0.0)
            continue
        speed.append(SPEED_SHARE * limit.max_velocity)
        acceleration.append(ACCELERATION_SHARE * limit.max_acceleration)
        rest.append(resting_position(limit))
    return RobotMotion(tuple(speed), tuple(acceleration) if bounded else (), tuple(rest))
