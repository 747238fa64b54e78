"""The smoothing strategies (relay_ros.pipeline.smoothing), on hand-built switches.

Each strategy is checked against answers computed by hand; the splice's promise (from
the commanded position, velocity and acceleration into the new chunk, inside the
limits whatever the chunks) against the publication check's own motion check, on
adversarial switches; and the choice of a strategy for a server, with the reasons a
choice is refused.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from relay_ros.pipeline.gate.motion import MotionLimits, check_motion
from relay_ros.pipeline.gate.retiming import braked_tail
from relay_ros.pipeline.interpolation import ControllerTrajectory
from relay_ros.pipeline.joint_limits import JointLimit
from relay_ros.pipeline.smoothing import (
    SMOOTHING_CHOICES,
    CrossFade,
    Motion,
    NoSmoothing,
    ServerPrefix,
    SmoothingError,
    Splice,
    Switch,
    TemporalEnsemble,
    WeightedAverage,
    auto_smoothing_name,
    make_smoothing,
)
from relay_ros.pipeline.smoothing.splice import fade_weights, splice_positions, within_limits

DT = 0.02
H = 50


def limits(
    joints: int = 2, velocity: float = 2.5, acceleration: float = math.inf, dt: float | None = None
) -> MotionLimits:
    chosen = {
        f"j{i}": JointLimit(
            min_position=-2.0,
            max_position=2.0,
            max_velocity=velocity,
            max_acceleration=acceleration,
        )
        for i in range(joints)
    }
    return MotionLimits.from_joint_limits(chosen, list(chosen), dt=dt)


def motion(
    stamp: float, positions: np.ndarray, start: np.ndarray, start_velocity: np.ndarray
) -> Motion:
    """The trajectory a controller follows: published at ``stamp`` from ``start`` moving at
    ``start_velocity``, points every DT from one DT after it (the chunk, action i at
    ``stamp + (i+1)*DT``)."""
    tfs = DT * np.arange(1, len(positions) + 1)
    chunk = np.vstack([start[None, :], positions])[:H]
    if len(chunk) < H:
        chunk = np.vstack([chunk, np.repeat(chunk[-1:], H - len(chunk), axis=0)])
    return Motion(
        chunk=chunk,
        origin=stamp,
        end_time=stamp + float(tfs[-1]),
        followed=ControllerTrajectory.published(stamp, start, start_velocity, positions, tfs),
    )


def switch(
    previous: Motion | None, rows: np.ndarray, stamp: float, tfs0: float = DT, execute: int = 10
) -> Switch:
    tfs = tfs0 + DT * np.arange(len(rows))
    chunk = np.vstack([np.repeat(rows[:1], 2, axis=0), rows])[:H]
    chunk = np.vstack([chunk, np.repeat(chunk[-1:], H - len(chunk), axis=0)])
    return Switch(
        stamp=stamp,
        time_from_start=tfs,
        positions=rows,
        chunk=chunk,
        origin=stamp + tfs0 - 2 * DT,
        first_index=2,
        dt=DT,
        execute_horizon=execute,
        previous=previous,
    )


def ramp(start: float, speed: float, count: int, t0: float) -> np.ndarray:
    """(count, 2) rows moving at ``speed`` rad/s from ``start`` at ``t0`` (times t0 + k*DT)."""
    values = start + speed * (t0 + DT * np.arange(count))
    return np.stack([values, 0.5 * values], axis=1)


# ------------------------------------------------------------------ every strategy


def test_without_a_previous_motion_every_strategy_publishes_the_chunk() -> None:
    rows = ramp(0.1, 0.5, 30, 0.02)
    for strategy in (
        NoSmoothing(),
        ServerPrefix(),
        Splice(limits=limits()),
        CrossFade(5),
        WeightedAverage(),
        TemporalEnsemble(),
    ):
        out = strategy.smooth(switch(None, rows, 0.0))
        np.testing.assert_array_equal(out.positions, rows)
        assert out.changed == 0, strategy.name


def test_none_and_prefix_publish_the_rows_as_they_are() -> None:
    old = motion(0.0, ramp(0.0, 1.0, 40, DT), np.zeros(2), np.array([1.0, 0.5]))
    rows = ramp(0.3, -1.0, 30, 0.42)  # disagrees in position and direction
    for strategy in (NoSmoothing(), ServerPrefix()):
        out = strategy.smooth(switch(old, rows, 0.4))
        np.testing.assert_array_equal(out.positions, rows)
        assert out.changed == 0


def test_crossfade_uses_the_old_chunk_at_the_same_times() -> None:
    # The old chunk: action i = i * 0.01 at 0.0 + i*DT; the new one stands at 1.0.
    old_chunk = (np.arange(H) * 0.01)[:, None] * np.ones((1, 2))
    old = Motion(old_chunk, 0.0, (H - 1) * DT, ControllerTrajectory.standing(0.0, old_chunk[0]))
    rows = np.ones((20, 2))
    out = CrossFade(3).smooth(switch(old, rows, 0.5, tfs0=0.02))
    times = 0.52 + DT * np.arange(3)  # old action at 0.52 s is 0.26
    x = np.arange(1, 4) / 4
    w = x * x * (3 - 2 * x)
    np.testing.assert_allclose(out.positions[:3, 0], (1 - w) * times / DT * 0.01 + w * 1.0)
    np.testing.assert_array_equal(out.positions[3:], rows[3:])
    assert out.changed == 3


def test_lerobot_average_mixes_only_where_the_old_plan_still_runs() -> None:
    old = motion(0.0, np.zeros((10, 2)), np.zeros(2), np.zeros(2))  # ends at 0.2 s
    rows = np.ones((20, 2))
    out = WeightedAverage().smooth(switch(old, rows, 0.1, tfs0=0.02))
    times = 0.12 + DT * np.arange(20)
    inside = times <= 0.2 + 1e-9  # 0.12, 0.14, ..., 0.20: five points
    np.testing.assert_allclose(out.positions[inside], 0.7)  # 0.3 * 0 + 0.7 * 1
    np.testing.assert_array_equal(out.positions[~inside], 1.0)
    assert out.changed == 5


def test_act_ensemble_weighs_older_predictions_more() -> None:
    ensemble = TemporalEnsemble()
    first = ensemble.smooth(switch(None, np.zeros((30, 1)), 0.0))
    old_chunk = np.zeros((H, 1))
    old = Motion(old_chunk, -0.02, 0.6, ControllerTrajectory.standing(0.0, [0.0]), first.memo)
    second = ensemble.smooth(switch(old, np.ones((30, 1)), 0.2, tfs0=0.02))
    # Two predictions of each instant: the old one with weight 1, the new exp(-0.01).
    new_weight = math.exp(-0.01)
    np.testing.assert_allclose(second.positions[:10, 0], new_weight / (1.0 + new_weight))
    weights, counts = second.memo
    assert counts[2] == 2.0 and weights[2] == pytest.approx(1.0 + new_weight)


# ------------------------------------------------------------------ the splice


def test_splice_fades_a_constant_gap_over_the_window_the_budgets_give() -> None:
    # The old command moves at 1 rad/s (joint 0) and 0.5 (joint 1); the new chunk moves
    # the same way 0.1 rad ahead (joint 0) and 0.05 (joint 1): a constant gap.
    old = motion(0.0, ramp(0.0, 1.0, 60, DT), np.zeros(2), np.array([1.0, 0.5]))
    stamp = 0.3
    rows = ramp(0.1, 1.0, 40, stamp + DT)
    out = Splice(limits=limits()).smooth(switch(old, rows, stamp, execute=10))
    # Budgets: 5.77 * 0.1 / T^2 <= 5 rad/s^2 -> T >= 0.340 s; 1.875 * 0.1 / T <= 0.2 *
    # 2.5 rad/s -> T >= 0.375 s: 19 periods, 0.38 s (within the 0.4 s cap).
    window = 0.38
    tfs = DT * np.arange(1, 41)
    old_at = ramp(0.0, 1.0, 40, stamp + DT)
    w = fade_weights(tfs, window)[:, None]
    np.testing.assert_allclose(out.positions, old_at + w * (rows - old_at), atol=1e-12)
    np.testing.assert_array_equal(out.positions[19:], rows[19:])  # the chunk's own from T
    assert out.changed == 18
    # The first point 20 ms in is within 0.4 % of the gap of the old command.
    assert abs(out.positions[0, 0] - old_at[0, 0]) < 0.004 * 0.1


def test_splice_continues_the_commanded_position_velocity_and_acceleration() -> None:
    # An old command that accelerates (a parabola) and a new chunk that goes the other
    # way from elsewhere: the published curve leaves the old command only as t^3 does
    # (position, velocity and acceleration continuous at the switch).
    t = DT * np.arange(1, 61)
    old_points = np.stack([0.2 + 1.5 * t**2, -0.3 * t], axis=1)
    old = motion(0.0, old_points, np.array([0.2, 0.0]), np.array([0.0, -0.3]))
    stamp = 0.4
    tfs = np.concatenate((0.001 * np.arange(1, 5), 0.004 + DT * np.arange(1, 30)))
    rows = np.stack([0.5 - 0.8 * tfs, 0.1 - 0.4 * tfs], axis=1)  # the new chunk's curve
    out = splice_positions(
        old.followed,
        stamp,
        tfs,
        rows,
        dt=DT,
        acceleration_budget=np.full(2, 5.0),
        velocity_budget=np.full(2, 0.5),
        window_steps=(3, 20),
    )
    o, _, _ = old.followed.state(stamp + tfs)
    deviation = np.abs(out - o)
    np.testing.assert_allclose(deviation[1] / deviation[0], 8.0, rtol=0.05)  # (2 ms / 1 ms)^3
    np.testing.assert_allclose(deviation[3] / deviation[1], 8.0, rtol=0.1)  # (4 / 2)^3
    assert (deviation[0] < 1e-6).all()


@pytest.mark.parametrize("seed", range(40))
def test_splice_stays_inside_the_limits_whatever_the_switch(seed: int) -> None:
    """Adversarial switches: the old command at up to 0.95 of what the velocity limit
    allows (one way) and the new chunk as fast the other way, up to 1.5 rad apart, near
    the position limits; the chunk itself within the limits. The controller's
    trajectory from the commanded state passes the publication check's motion check,
    the default bound on the points' second differences included (the node's limits
    carry it: ``max_velocity / dt`` without an acceleration limit)."""
    rng = np.random.default_rng(seed)
    lim = limits(joints=3, velocity=2.0, acceleration=rng.choice([math.inf, 200.0]), dt=DT)
    speed = 2.0 / 1.5 * 0.95  # monotone cubics peak at 1.5x their secant
    old_velocity = rng.uniform(-speed, speed, size=3)
    start = rng.uniform(-0.8, 0.8, size=3)
    steps = DT * np.arange(1, 41)
    old_points = start + old_velocity * steps[:, None]  # stays within +-1.82
    old = motion(0.0, old_points, start, old_velocity)
    stamp = float(rng.uniform(0.05, 0.3))
    new_start = np.clip(start + rng.uniform(-1.5, 1.5, size=3), -1.2, 1.2)
    new_velocity = -np.sign(old_velocity) * rng.uniform(0.0, speed, size=3)
    # At that speed, then to rest over its last 0.2 s (the published last point has
    # velocity 0: a chunk that ends moving is over an acceleration limit on its own).
    t = steps[:30]
    braking = np.clip(t - 0.4, 0.0, 0.2)
    travel = np.minimum(t, 0.4) + braking - braking**2 / 0.4
    rows = new_start + new_velocity * travel[:, None]  # within +-1.8
    tfs0 = float(rng.uniform(DT, 2 * DT))
    sw = switch(old, rows, stamp, tfs0=tfs0, execute=int(rng.integers(4, 26)))
    out = Splice(limits=lim).smooth(sw).positions
    p0, v0, _ = old.followed.state(stamp)
    assert within_limits(p0, v0, out, sw.time_from_start, lim)
    # As the gate publishes it: its tail braked where a joint has an acceleration limit.
    positions, times = braked_tail(out, sw.time_from_start, lim) or (out, sw.time_from_start)
    checked = check_motion(p0, positions, times, lim, start_velocity=v0)
    assert checked.refusal is None, checked.refusal


def test_a_chunk_over_the_limits_is_not_hidden_by_the_splice() -> None:
    # The chunk jumps 1 rad between two of its own points: the policy failed, and the
    # publication check must still see it (and refuse it), not a smoothed copy.
    lim = limits()
    old = motion(0.0, ramp(0.0, 0.5, 40, DT), np.zeros(2), np.array([0.5, 0.25]))
    rows = ramp(0.2, 0.5, 30, 0.42)
    rows[20:] += 1.0
    out = Splice(limits=lim).smooth(switch(old, rows, 0.4)).positions
    np.testing.assert_array_equal(out[20:], rows[20:])
    p0, v0, _ = old.followed.state(0.4)
    checked = check_motion(p0, out, DT * np.arange(1, 31), lim, start_velocity=v0)
    assert checked.refusal is not None and "between points 19 and 20" in checked.refusal.reason


def test_splice_settings_are_checked() -> None:
    for kwargs, message in [
        ({"acceleration_budget_rad_s2": 0.0}, "acceleration_budget_rad_s2 0.0 must be"),
        ({"velocity_share": -1.0}, "velocity_share -1.0 must be a number > 0"),
        ({"min_window_steps": 0}, "min_window_steps 0 must be an integer >= 1"),
        ({"max_window_s": math.nan}, "max_window_s nan must be a number > 0"),
    ]:
        with pytest.raises(ValueError, match=message):
            Splice(**kwargs)


# ------------------------------------------------------------------ which one runs


def test_auto_is_the_splice_on_both_kinds_of_server() -> None:
    assert auto_smoothing_name(False) == auto_smoothing_name(True) == "splice"
    for server_prefix in (False, True):
        chosen = make_smoothing(
            "auto", server_prefix=server_prefix, limits=limits(), blend_steps=0, execute_horizon=25
        )
        assert isinstance(chosen, Splice) and chosen.limits is not None


def test_a_choice_the_server_cannot_support_is_refused_with_the_reason() -> None:
    with pytest.raises(SmoothingError) as info:
        make_smoothing(
            "prefix", server_prefix=False, limits=None, blend_steps=0, execute_horizon=25
        )
    assert str(info.value) == (
        "smoothing 'prefix' needs a server that advertises the action_prefix extension "
        "(metadata \"action_prefix\": true); this server does not. Use 'auto' or 'splice'"
    )
    prefix = make_smoothing(
        "prefix", server_prefix=True, limits=None, blend_steps=0, execute_horizon=25
    )
    assert isinstance(prefix, ServerPrefix) and prefix.needs_prefix
    with pytest.raises(SmoothingError, match=r"smoothing 'spline' is not one of \['auto'"):
        make_smoothing("spline", server_prefix=True, limits=None, blend_steps=0, execute_horizon=25)
    with pytest.raises(
        SmoothingError, match="blend_steps 4 is the length of smoothing 'crossfade'"
    ):
        make_smoothing(
            "splice", server_prefix=False, limits=None, blend_steps=4, execute_horizon=25
        )
    fade = make_smoothing(
        "crossfade", server_prefix=False, limits=None, blend_steps=0, execute_horizon=25
    )
    assert fade == CrossFade(12)  # half the execute horizon
    assert set(SMOOTHING_CHOICES) == {
        "auto", "none", "splice", "prefix", "crossfade", "lerobot_average", "act_ensemble",
    }  # fmt: skip
