"""The simulated controller's measures hold a fixed amount of memory however long it runs.

``RowRing`` is the bounded structure behind the cycle history and the action ages:
its contents and order are checked on known rows, and tracemalloc shows that a
follower run far past its history length allocates nothing more (before, one tuple
of two arrays per control cycle grew sim_arm by 4.9 MiB a minute).
"""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from relay_ros.sim.controller_measures import ControllerMeasures, RowRing
from relay_ros.sim.trajectory_command import TrajectoryCommand
from relay_ros.sim.trajectory_follower import TrajectoryFollower


def test_a_ring_keeps_the_last_rows_in_order() -> None:
    ring = RowRing(3, 3)
    assert (len(ring), ring.rows().shape) == (0, (0, 3))
    for i in range(5):
        ring.append(float(i), np.array([10.0 * i, 100.0 * i]))
    assert len(ring) == 3 and ring.capacity == 3
    np.testing.assert_array_equal(ring.rows(), [[2, 20, 200], [3, 30, 300], [4, 40, 400]])
    ring.clear()
    assert len(ring) == 0
    ring.append(7.0, 8.0, 9.0)
    np.testing.assert_array_equal(ring.rows(), [[7, 8, 9]])


def test_rows_are_a_copy() -> None:
    ring = RowRing(2, 1)
    ring.append(1.0)
    rows = ring.rows()
    rows[0, 0] = 5.0
    assert ring.rows()[0, 0] == 1.0


def test_a_ring_needs_room() -> None:
    with pytest.raises(ValueError, match="expected both >= 1"):
        RowRing(0, 3)


def test_measures_allocate_nothing_past_their_capacity() -> None:
    """Measured where it grew: the measures of one controller, 10 000 cycles after the
    buffers are full, with tracemalloc (which sees NumPy's buffers too)."""
    joints = tuple(f"joint{i}" for i in range(7))
    measures = ControllerMeasures("arm", joints, history_length=1000)
    commanded, followed = np.zeros(7), np.ones(7)
    for i in range(2000):  # every buffer full, every code path warm
        measures.cycle(0.01 * i, commanded, followed, 0.0, False)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(2000, 12000):
            measures.cycle(0.01 * i, commanded, followed, 0.0, False)
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown < 4096, f"{grown} bytes allocated over 10 000 cycles"
    history = measures.history()
    assert history.times.shape == (1000,) and history.times[-1] == pytest.approx(119.99)
    assert history.commanded.shape == history.positions.shape == (1000, 7)
    assert (history.positions == 1.0).all() and (history.commanded == 0.0).all()


def test_a_follower_keeps_history_length_cycles() -> None:
    follower = TrajectoryFollower(["a", "b"], [0.0, 0.0], name="arm", history_length=50)
    command = TrajectoryCommand(stamp=0.0, joint_names=["a", "b"], points=[(1.0, [1.0, -1.0])])
    follower.receive(command, 0.0)
    for i in range(1, 201):
        follower.update(0.01 * i)
    history = follower.measures.history()
    assert history.times.shape == (50,)
    np.testing.assert_allclose(history.times, 0.01 * np.arange(151, 201))
    np.testing.assert_allclose(history.commanded[-1], [1.0, -1.0])
