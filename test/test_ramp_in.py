"""The gentle start (``ramp_in_s``): the first motion after the arm stood still, from rest.

The warp itself on known values; the scheduler's timeline (stretched points, the
shift by the time the ramp loses, a chunk observed during the ramp placed where the
robot is) against the closed form; StreamingCore on the synthetic clock with exact
expected speeds (every published secant is the chunk's speed times the ramp's at its
midpoint) after a start and after a hold, a live change, a hold during the ramp (on
simulated controllers), the gate's checks, the smoothing and sync mode; the velocity
checker's window peaks proven on a cubic with a known answer; and
policy_node on real rclpy, ramp on against ramp off on the same world, measured by
the velocity checker after activation and after a hold.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from controller_rig import ControllerRig
from streaming_rig import CoreRig
from test_gate_chunks import _publication as gate_publication
from trajectory_checker import VelocityChecker

from relay_ros.pipeline.gate.motion import MotionLimits, check_motion
from relay_ros.pipeline.gate.retiming import brake_tail, ramp_head
from relay_ros.pipeline.interpolation import hermite_state
from relay_ros.pipeline.joint_limits import JointLimit
from relay_ros.pipeline.publication import smooth_weights
from relay_ros.pipeline.ramp_in import RampIn, check_ramp_in
from relay_ros.pipeline.scheduler import ChunkScheduler
from relay_ros.pipeline.scheduler_config import SchedulerConfig, SchedulerConfigError
from relay_ros.pipeline.smoothing import CrossFade
from relay_ros.pipeline.trajectory import parse_t_obs
from relay_ros.server.metadata import build_metadata

DT = 0.02
H = 50
R = 0.5
STEP = 0.01  # rad per action: 0.5 rad/s
SPEED = STEP / DT
ACCEL_LIMITS = {name: JointLimit(-2.9, 2.9, 2.5, 10.0, source="test") for name in ("j1", "j2")}


# ------------------------------------------------------------------ the warp


def nominal_clock(t: float, start: float, ramp: float = R) -> float:
    """Chunk time run by ``t`` (real time minus what the ramp lost), closed form."""
    d = t - start
    if d <= 0.0:
        return t
    if d >= ramp:
        return t - ramp / 2.0
    return start + d * d / (2.0 * ramp)


def real_time(n: float, start: float, ramp: float = R) -> float:
    """The inverse of :func:`nominal_clock`."""
    m = n - start
    if m <= 0.0:
        return n
    if m >= ramp / 2.0:
        return n + ramp / 2.0
    return start + math.sqrt(2.0 * ramp * m)


def test_the_warp_on_known_values():
    ramp = RampIn(10.0, R)
    assert ramp.end == 10.5
    taus = np.array([0.02, 0.1, 0.25, 0.3, 2.0])
    want = [math.sqrt(0.02), math.sqrt(0.1), 0.5, 0.55, 2.25]  # sqrt(2 R tau), tau + R/2
    np.testing.assert_allclose(ramp.stretch(10.0, taus), want, rtol=1e-12)
    # From a stamp inside the ramp: the chunk time run is what was asked.
    for stamp in (10.1, 10.3, 10.49):
        x = ramp.stretch(stamp, taus)
        run = [xi - ramp.lost(stamp, stamp + xi) for xi in x]
        np.testing.assert_allclose(run, taus, rtol=1e-12)
        assert (x >= taus).all() and (np.diff(x) > 0).all()
    # Before its start nothing is stretched; after its end nothing is (the same array).
    np.testing.assert_array_equal(ramp.delayed(1.0).stretch(10.0, np.array([0.5, 1.0])), [0.5, 1])
    after = np.array([0.02, 0.04])
    assert ramp.stretch(10.5, after) is after
    # The time lost: R/2 in all, exactly 0 on either side of it.
    assert ramp.lost(10.0, 10.5) == 0.25 and ramp.lost(9.0, 12.0) == 0.25
    assert ramp.lost(10.5, 20.0) == 0.0 and ramp.lost(5.0, 10.0) == 0.0
    assert ramp.lost(10.0, 10.25) == pytest.approx(0.25 - 0.25**2)
    assert ramp.remaining(9.0) == 0.25 and ramp.remaining(10.5) == 0.0
    assert [ramp.speed(t) for t in (9.0, 10.0, 10.125, 10.25, 10.5, 11.0)] == [
        1.0,
        0.0,
        0.25,
        0.5,
        1.0,
        1.0,
    ]
    assert ramp.delayed(0.04).start == 10.04
    assert check_ramp_in(0) == 0.0 and check_ramp_in(10) == 10.0
    for bad in (-0.1, 10.5, math.nan, True, "0.5"):
        with pytest.raises(ValueError, match="ramp_in_s"):
            check_ramp_in(bad)
    with pytest.raises(SchedulerConfigError, match="ramp_in_s -1"):
        SchedulerConfig(dt=DT, horizon=H, execute_horizon=10, ramp_in_s=-1)


# ------------------------------------------------------------------ the scheduler


def line(start: float) -> np.ndarray:
    """A chunk moving every column at SPEED from ``start``."""
    return start + np.arange(H, dtype=np.float64)[:, None] * STEP * np.ones((1, 2))


def test_the_scheduler_stretches_the_start_and_shifts_its_timeline():
    sched = ChunkScheduler(
        SchedulerConfig(dt=DT, horizon=H, execute_horizon=10, request_lead_s=0.1, ramp_in_s=R)
    )
    sched.request_sent(10.0)
    assert sched.chunk_received(line(0.0), 10.0, 10.08)
    first = sched.peek(10.08)
    assert first is not None and first.ramp == RampIn(10.08, R)
    # The still arm joins at row 0 in the slot one period ahead (10.10: 20 ms of chunk
    # time after the stamp), and the whole publication runs on the ramp from its stamp:
    # row j at the real time where 20 ms + j*dt of chunk time has run.
    assert first.first_index == 0
    want = [real_time(10.08 + DT + j * DT, 10.08) - 10.08 for j in range(H)]
    np.testing.assert_allclose(first.time_from_start, want, rtol=0, atol=1e-12)
    assert first.time_from_start[0] == pytest.approx(math.sqrt(2 * R * DT))  # 141 ms
    # The switch after E = 10 rows (row 9), on the ramp; the timeline is shifted by
    # the 5 slots the arm stood still and the R/2 the ramp loses.
    assert first.switch_time == pytest.approx(real_time(10.08 + 10 * DT, 10.08), abs=1e-12)
    assert first.shift_s == pytest.approx(5 * DT + R / 2)
    late_rows = first.stamp + first.time_from_start[12:]  # past the ramp: on the timeline
    np.testing.assert_allclose(late_rows, first.origin + np.arange(12, H) * DT, atol=1e-12)
    sched.commit(first)

    # A chunk observed during the ramp: placed by the chunk time the robot ran since.
    t_obs = sched.next_request_time()
    assert t_obs == pytest.approx(first.switch_time - 0.1)
    sched.request_sent(t_obs)
    assert sched.chunk_received(line(0.5), t_obs, t_obs + 0.05)
    now = sched.publication_due
    second = sched.peek(now)
    assert second is not None and second.ramp is first.ramp
    # Its rows on the chunk timeline; the first published is the first one min_lead_s
    # (one period) of chunk time ahead of now.
    nominal = [nominal_clock(t_obs, 10.08) + i * DT for i in range(H)]
    times = [real_time(n, 10.08) for n in nominal]
    k = next(i for i in range(H) if nominal[i] >= nominal_clock(now, 10.08) + DT - 1e-9)
    assert second.first_index == k
    np.testing.assert_allclose(second.stamp + second.time_from_start, times[k:], atol=1e-12)
    # Wall-clock placement (without the lost time) would have dropped more rows.
    naive = math.ceil((now + DT - t_obs) / DT - 1e-9)
    assert naive > k
    sched.commit(second)

    # After the ramp: a chunk observed then runs on real time, exactly as without one.
    sched.request_sent(10.7)
    assert sched.chunk_received(line(1.0), 10.7, 10.78)
    sched.reset()  # (a hold: the next start ramps in afresh)
    assert sched.peek(11.0) is None
    sched.request_sent(11.0)
    sched.chunk_received(line(1.0), 11.0, 11.08)
    assert sched.peek(11.08).ramp == RampIn(11.08, R)


def test_without_a_ramp_nothing_changes():
    sched = ChunkScheduler(SchedulerConfig(dt=DT, horizon=H, execute_horizon=10))
    sched.request_sent(10.0)
    sched.chunk_received(line(0.0), 10.0, 10.08)
    publication = sched.peek(10.08)
    assert publication.ramp is None and publication.first_index == 0
    np.testing.assert_allclose(np.diff(publication.time_from_start), DT, atol=1e-12)


# ------------------------------------------------------------------ the core on a clock


def joint1_line(step: float, slow_from: int = H):
    """Chunks from the observed state moving joint1 by ``step`` per action (the other
    joints still: a line that stays inside every joint's range for seconds); from row
    ``slow_from`` on slowing down evenly to rest at the last row."""
    speeds = np.full(H, step)
    speeds[slow_from:] = step * np.linspace(1.0, 0.0, H - slow_from)
    motion = np.zeros((H, 32), np.float32)  # pi05's state and actions: 32 wide
    motion[1:, 0] = np.cumsum(speeds[:-1])

    def infer(obs):
        return np.asarray(obs["state"], np.float32).reshape(1, -1) + motion

    return infer


def ramp_rig(**overrides) -> CoreRig:
    rig = CoreRig(
        policy=joint1_line(STEP), overrides={"ramp_in_s": R, "smoothing": "none", **overrides}
    )
    rig.connect()
    return rig


def mean_ramp_speed(a: np.ndarray, b: np.ndarray, start: float) -> np.ndarray:
    """The ramp's speed ``clip((t - start) / R, 0, 1)`` averaged over each ``[a, b]``."""

    def integral(t: np.ndarray) -> np.ndarray:
        d = np.clip(t - start, 0.0, None)
        return np.where(d < R, d * d / (2 * R), d - R / 2)

    return (integral(b) - integral(a)) / (b - a)


def assert_secants_follow_the_ramp(msg, start: float, skip: int = 0) -> None:
    """Every secant of ``msg`` (after the first ``skip`` points) is the chunk's speed
    times the ramp's mean speed over it (its speed at the midpoint, while it lasts)."""
    times = msg.points.stamp + np.asarray(msg.points.time_from_start)[skip:]
    secants = np.diff(np.asarray(msg.points.positions)[skip:, 0]) / np.diff(times)
    want = SPEED * mean_ramp_speed(times[:-1], times[1:], start)
    np.testing.assert_allclose(secants, want, rtol=2e-5)  # float32 positions on the wire


def start_of_motion(rig: CoreRig, since: float):
    """The first arm chunk published after ``since``, and its stamp."""
    rig.run_until(lambda: any(t > since for t, m in rig.published if m.frame_id))
    msg = next(m for t, m in rig.published if t > since and m.output == "arm" and m.frame_id)
    return msg, msg.points.stamp


def window_peaks(rig: CoreRig, start: float) -> dict[str, float]:
    peaks = {}
    for fraction in (0.25, 0.5, 1.0):
        speed, accel = rig.checker.peaks("arm", start, start + fraction * R)
        peaks[f"speed {fraction:g}R"] = speed["joint1"]
        peaks[f"accel {fraction:g}R"] = accel["joint1"]
    return peaks


def test_after_a_start_and_after_a_hold_the_speed_ramps_up_exactly():
    rig = ramp_rig()
    first, t0 = start_of_motion(rig, -1.0)
    assert_secants_follow_the_ramp(first, t0)
    rig.run(1.5)
    assert window_peaks(rig, t0)["speed 1R"] == pytest.approx(SPEED, rel=0.01)
    # A hold (the operator's switch), then commanding again: the next start ramps.
    rig.core.set_enabled(False, rig.now)
    rig.run(0.5)
    rig.core.set_enabled(True, rig.now)
    again = rig.now
    second, t1 = start_of_motion(rig, again)
    assert_secants_follow_the_ramp(second, t1)
    rig.run(1.5)
    for start in (t0, t1):
        peaks = window_peaks(rig, start)
        # The commanded speed is SPEED * t/R. The first point comes sqrt(2 R lead) after
        # the stamp (141 ms for a 20 ms lead), the arm at rest at the stamp.
        assert 0.0 < peaks["speed 0.25R"] <= 0.25 * SPEED, peaks
        assert 0.48 * SPEED <= peaks["speed 0.5R"] <= 0.52 * SPEED, peaks
        assert 0.98 * SPEED <= peaks["speed 1R"] <= 1.01 * SPEED, peaks
        # The ramp's acceleration is v/R; the cubic into the first point, whose
        # velocity is a forward difference, reaches at most 2 (1 + sqrt 2) v/R.
        assert peaks["accel 1R"] <= 2 * (1 + math.sqrt(2)) * SPEED / R + 1e-6, peaks


def test_without_the_ramp_the_same_world_starts_at_full_speed_at_once():
    rig = ramp_rig(ramp_in_s=0.0)
    _, t0 = start_of_motion(rig, -1.0)
    rig.run(1.5)
    peaks = window_peaks(rig, t0)
    # Full speed within the first 0.125 s, through a cubic from rest over one or two
    # action periods: 4 v / T at its end.
    assert peaks["speed 0.25R"] >= 0.99 * SPEED, peaks
    assert peaks["accel 0.25R"] >= 4 * SPEED / (2 * DT) - 1e-6, peaks


def test_a_live_change_applies_from_the_next_start():
    rig = ramp_rig()
    start_of_motion(rig, -1.0)
    rig.run(1.0)
    rig.core.apply_config(dataclasses.replace(rig.config, ramp_in_s=0.0), rig.now)
    rig.core.set_enabled(False, rig.now)
    rig.run(0.5)
    rig.core.set_enabled(True, rig.now)
    again, _ = start_of_motion(rig, rig.now)
    np.testing.assert_allclose(np.diff(again.points.time_from_start), DT, atol=1e-9)
    rig.core.apply_config(dataclasses.replace(rig.config, ramp_in_s=R), rig.now)
    rig.core.set_enabled(False, rig.now)
    rig.run(0.5)
    rig.core.set_enabled(True, rig.now)
    ramped, t2 = start_of_motion(rig, rig.now)
    assert_secants_follow_the_ramp(ramped, t2)


def test_a_chunk_observed_during_the_ramp_joins_where_the_robot_is():
    rig = ramp_rig(execute_horizon=5, smoothing="splice")  # a switch every 0.1 s
    rig.run_until(lambda: len(rig.chunks()) >= 4)
    chunks = rig.chunks()
    t0 = chunks[0].points.stamp
    # The chunks observed during the ramp.
    during = [m for m in chunks[1:] if parse_t_obs(m.frame_id) < t0 + R]
    assert len(during) >= 2
    for old, new in zip(chunks, during):
        # The new chunk's points are the old one's line, at the times the ramp puts it.
        times = new.points.stamp + np.asarray(new.points.time_from_start)
        old_times = old.points.stamp + np.asarray(old.points.time_from_start)
        old_line = np.interp(times[:5], old_times, np.asarray(old.points.positions)[:, 0])
        np.testing.assert_allclose(np.asarray(new.points.positions)[:5, 0], old_line, atol=3e-4)
        # (The splice's fade absorbs the arm's linear following in its first points.)
        assert_secants_follow_the_ramp(new, t0, skip=4)


def test_the_prefix_continues_the_stretched_motion_where_the_new_rows_run():
    # action_prefix during the ramp: row i of a chunk observed at t_obs runs where its
    # chunk time (the chunk time run by t_obs, plus i periods) falls on the ramp; the
    # prefix gives what the controllers follow then (the published trajectory, cubic
    # through the published velocities), not what they follow at t_obs + i*dt.
    rig = CoreRig(
        metadata=build_metadata("pi05", action_prefix=True),
        policy=joint1_line(STEP),
        overrides={"ramp_in_s": R, "smoothing": "prefix", "execute_horizon": 5},
    )
    rig.connect()
    rig.run_until(lambda: rig.now > 2.0 and len(rig.chunks()) >= 6)
    chunks = rig.chunks()
    t0 = chunks[0].points.stamp
    checked = on_the_ramp = 0
    apart = 0.0  # how far t_obs + i*dt would be off
    for obs, t_obs in zip(rig.observations, rig.sent):
        if not t0 < t_obs < t0 + R:
            continue
        msg = [m for m in chunks if m.points.stamp <= t_obs][-1]
        times = msg.points.stamp + np.asarray(msg.points.time_from_start)
        positions = np.asarray(msg.points.positions)
        velocities = np.asarray(msg.points.velocities)
        prefix = obs["action_prefix"]
        for i in range(prefix.shape[0]):
            t = real_time(nominal_clock(t_obs, t0) + i * DT, t0)
            if not times[0] <= t <= times[-1]:
                continue  # (before the first point: still moving there from the stamp)
            expected = hermite_state(times, positions, velocities, t)[0]
            np.testing.assert_allclose(prefix[i, :6], expected, atol=1e-5)
            checked += 1
            if t < t0 + R:
                on_the_ramp += 1
                naive = hermite_state(times, positions, velocities, t_obs + i * DT)[0]
                apart = max(apart, abs(naive[0] - expected[0]))
    assert checked >= 10 and on_the_ramp >= 3, (checked, on_the_ramp)
    assert apart > 1e-3, apart


@pytest.mark.parametrize("late_s", [0.001, 0.15], ids=["prompt", "hold 150 ms late"])
def test_a_hold_during_the_ramp_stops_from_the_stretched_motion(late_s):
    # joint1 heading off at 1.5 rad/s; the operator disables the node 0.3 s into the
    # ramp: the stop starts from the commanded (ramped) state, within the limits as the
    # simulated controllers run it, even when it reaches them late; the next start ramps.
    rig = ControllerRig(
        policy=joint1_line(0.03, slow_from=30),
        overrides={"ramp_in_s": R, "smoothing": "splice"},
        hold_delivery_s=late_s,
    )
    rig.connect()
    _, t0 = start_of_motion(rig, -1.0)
    rig.run_until(lambda: rig.now >= t0 + 0.3)
    position = rig.core.commanded_at(rig.now)[0]
    speed = 0.03 / DT * (rig.now - t0) / R  # the ramp's speed now: about 0.9 rad/s
    rig.core.set_enabled(False, rig.now)
    stop = rig.holds()[-1].points
    duration = float(stop.time_from_start[0])
    # p + v T / 2 from the ramped state (not from the chunk's 1.5 rad/s).
    assert abs(stop.positions[0][0] - (position + speed * duration / 2)) < 0.01
    rig.run(1.0)
    rig.core.set_enabled(True, rig.now)
    again, t1 = start_of_motion(rig, rig.now)
    rig.run(1.0)
    assert rig.executed.problems() == []
    assert again.points.time_from_start[0] > 0.1  # stretched: sqrt(2 R lead)


def test_sync_mode_continues_the_ramp_over_its_chunks():
    rig = ramp_rig(request_mode="sync", execute_horizon=5)
    rig.run_until(lambda: len(rig.chunks()) >= 3)
    chunks = rig.chunks()
    t0 = chunks[0].points.stamp
    assert chunks[1].points.stamp < t0 + R
    for msg in chunks[:3]:
        assert_secants_follow_the_ramp(msg, t0)


@pytest.mark.parametrize("smoothing", ["crossfade", "lerobot_average", "act_ensemble"])
def test_the_averages_compare_chunks_on_the_chunk_timeline(smoothing):
    # Two chunks of one line agree: an average of them is the line, on the ramp too.
    rig = ramp_rig(execute_horizon=5, smoothing=smoothing)
    rig.run_until(lambda: len(rig.chunks()) >= 4)
    chunks = rig.chunks()
    for old, new in zip(chunks[:3], chunks[1:4]):
        times = new.points.stamp + np.asarray(new.points.time_from_start)
        old_times = old.points.stamp + np.asarray(old.points.time_from_start)
        old_line = np.interp(times[:8], old_times, np.asarray(old.points.positions)[:, 0])
        np.testing.assert_allclose(np.asarray(new.points.positions)[:8, 0], old_line, atol=3e-4)


def test_an_acceleration_limit_the_ramp_meets_keeps_it_and_a_short_one_is_replaced_once():
    # joint1 at 1 rad/s with a 10 rad/s^2 acceleration limit (chunks that slow down to
    # rest at their end within it). The gate's own ramp for a still arm
    # (retiming.ramp_head, on the action grid) starts it without a ramp-in; with the
    # 0.5 s ramp-in the stretched start meets the limit and is kept; a 0.1 s ramp-in
    # (10 rad/s^2 on its own, more on the cubic into the first point) is too short: the
    # gate's ramp replaces it, on the unstretched chunk, and nothing is ramped twice.
    limits = {
        joint: dataclasses.replace(limit, max_acceleration=10.0)
        for joint, limit in CoreRig().config.joint_limits.items()
    }
    firsts = {}
    for ramp in (R, 0.0, 0.1):
        rig = CoreRig(
            policy=joint1_line(0.02, slow_from=30),
            overrides={"ramp_in_s": ramp, "joint_limits": limits, "smoothing": "splice"},
        )
        rig.connect()
        rig.run(2.0)
        chunks = rig.chunks()
        assert len(chunks) >= 5 and rig.core.counts["refusals"] == 0, rig.core.last_refusal
        speed, accel = rig.checker.peaks("arm", 0.0, rig.now)
        assert accel["joint1"] <= 10.0 + 1e-6 and speed["joint1"] >= 0.99, (speed, accel)
        firsts[ramp] = np.asarray(chunks[0].points.time_from_start)
        if ramp != R:
            # On the action grid, every chunk: no ramp-in stretches them (the one that
            # was too short is gone, and the next chunks are placed without it).
            for msg in chunks:
                np.testing.assert_allclose(np.diff(msg.points.time_from_start), DT, atol=1e-9)
    # The ramp-in's stretch: the first point sqrt(2 R lead) after the stamp, the spacing
    # shrinking to the action period.
    lead = firsts[0.0][0]
    assert firsts[R][0] == pytest.approx(math.sqrt(2 * R * lead), abs=1e-6)
    assert (np.diff(firsts[R][:10]) > DT).all()
    np.testing.assert_allclose(firsts[R][-5:], firsts[R][-5] + DT * np.arange(5), atol=1e-9)


def test_a_ramped_publication_unramped_is_the_one_without_a_ramp():
    # The same chunk, the same moments: the ramp-in's publication without its warp is
    # exactly the publication of a scheduler without a ramp (what the gate re-times when
    # the ramp is too short for an acceleration limit).
    pubs = {}
    for ramp in (R, 0.0):
        sched = ChunkScheduler(
            SchedulerConfig(
                dt=DT, horizon=H, execute_horizon=10, request_lead_s=0.1, ramp_in_s=ramp
            )
        )
        sched.request_sent(10.0)
        sched.chunk_received(line(0.0), 10.0, 10.08)
        pubs[ramp] = sched.peek(10.08)
    ramped, plain = pubs[R], pubs[0.0]
    unramped = ramped.unramped()
    assert unramped.ramp is None and plain.ramp is None and plain.unramped() is plain
    np.testing.assert_allclose(unramped.time_from_start, plain.time_from_start, atol=1e-12)
    assert unramped.switch_time == pytest.approx(plain.switch_time, abs=1e-12)
    assert unramped.shift_s == pytest.approx(plain.shift_s, abs=1e-12)
    np.testing.assert_array_equal(unramped.positions, plain.positions)
    # Each stretched point lies on its chunk's timeline where its row runs.
    rows = ramped.origin + (ramped.first_index + np.arange(H)) * DT
    np.testing.assert_allclose(ramped.timeline_times, rows, atol=1e-12)
    assert (ramped.times[:12] > rows[:12] - R / 2).all()  # (the real times: later)
    np.testing.assert_allclose(
        RampIn(10.08, R).timeline(np.array([10.0, 10.58, 11.0])),
        [
            10.25,
            10.58,
            11.0,
        ],
    )


def test_the_next_switch_joins_the_stretched_points_as_published():
    # A constant chunk at 0 published as 0.1 (as a clamp would change it): the next
    # chunk, observed during the ramp and cross-faded from the previous one, fades from
    # 0.1, the published points at the rows where they run on the chunk timeline.
    sched = ChunkScheduler(
        SchedulerConfig(
            dt=DT,
            horizon=H,
            execute_horizon=10,
            request_lead_s=0.1,
            ramp_in_s=R,
            smoothing=CrossFade(steps=5),
        )
    )
    sched.request_sent(10.0)
    sched.chunk_received(np.zeros((H, 2)), 10.0, 10.08)
    first = sched.peek(10.08)
    published = first.positions + 0.1
    published.setflags(write=False)
    sched.commit(dataclasses.replace(first, positions=published))
    t_obs = sched.next_request_time()
    sched.request_sent(t_obs)
    sched.chunk_received(np.zeros((H, 2)), t_obs, t_obs + 0.05)
    second = sched.peek(sched.publication_due)
    assert second.stamp < first.ramp.end and second.ramp is first.ramp
    want = 0.1 * (1.0 - smooth_weights(5))
    np.testing.assert_allclose(second.positions[:5, 0], want, atol=1e-12)
    np.testing.assert_array_equal(second.positions[5:], 0.0)


def test_the_gates_ramp_is_no_shorter_than_the_ramp_in_it_replaces():
    t = DT * np.arange(0, 40)
    rows = np.stack([0.3 + 1.2 * t, -0.4 + 0.6 * t], axis=1)
    limits = MotionLimits.from_joint_limits(ACCEL_LIMITS, ("j1", "j2"), dt=DT)
    pub = brake_tail(gate_publication(rows), limits)  # as the gate has it (it ends moving)
    assert pub is not None
    own = ramp_head(pub, rows[0], limits)
    assert own is not None
    n = round((own.shift_s - pub.shift_s) / DT)  # its ramp takes 2 n periods
    longer = ramp_head(pub, rows[0], limits, min_duration_s=2 * (n + 3) * DT)
    assert longer is not None
    assert longer.shift_s - pub.shift_s == pytest.approx((n + 3) * DT, abs=1e-12)
    assert check_motion(rows[0], longer.positions, longer.time_from_start, limits).ok


# ------------------------------------------------------------------ the instrument


def test_the_checkers_window_peaks_on_a_cubic_with_a_known_answer():
    checker = VelocityChecker({"j": 10.0}, lambda: ({"j": 0.0}, 0.0), judged=False)
    # From rest at 0 to (vT, v) in T: speed 4v/3 at 2T/3, v at T/3; acceleration 4v/T
    # at the start, -2v/T at the end; then a second trajectory replaces it at 2T.
    v, T = 1.0, 0.3
    checker.add("arm", ["j"], 1.0, np.array([T]), np.array([[v * T]]), np.array([[v]]))
    speed, accel = checker.peaks("arm", 1.0, 1.0 + T)
    assert speed["j"] == pytest.approx(4 * v / 3) and accel["j"] == pytest.approx(4 * v / T)
    speed, accel = checker.peaks("arm", 1.0, 1.0 + T / 3)
    assert speed["j"] == pytest.approx(v) and accel["j"] == pytest.approx(4 * v / T)
    speed, accel = checker.peaks("arm", 1.0 + 2 * T / 3, 1.0 + T)
    assert speed["j"] == pytest.approx(4 * v / 3) and accel["j"] == pytest.approx(2 * v / T)
    assert checker.peaks("arm", 1.0 + T + 1e-9, 1.5) == ({"j": 0.0}, {"j": 0.0})  # at rest
    # A second trajectory, a line at 0.2/s from where the first ended: from its stamp
    # on only it counts.
    checker.add(
        "arm", ["j"], 2.0, np.array([0.1, 0.2]), np.array([[0.32], [0.34]]), np.array([[0.2], [0]])
    )
    speed, _ = checker.peaks("arm", 2.0, 2.05)
    assert speed["j"] < 0.4
    assert checker.peaks("other", 0.0, 5.0) == ({}, {})


# ------------------------------------------------------------------ policy_node on rclpy


class LinePolicy:
    """The server's policy: from the observed state, joint1 at SPEED (the rest still)."""

    def infer(self, obs: dict) -> dict:
        state = np.asarray(obs["state"], dtype=np.float32).reshape(-1)
        actions = np.tile(state, (H, 1))
        actions[:, 0] += np.arange(H, dtype=np.float32) * STEP
        return {"actions": actions}

    def reset(self) -> None:
        pass


def _measure_starts(ros_context, tmp_path, ramp_in_s: float) -> list[dict[str, float]]:
    """policy_node with ``ramp_in_s`` on the same world: the velocity checker's peaks
    after activation (autostart) and after a hold (~/enable false, then true)."""
    from helpers import wait_until
    from node_rig import Rig
    from std_srvs.srv import SetBool

    from relay_ros.server import ServerOptions, run_server_in_thread

    def first_chunk_after(rig: Rig, since: float):
        def found():
            got = rig.snapshot()
            return next((m for m in got.arm if len(m.points) > 1 and got.start_of(m) > since), None)

        return wait_until(found, timeout=20)

    starts = []
    with (
        run_server_in_thread(ServerOptions(models=("pi05",), policy=LinePolicy)) as server,
        Rig(
            ros_context,
            server.url_template,
            tmp_path=tmp_path,
            overrides={"ramp_in_s": ramp_in_s, "execute_horizon": 10},
        ) as rig,
    ):
        clock = rig.feeder.get_clock()

        def now() -> float:
            return clock.now().nanoseconds * 1e-9

        for attempt in range(2):
            if attempt:  # a hold, then commanding again
                rig._call(SetBool, "enable", SetBool.Request(data=False))
                wait_until(lambda: len(rig.snapshot().arm[-1].points) == 1, timeout=10)
                since = now()
                rig._call(SetBool, "enable", SetBool.Request(data=True))
            else:
                since = 0.0
            msg = first_chunk_after(rig, since)
            start = rig.received.start_of(msg)
            wait_until(lambda start=start: now() > start + R + 0.2, timeout=10)
            peaks = {}
            for fraction in (0.25, 0.5, 1.0):
                speed, accel = rig.checker.peaks(rig.arm_topic, start, start + fraction * R)
                peaks[f"speed {fraction:g}R"] = speed["joint1"]
                peaks[f"accel {fraction:g}R"] = accel["joint1"]
            starts.append(peaks)
    return starts


@pytest.mark.ros
@pytest.mark.slow
def test_policy_node_ramps_in_after_activation_and_after_a_hold(ros_context, tmp_path):
    ramped = _measure_starts(ros_context, tmp_path, R)
    abrupt = _measure_starts(ros_context, tmp_path, 0.0)
    for name, starts in (("ramp_in_s 0.5", ramped), ("ramp_in_s 0", abrupt)):
        for when, peaks in zip(("activation", "after a hold"), starts):
            print(f"{name}, {when}: " + ", ".join(f"{k} {v:.3f}" for k, v in peaks.items()))
    for on, off in zip(ramped, abrupt):
        # Ramp on: at most a quarter of the speed a quarter in, half at half, nearly
        # full at its end (where the splice joins the next chunks, which start where
        # the rig's arm was measured, a little behind the command; the first R/2 is
        # the first chunk alone).
        assert on["speed 0.25R"] <= 0.25 * SPEED, on
        assert on["speed 0.5R"] <= 0.55 * SPEED, on
        assert on["speed 1R"] >= 0.8 * SPEED, on
        assert on["accel 0.5R"] <= 2 * (1 + math.sqrt(2)) * SPEED / R + 1e-6, on
        # Ramp off, the same world: full speed at once, through a cubic from rest.
        assert off["speed 0.25R"] >= 0.99 * SPEED, off
        assert off["accel 0.25R"] >= 10 * on["accel 0.5R"], (on, off)
