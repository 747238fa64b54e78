"""Trajectory points from publications: dims, velocities, exact (sec, nanosec)."""

from __future__ import annotations

import numpy as np
import pytest

from relay_ros.pipeline.publication import Publication
from relay_ros.pipeline.scheduler import ChunkScheduler
from relay_ros.pipeline.scheduler_config import SchedulerConfig
from relay_ros.pipeline.trajectory import (
    TrajectoryError,
    build_points,
    finite_difference_velocities,
    seconds_to_sec_nanosec,
    times_to_sec_nanosec,
)


def publication(positions: np.ndarray, *, stamp: float = 100.0, tfs0: float = 0.02) -> Publication:
    n = positions.shape[0]
    return Publication(
        stamp=stamp,
        positions=positions,
        time_from_start=tfs0 + np.arange(n) * 0.02,
        t_obs=stamp - 0.05,
        first_index=4,
        switch_time=stamp + 0.1,
        chunk_seq=1,
    )


def test_build_points_selects_dims_in_controller_order() -> None:
    positions = np.arange(12, dtype=float).reshape(4, 3)
    points = build_points(publication(positions), [2, 0])
    np.testing.assert_array_equal(points.positions, positions[:, [2, 0]])
    assert points.stamp == 100.0
    np.testing.assert_allclose(points.time_from_start, [0.02, 0.04, 0.06, 0.08])
    with pytest.raises(ValueError):
        points.positions[0, 0] = 1.0


def test_velocities_are_monotone_finite_differences_with_zero_last() -> None:
    # p = t^2 on points spaced 0.02 s: inside, the harmonic mean of the two secants.
    t = 0.02 + np.arange(6) * 0.02
    positions = np.stack([t**2, -3 * t], axis=1)
    points = build_points(publication(positions), [0, 1])
    v = points.velocities
    secants = np.diff(t**2) / 0.02
    harmonic = 2 * secants[:-1] * secants[1:] / (secants[:-1] + secants[1:])
    np.testing.assert_allclose(v[1:-1, 0], harmonic[:4], rtol=1e-12)
    np.testing.assert_allclose(v[0, 0], (t[1] ** 2 - t[0] ** 2) / 0.02)  # forward on first
    np.testing.assert_allclose(v[:-1, 1], -3.0)  # a straight line keeps its slope
    assert (v[-1] == 0.0).all()


def test_velocity_is_zero_where_the_motion_stops_or_reverses() -> None:
    positions = np.array([[0.0], [0.5], [1.0], [1.0], [0.2], [0.4]])
    points = build_points(publication(positions), [0])
    np.testing.assert_array_equal(points.velocities[2:5, 0], [0.0, 0.0, 0.0])


def test_single_point_has_zero_velocity() -> None:
    points = build_points(publication(np.array([[1.0, 2.0]])), [1])
    np.testing.assert_array_equal(points.velocities, [[0.0]])


def test_bad_dims() -> None:
    pub = publication(np.zeros((3, 2)))
    with pytest.raises(TrajectoryError) as info:
        build_points(pub, [0, 2])
    assert str(info.value) == (
        "action dimension 2 is out of range; the publication has dimensions 0..1"
    )
    with pytest.raises(TrajectoryError) as info:
        build_points(pub, [])
    assert str(info.value) == "dims is empty; a controller needs at least one action dimension"


def test_nan_positions_are_rejected() -> None:
    with pytest.raises(TrajectoryError) as info:
        build_points(publication(np.array([[0.0], [np.nan]])), [0])
    assert str(info.value) == "publication positions contain NaN or Inf"


def test_finite_difference_rejects_non_increasing_times() -> None:
    with pytest.raises(TrajectoryError) as info:
        finite_difference_velocities(np.zeros((3, 1)), np.array([0.0, 0.1, 0.1]))
    assert str(info.value) == "times must be strictly increasing for finite differences"


@pytest.mark.parametrize(
    ("seconds", "pair"),
    [
        (0.0, (0, 0)),
        (0.1, (0, 100_000_000)),
        (0.02, (0, 20_000_000)),
        (1.5, (1, 500_000_000)),
        (2.9999999999, (3, 0)),  # rounds up to a full second: carried
        (1_764_000_000.25, (1_764_000_000, 250_000_000)),
        (7.000000001, (7, 1)),
    ],
)
def test_seconds_to_sec_nanosec(seconds: float, pair: tuple[int, int]) -> None:
    result = seconds_to_sec_nanosec(seconds)
    assert result == pair
    assert all(type(v) is int for v in result)


def test_seconds_to_sec_nanosec_rejects_negative() -> None:
    with pytest.raises(TrajectoryError) as info:
        seconds_to_sec_nanosec(-0.5)
    assert str(info.value) == "time -0.5 s must be a finite number >= 0"


def test_sec_nanosec_is_monotonic_without_drift() -> None:
    rng = np.random.default_rng(0)
    times = np.sort(rng.uniform(0, 5, size=2000))
    pairs = [seconds_to_sec_nanosec(t) for t in times]
    assert pairs == sorted(pairs)
    # 50 points at 1/30 s from 0.0333...: each equals round(k/30 * 1e9) ns exactly.
    tfs = (1 / 30) + np.arange(50) * (1 / 30)
    pairs = times_to_sec_nanosec(tfs)
    expected = [divmod(round((k + 1) * 1e9 / 30), 1_000_000_000) for k in range(50)]
    assert pairs == expected


def test_times_to_sec_nanosec_rejects_collisions() -> None:
    with pytest.raises(TrajectoryError) as info:
        times_to_sec_nanosec([0.1, 0.1000000000001])
    assert str(info.value) == (
        "time_from_start[1] (0, 100000000) is not after time_from_start[0] (0, 100000000) "
        "(sec, nanosec); times must be strictly increasing"
    )


def test_points_from_scheduler_publication_are_valid_for_the_controller() -> None:
    sched = ChunkScheduler(SchedulerConfig(dt=1 / 30, horizon=20, execute_horizon=5))
    sched.request_sent(1000.0)
    chunk = np.cumsum(np.ones((20, 7)), axis=0)
    sched.chunk_received(chunk, 1000.0, 1000.1)
    pub = sched.poll(1000.1)
    assert pub is not None
    points = build_points(pub, [0, 1, 2, 3, 4, 5])
    pairs = points.time_from_start_sec_nanosec
    ns = [s * 1_000_000_000 + n for s, n in pairs]
    assert all(b > a for a, b in zip(ns, ns[1:]))
    assert ns[0] >= round(1e9 / 30) - 1
    assert (points.velocities[-1] == 0).all()
    np.testing.assert_allclose(points.velocities[:-1], 30.0)
    assert points.stamp_sec_nanosec == seconds_to_sec_nanosec(1000.1)
