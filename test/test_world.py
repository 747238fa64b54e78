"""The simulated world: arm kinematics, camera models, target schedule, rendered views,
and the visual closed loop on a synthetic clock (no ROS): correct wiring reaches the
target, swapped cameras and swapped colour channels do not."""

from __future__ import annotations

import numpy as np
import pytest

from relay_ros.sim.closed_loop import LoopSettings, run_closed_loop
from relay_ros.sim.world_camera import DISTRACTOR_RGB, TARGET_RGB, WorldCamera
from relay_ros.world import PlanarArm, TargetSchedule, World


def test_inverse_kinematics_reaches_every_waypoint():
    arm = PlanarArm()
    schedule = TargetSchedule(seed=4)
    for index in range(-5, 30):
        point = schedule.waypoint(index)
        distance = float(np.hypot(*point))
        assert 0.25 <= distance <= 0.55
        q1, q2 = arm.inverse(point)
        np.testing.assert_allclose(arm.end_effector(q1, q2), point, atol=1e-9)
        assert abs(q2) < np.pi / 2  # the elbow-right branch, inside joint2's limits


def test_out_of_reach_points_move_into_the_ring():
    arm = PlanarArm()
    q1, q2 = arm.inverse(np.array([0.0, 2.0]))
    assert np.hypot(*arm.end_effector(q1, q2)) == pytest.approx(arm.reach()[1] - 0.02)


def test_camera_models_round_trip():
    world = World()
    points = np.array([[0.1, 0.4], [-0.3, 0.2]])
    pixels = world.base.to_pixels(points, 224, 168)
    np.testing.assert_allclose(world.base.to_world(pixels, 224, 168), points)
    ee, heading = np.array([0.2, 0.3]), 0.7
    pixels = world.wrist.to_pixels(points, ee, heading, 320, 240)
    np.testing.assert_allclose(world.wrist.to_world(pixels, ee, heading, 320, 240), points)
    # The wrist camera looks along the forearm: a point straight ahead is straight up.
    ahead = ee + 0.05 * np.array([np.cos(heading), np.sin(heading)])
    u, v = world.wrist.to_pixels(ahead, ee, heading, 320, 240)
    assert u == pytest.approx(160.0) and v < 120.0


def test_target_dwells_then_glides_continuously():
    schedule = TargetSchedule(seed=1)
    t = np.arange(300.0, 309.0, 0.01)
    path = schedule.position(t)
    np.testing.assert_array_equal(path, TargetSchedule(seed=1).position(t))  # pure function
    steps = np.linalg.norm(np.diff(path, axis=0), axis=1)
    assert steps.max() < 0.02  # no teleporting
    dwell = (t % 3.0) > 0.8
    assert np.all(steps[dwell[1:] & dwell[:-1]] == 0.0)
    assert not np.array_equal(path, TargetSchedule(seed=2).position(t))
    with pytest.raises(ValueError, match="expected 0 < move_s < period_s"):
        TargetSchedule(period_s=1.0, move_s=2.0)


def test_views_show_the_target_and_follow_the_arm():
    world = World(seed=3)
    t = 100.0
    q = world.arm.inverse(world.target.position(t))
    base = WorldCamera("base", 320, 240, world)
    frame = base.render(t, *q)
    assert frame.shape == (240, 320, 3) and frame.dtype == np.uint8
    np.testing.assert_array_equal(frame, base.render(t, *q))
    assert not np.array_equal(frame, base.render(t, q[0] + 0.3, q[1]))
    wrist = WorldCamera("wrist", 320, 240, world).render(t, *q)
    # On target, the wrist camera sees the red disk at its centre.
    np.testing.assert_array_equal(wrist[120, 160], TARGET_RGB)
    red = np.all(frame == TARGET_RGB, axis=2).sum()
    blue = np.all(frame == DISTRACTOR_RGB, axis=2).sum()
    assert red > 20 and blue > 20
    with pytest.raises(ValueError, match="camera role 'top' is not one of"):
        WorldCamera("top", 320, 240)
    with pytest.raises(ValueError, match="scene width 8 is not an integer number of pixels"):
        WorldCamera("base", 8, 240)


@pytest.fixture(scope="module")
def correct() -> object:
    return run_closed_loop(LoopSettings(duration_s=12.0, seed=1))


def test_correct_wiring_reaches_the_target(correct):
    assert correct.task.median_m < 0.04
    assert correct.task.on_target_share > 0.35
    assert correct.stall_time_s == 0.0


@pytest.mark.parametrize("fault", ["swap-cameras", "swap-red-blue"])
def test_swapped_wiring_misses_the_target(correct, fault):
    wrong = run_closed_loop(LoopSettings(duration_s=12.0, seed=1, fault=fault))
    assert wrong.task.on_target_share < 0.1
    assert wrong.task.median_m > 0.1
    assert wrong.task.median_m > 3 * correct.task.median_m


def test_prefix_joins_chunks_where_none_jumps():
    none = run_closed_loop(LoopSettings(duration_s=8.0, seed=2, smoothing="none"))
    prefix = run_closed_loop(LoopSettings(duration_s=8.0, seed=2, smoothing="prefix"))
    assert none.boundary_max > 5.0
    assert prefix.boundary_max <= 1.5
    assert prefix.jerk_rms * 3 < none.jerk_rms
    assert prefix.task.median_m < 0.05


def test_loop_settings_are_checked():
    with pytest.raises(ValueError, match="smoothing 'spline' is not one of"):
        LoopSettings(smoothing="spline")
    with pytest.raises(ValueError, match="fault 'x' is not one of"):
        LoopSettings(fault="x")
