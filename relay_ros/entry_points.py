"""The console scripts of setup.py: each takes SIGINT and SIGTERM first, then imports its program.

Importing a node's module (rclpy, NumPy, OpenCV) takes most of its start-up; a
Ctrl-C in that time would end in a ``KeyboardInterrupt`` traceback. So each entry
point's first statement holds both signals (with the built-in ``signal`` module
only), then :func:`relay_ros.stop_signals.take_stop_signals` takes them over, before
anything heavy is imported; then the program's ``main()`` runs, which stops at the
first signal once the step under way is done. Importing this module changes nothing.
"""

from __future__ import annotations

import signal

__all__ = ["policy_node", "policy_server", "sim_arm", "sim_cameras"]

# Signals that arrive between the first line of an entry point and the moment
# relay_ros.stop_signals has taken over (a few ms of imports).
_early: list[int] = []


def _hold(signum: int, frame: object) -> None:
    _early.append(signum)


def _take_signals() -> None:
    """Hold SIGINT/SIGTERM at once (``signal`` is built in), then hand them to StopSignals."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _hold)
    # Only now: a signal that comes while stop_signals (or a program) imports is held.
    from relay_ros.stop_signals import take_stop_signals

    take_stop_signals(pending=_early)


def policy_node() -> int:
    """``policy_node`` (:func:`relay_ros.node.policy_node.main`)."""
    _take_signals()
    from relay_ros.node.policy_node import main

    return main()


def sim_arm() -> int:
    """``sim_arm`` (:func:`relay_ros.sim.arm_node.main`)."""
    _take_signals()
    from relay_ros.sim.arm_node import main

    return main()


def sim_cameras() -> int:
    """``sim_cameras`` (:func:`relay_ros.sim.cameras_node.main`)."""
    _take_signals()
    from relay_ros.sim.cameras_node import main

    return main()


def policy_server() -> int:
    """``relay-policy-server`` (:func:`relay_ros.server.__main__.main`)."""
    _take_signals()
    from relay_ros.server.__main__ import main

    return main()
