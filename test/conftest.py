"""Shared test set-up.

DDS traffic from different test runs on one machine can meet, so every pytest
session gets its own ROS_DOMAIN_ID (``RELAY_ROS_TEST_DOMAIN_ID``, else a
pid-seeded one) and keeps discovery on localhost. Under pytest-xdist each worker
adds its number (gw0 -> +0, gw1 -> +1, ...) so workers never see each other's
nodes. This runs before any test module imports rclpy, and subprocesses inherit it.

Time factor: ``RELAY_ROS_TEST_TIMEOUT_FACTOR`` (default 1) scales every test
timeout and deadline, pytest-timeout's per-test limit included: helpers.scaled()
and helpers.wait_until() apply it. A loaded or slow machine sets it (e.g. 3) to
make tests wait longer; it never loosens an assertion.

Shared helpers (wait_until, free_port, scaled, observation builders) live in
test/helpers.py, ROS-free so the compat runs can import them; ROS ones in
test/node_rig.py.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest
from helpers import scaled
from trajectory_checker import CHECKERS

_CHECKERS_FROM = pytest.StashKey[int]()
_CHECKERS_REPORTED = pytest.StashKey[set]()

if "RELAY_ROS_TEST_DOMAIN_ID" not in os.environ:
    # 1..100 keeps Fast DDS ports in range; pid-seeded so parallel runs differ.
    os.environ["RELAY_ROS_TEST_DOMAIN_ID"] = str(random.Random(os.getpid()).randint(1, 100))
_worker = os.environ.get("PYTEST_XDIST_WORKER", "")
_offset = int(_worker[2:]) if _worker.startswith("gw") and _worker[2:].isdigit() else 0
# Fast DDS takes domain ids 0..232; wrap so base + offset stays in range.
os.environ["ROS_DOMAIN_ID"] = str((int(os.environ["RELAY_ROS_TEST_DOMAIN_ID"]) + _offset) % 233)
os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
# Tests must never reach a real policy server configured on the developer's machine.
os.environ.pop("WALLE_URL", None)
os.environ.pop("WALLE_DIRECT", None)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """pytest-timeout's limit (ini ``timeout`` or a ``timeout`` marker) times the factor."""
    option = config.getoption("timeout", None)
    default = float(option if option is not None else config.getini("timeout") or 0)
    for item in items:
        marker = item.get_closest_marker("timeout")
        base = default
        if marker is not None:
            base = float(marker.args[0] if marker.args else marker.kwargs.get("timeout", default))
        if base > 0 and scaled(base) != base:
            item.add_marker(pytest.mark.timeout(scaled(base)), append=False)


@pytest.fixture
def isolated_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No WALLE_* from the developer's shell, and no .env above the checkout: the
    test runs in its own empty directory (for tests of the client's URL lookup)."""
    monkeypatch.delenv("WALLE_URL", raising=False)
    monkeypatch.delenv("WALLE_DIRECT", raising=False)
    monkeypatch.chdir(tmp_path)


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


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Mark where this test's velocity checkers start in ``CHECKERS``."""
    item.stash[_CHECKERS_FROM] = len(CHECKERS)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):
    """Every velocity checker a test made (its rigs') is judged when the test body
    ends and again after its teardown (rigs closed by fixtures): a trajectory over a
    limit fails a test that passed, and is reported beside the failure of one that
    failed, so a fault of the node is never hidden by another assertion."""
    report = yield
    if call.when not in ("call", "teardown"):
        return report
    reported = item.stash.setdefault(_CHECKERS_REPORTED, set())
    start = item.stash.get(_CHECKERS_FROM, len(CHECKERS))
    over = [c for c in CHECKERS[start:] if c.judged and c.over and id(c) not in reported]
    if not over:
        return report
    reported.update(id(c) for c in over)
    text = "\n".join(
        f"velocity checker {c.name}: {c.worst} ({c.worst_ratio:.3f} x the limit)" for c in over
    )
    if report.passed:
        report.outcome = "failed"
        report.longrepr = f"a trajectory to a controller exceeded a velocity limit:\n{text}"
    else:
        report.sections.append(("velocity checker", text))
    return report


def pytest_terminal_summary(terminalreporter):
    """How many trajectories the rigs' velocity checkers saw (test/trajectory_checker.py)."""
    checkers = [c for c in CHECKERS if c.judged and c.trajectories]
    if checkers:
        total = sum(c.trajectories for c in checkers)
        worst = max(c.worst_ratio for c in checkers)
        terminalreporter.write_line(
            f"velocity checker: {total} trajectories to controllers in {len(checkers)} rigs, "
            f"largest speed {worst:.3f} x the velocity limit"
        )
