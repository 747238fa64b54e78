"""Shared test set-up.

DDS traffic from different test runs on one machine can meet, so every pytest
session gets its own ROS_DOMAIN_ID and keeps discovery on localhost. This runs
before any test module imports rclpy, and subprocesses inherit it.
"""

from __future__ import annotations

import os
import random

import pytest

if "RELAY_ROS_TEST_DOMAIN_ID" not in os.environ:
    # 1..100 keeps Fast DDS ports in range; pid-seeded so parallel runs differ.
    os.environ["RELAY_ROS_TEST_DOMAIN_ID"] = str(random.Random(os.getpid()).randint(1, 100))
os.environ["ROS_DOMAIN_ID"] = os.environ["RELAY_ROS_TEST_DOMAIN_ID"]
os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
# Tests must never reach a real policy server configured on the developer's machine.
os.environ.pop("WALLE_URL", None)
os.environ.pop("WALLE_DIRECT", None)


@pytest.fixture(scope="session")
def ros_context():
    """One rclpy context for the whole session (init/shutdown is slow and global)."""
    import rclpy

    context = rclpy.context.Context()
    rclpy.init(context=context)
    try:
        yield context
    finally:
        rclpy.shutdown(context=context)


def pytest_terminal_summary(terminalreporter):
    """How many trajectories the rigs' velocity checkers saw (test/trajectory_checker.py)."""
    import sys

    module = sys.modules.get("trajectory_checker")
    checkers = [c for c in getattr(module, "CHECKERS", []) if c.trajectories]
    if checkers:
        total = sum(c.trajectories for c in checkers)
        worst = max(c.worst_ratio for c in checkers)
        terminalreporter.write_line(
            f"velocity checker: {total} trajectories to controllers in {len(checkers)} rigs, "
            f"largest speed {worst:.3f} x the velocity limit"
        )
