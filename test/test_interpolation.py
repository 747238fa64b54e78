"""The controller's motion between points: published velocities and exact segment extremes.

The extremes are checked against the segment sampled densely (the instrument on
inputs with a known answer first), then the properties the safety check relies
on: monotone velocities never overshoot the points, and a segment's peak speed is
at most 1.5 times the fastest secant next to it.
"""

from __future__ import annotations

import numpy as np
import pytest

from relay_ros.pipeline.interpolation import (
    TrajectoryError,
    finite_difference_velocities,
    segment_extremes,
)
from relay_ros.sim.trajectory_follower import _interpolate


def _sampled(p0, v0, p1, v1, T, n=2001):
    """Speed, acceleration and position range of one segment, by dense sampling of
    the simulated controller's own interpolation (sim/trajectory_follower.py)."""
    taus = np.linspace(0.0, T, n)
    pos, vel = zip(
        *(
            _interpolate(
                0.0, np.array([p0]), np.array([v0]), T, np.array([p1]), np.array([v1]), t, True
            )
            for t in taus
        )
    )
    pos = np.array(pos)[:, 0]
    vel = np.array(vel)[:, 0]
    acc = np.gradient(vel, taus)
    return np.abs(vel).max(), np.abs(acc).max(), pos.min(), pos.max()


def test_known_answers() -> None:
    # From rest to rest over T: peak speed 1.5 * delta / T at the middle, acceleration
    # 6 * delta / T^2 at both ends.
    ext = segment_extremes(
        np.array([[0.0]]), np.array([[0.0]]), np.array([[2.0]]), np.array([[0.0]]), np.array([0.5])
    )
    assert ext.speed[0, 0] == pytest.approx(1.5 * 2.0 / 0.5)
    assert ext.acceleration[0, 0] == pytest.approx(6 * 2.0 / 0.25)
    assert (ext.lowest[0, 0], ext.highest[0, 0]) == (0.0, 2.0)  # no overshoot
    # Constant speed: a straight line.
    ext = segment_extremes(
        np.array([[0.0]]), np.array([[3.0]]), np.array([[0.3]]), np.array([[3.0]]), np.array([0.1])
    )
    assert ext.speed[0, 0] == pytest.approx(3.0)
    assert ext.acceleration[0, 0] == pytest.approx(0.0, abs=1e-9)


@pytest.mark.parametrize("seed", range(3))
def test_extremes_match_dense_sampling(seed: int) -> None:
    rng = np.random.default_rng(seed)
    for _ in range(20):
        p0, p1 = rng.uniform(-1, 1, 2)
        v0, v1 = rng.uniform(-5, 5, 2)
        T = rng.uniform(0.01, 0.2)
        ext = segment_extremes(
            np.array([[p0]]), np.array([[v0]]), np.array([[p1]]), np.array([[v1]]), np.array([T])
        )
        speed, acc, low, high = _sampled(p0, v0, p1, v1, T)
        assert ext.speed[0, 0] == pytest.approx(speed, rel=1e-6, abs=1e-9)
        assert ext.acceleration[0, 0] == pytest.approx(acc, rel=1e-3)
        assert ext.lowest[0, 0] == pytest.approx(low, abs=1e-6)
        assert ext.highest[0, 0] == pytest.approx(high, abs=1e-6)


@pytest.mark.parametrize("seed", range(5))
def test_monotone_velocities_never_overshoot_and_bound_the_peak_speed(seed: int) -> None:
    rng = np.random.default_rng(seed)
    # Random walks with stops and reversals, like a policy's chunks and a gripper
    # closing onto its limit.
    steps = rng.normal(0.0, 0.02, (60, 3))
    steps[rng.random((60, 3)) < 0.2] = 0.0
    positions = np.cumsum(steps, axis=0)
    positions[40:, 2] = positions[40, 2]
    times = 0.02 + 0.02 * np.arange(60)
    v = finite_difference_velocities(positions, times)
    ext = segment_extremes(positions[:-1], v[:-1], positions[1:], v[1:], np.diff(times))
    low = np.minimum(positions[:-1], positions[1:])
    high = np.maximum(positions[:-1], positions[1:])
    assert (ext.lowest >= low - 1e-12).all() and (ext.highest <= high + 1e-12).all()
    secants = np.abs(np.diff(positions, axis=0)) / 0.02
    neighbours = np.maximum(secants, np.vstack((secants[:1], secants[:-1])))
    neighbours = np.maximum(neighbours, np.vstack((secants[1:], secants[-1:])))
    assert (ext.speed <= 1.5 * neighbours + 1e-9).all()


def test_central_differences_would_overshoot_where_a_motion_stops() -> None:
    """Why the velocities are monotone: a gripper closing onto its limit 1.0."""
    positions = np.array([[0.8], [0.9], [1.0], [1.0], [1.0]])
    times = 0.02 * np.arange(1, 6)
    central = np.gradient(positions, times, axis=0)
    central[-1] = 0.0
    over = segment_extremes(
        positions[:-1], central[:-1], positions[1:], central[1:], np.diff(times)
    )
    assert over.highest.max() > 1.0 + 1e-3
    v = finite_difference_velocities(positions, times)
    ext = segment_extremes(positions[:-1], v[:-1], positions[1:], v[1:], np.diff(times))
    assert ext.highest.max() == 1.0


def test_uneven_spacing_uses_the_weighted_harmonic_mean() -> None:
    positions = np.array([[0.0], [1.0], [3.0]])
    times = np.array([0.0, 1.0, 1.5])
    d0, d1, h0, h1 = 1.0, 4.0, 1.0, 0.5
    w0, w1 = 2 * h1 + h0, h1 + 2 * h0
    v = finite_difference_velocities(positions, times)
    assert v[1, 0] == pytest.approx((w0 + w1) / (w0 / d0 + w1 / d1))
    assert (v[0, 0], v[2, 0]) == (1.0, 0.0)


def test_bad_shapes_and_times_are_refused() -> None:
    with pytest.raises(TrajectoryError, match="strictly increasing"):
        finite_difference_velocities(np.zeros((3, 1)), np.array([0.0, 0.1, 0.1]))
    with pytest.raises(TrajectoryError, match="must be \\(N, J\\) and \\(N,\\)"):
        finite_difference_velocities(np.zeros((3,)), np.zeros(3))
