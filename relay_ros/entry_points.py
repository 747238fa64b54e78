"""The console scripts of setup.py: each takes SIGINT and SIGTERM first, then imports its program.

Importing a node's module (rclpy, NumPy, OpenCV) takes most of its start-up; a
Ctrl-C in that time used to end in a ``KeyboardInterrupt`` traceback. So each entry
point here calls :func:`relay_ros.stop_signals.take_stop_signals` before anything
heavy is imported (this module and ``relay_ros/__init__.py`` import only the standard
library), then hands over to the program's ``main()``, which stops at the first
signal once the step under way is done.
"""

from __future__ import annotations

from relay_ros.stop_signals import take_stop_signals

__all__ = ["policy_node", "policy_server", "sim_arm", "sim_cameras"]


def policy_node() -> int:
    """``policy_node`` (:func:`relay_ros.node.policy_node.main`)."""
    take_stop_signals()
    from relay_ros.node.policy_node import main

    return main()


def sim_arm() -> int:
    """``sim_arm`` (:func:`relay_ros.sim.arm_node.main`)."""
    take_stop_signals()
    from relay_ros.sim.arm_node import main

    return main()


def sim_cameras() -> int:
    """``sim_cameras`` (:func:`relay_ros.sim.cameras_node.main`)."""
    take_stop_signals()
    from relay_ros.sim.cameras_node import main

    return main()


def policy_server() -> int:
    """``relay-policy-server`` (:func:`relay_ros.server.__main__.main`)."""
    take_stop_signals()
    from relay_ros.server.__main__ import main

    return main()
