"""Timelines of the chunk scheduler on a synthetic clock (no ROS, no sleeping)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from relay_ros.pipeline.adaptive_timing import AdaptiveTiming
from relay_ros.pipeline.gate.motion import MotionLimits
from relay_ros.pipeline.interpolation import ControllerTrajectory
from relay_ros.pipeline.joint_limits import JointLimit
from relay_ros.pipeline.publication import Publication
from relay_ros.pipeline.scheduler import ChunkError, ChunkScheduler, SchedulerStateError
from relay_ros.pipeline.scheduler_config import SchedulerConfig, SchedulerConfigError
from relay_ros.pipeline.smoothing import CrossFade, NoSmoothing, Splice

DT = 0.02
H = 50
E = 10


def ramp_chunk(t_obs: float, horizon: int = H, dims: int = 3, dt: float = DT) -> np.ndarray:
    """Action i = its target time (t_obs + i*dt) in every dimension, offset per dimension."""
    times = t_obs + np.arange(horizon) * dt
    return times[:, None] + np.arange(dims)[None, :]


def make(**overrides: object) -> ChunkScheduler:
    options: dict[str, object] = {"dt": DT, "horizon": H, "execute_horizon": E}
    options.update(overrides)
    return ChunkScheduler(SchedulerConfig(**options))  # type: ignore[arg-type]


def receive(sched: ChunkScheduler, chunk: np.ndarray, t_obs: float, now: float) -> bool:
    """A reply arrives: record its latency (the caller's job), then hand it over."""
    sched.latencies.add(now - t_obs)
    return sched.chunk_received(chunk, t_obs, now)


def first_publication(sched: ChunkScheduler, t_obs: float, latency: float) -> Publication:
    assert sched.wants_request(t_obs)
    sched.request_sent(t_obs)
    chunk = ramp_chunk(t_obs, sched.config.horizon)
    assert receive(sched, chunk, t_obs, t_obs + latency)
    pub = sched.poll(t_obs + latency)
    assert pub is not None
    return pub


# ----------------------------------------------------------------- config


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"dt": 0.0}, "dt 0.0 must be a finite number > 0.0"),
        ({"dt": math.nan}, "dt nan must be a finite number > 0.0"),
        ({"horizon": 0}, "horizon 0 must be >= 1"),
        ({"horizon": 2.5}, "horizon 2.5 must be an integer"),
        ({"execute_horizon": 51}, "execute_horizon 51 must be >= 1 and <= 50"),
        ({"execute_horizon": 0}, "execute_horizon 0 must be >= 1 and <= 50"),
        ({"execute_horizon": True}, "execute_horizon True must be an integer"),
        ({"request_lead_s": -0.1}, "request_lead_s -0.1 must be a finite number >= 0.0"),
        ({"smoothing": "splice"}, "smoothing 'splice' is not a Smoothing"),
        ({"adaptive_execute_horizon": 1}, "adaptive_execute_horizon 1 must be a bool"),
        ({"min_lead_s": 0.0}, "min_lead_s 0.0 must be a finite number > 0.0"),
        ({"mode": "fast"}, "mode 'fast' is not one of ['early', 'sync']"),
        ({"retry_delay_s": -1}, "retry_delay_s -1 must be a finite number >= 0.0"),
        ({"timing": None}, "timing None is not an AdaptiveTiming"),
        ({"latency_window": 0}, "latency_window 0 must be >= 1"),
    ],
)
def test_config_rejects_bad_values(overrides: dict[str, object], message: str) -> None:
    options: dict[str, object] = {"dt": DT, "horizon": H, "execute_horizon": E}
    options.update(overrides)
    with pytest.raises(SchedulerConfigError) as info:
        SchedulerConfig(**options)  # type: ignore[arg-type]
    assert str(info.value) == message


def test_config_defaults() -> None:
    cfg = SchedulerConfig(dt=DT, horizon=H, execute_horizon=E)
    assert cfg.min_lead_s == DT
    assert cfg.request_lead_s is None
    assert cfg.mode == "early"
    assert isinstance(cfg.smoothing, NoSmoothing)
    assert cfg.timing == AdaptiveTiming() and not cfg.adaptive_execute_horizon
    assert SchedulerConfig(dt=DT, horizon=H, execute_horizon=E, min_lead_s=0.05).min_lead_s == 0.05


# --------------------------------------------------------------- timeline


def test_first_chunk_joins_the_still_arm_instead_of_dropping_actions() -> None:
    sched = make()
    assert sched.next_request_time() == -math.inf
    assert sched.wants_request(10.0)
    sched.request_sent(10.0)
    assert not sched.wants_request(10.01)
    assert sched.next_request_time() is None
    chunk = ramp_chunk(10.0)
    assert receive(sched, chunk, 10.0, 10.08)  # L = 0.08 s
    pub = sched.poll(10.08)
    assert pub is not None
    # The first slot: 10.0 + i*0.02 >= 10.08 + min_lead 0.02 -> i = 5, at 10.10. The
    # arm stood still since t_obs (nothing was published): actions 0..4 never ran, so
    # they are not dropped; the chunk runs from action 0, 5 slots (0.1 s) later.
    assert pub.first_index == 0
    assert pub.shift_s == pytest.approx(5 * DT)
    assert pub.origin == pytest.approx(10.1)
    assert pub.stamp == 10.08
    assert pub.time_from_start[0] == pytest.approx(0.02, abs=1e-9)
    assert pub.time_from_start.shape == (H,)
    np.testing.assert_allclose(np.diff(pub.time_from_start), DT, atol=1e-12)
    np.testing.assert_array_equal(pub.positions, chunk)
    # Executed part: actions 0..9, in the slots 5..14 would have had; the switch is
    # at the last of them, where it would be without the shift.
    assert pub.switch_time == pytest.approx(10.0 + 14 * DT)
    assert pub.chunk_seq == 1
    assert sched.latencies.values() == [pytest.approx(0.08)]
    assert sched.poll(10.09) is None


def test_without_join_still_arm_every_chunk_keeps_its_timeline() -> None:
    # A dry run: the publications move nothing, so the old rule applies throughout.
    sched = make(join_still_arm=False)
    sched.request_sent(10.0)
    receive(sched, ramp_chunk(10.0), 10.0, 10.08)
    pub = sched.poll(10.08)
    assert pub is not None and pub.first_index == 5 and pub.shift_s == 0.0
    with pytest.raises(SchedulerConfigError, match="join_still_arm 1 must be a bool"):
        SchedulerConfig(dt=DT, horizon=H, execute_horizon=E, join_still_arm=1)  # type: ignore[arg-type]


def test_a_still_arm_joins_the_committed_rows_of_a_prefix() -> None:
    # The server was asked to start with 3 rows of the held state (committed_steps=3):
    # a reply later than that starts at row 3; an earlier one in its own slot.
    late = make()
    late.request_sent(10.0, committed_steps=3)
    receive(late, ramp_chunk(10.0), 10.0, 10.08)
    pub = late.poll(10.08)
    assert pub is not None and pub.first_index == 3
    assert pub.shift_s == pytest.approx(2 * DT) and pub.first_time == pytest.approx(10.10)
    on_time = make()
    on_time.request_sent(10.0, committed_steps=8)
    receive(on_time, ramp_chunk(10.0), 10.0, 10.08)
    pub = on_time.poll(10.08)
    assert pub is not None and pub.first_index == 5 and pub.shift_s == 0.0


def test_a_reply_after_the_trajectory_ended_joins_where_the_arm_stopped() -> None:
    # The old trajectory ran until 0.20 s; its successor, observed at 0.05, arrives at
    # 0.30: its rows for 0.05..0.19 ran on the old one (the arm moved), the rest not.
    sched = make(horizon=10, execute_horizon=5, request_lead_s=0.05)
    pub1 = first_publication(sched, 0.0, 0.0)
    assert pub1.end_time == pytest.approx(0.20)
    sched.request_sent(0.05)
    receive(sched, ramp_chunk(0.05, horizon=10), 0.05, 0.30)
    pub2 = sched.poll(0.30)
    assert pub2 is not None
    assert pub2.first_index == 8  # 0.05 + 8*0.02 = 0.21, the first row after 0.20
    assert pub2.first_time == pytest.approx(0.33) and pub2.shift_s == pytest.approx(0.12)


def test_early_request_at_switch_minus_lead_and_switch_after_e_actions() -> None:
    sched = make(request_lead_s=0.1)
    pub1 = first_publication(sched, 10.0, 0.08)
    assert pub1.switch_time == pytest.approx(10.28)
    assert sched.request_lead() == 0.1
    assert sched.next_request_time() == pytest.approx(10.18)
    assert not sched.wants_request(10.17)
    assert sched.wants_request(10.18)
    sched.request_sent(10.18)
    chunk2 = ramp_chunk(10.18)
    assert receive(sched, chunk2, 10.18, 10.24)  # arrives before the switch: held
    assert sched.has_pending
    assert sched.next_request_time() is None
    assert sched.poll(10.24) is None
    assert sched.poll(10.27) is None
    pub2 = sched.poll(10.28)
    assert pub2 is not None
    # The old chunk ran exactly E actions (5..14); 10.18 + i*0.02 >= 10.30 -> i = 6.
    assert pub2.stamp == 10.28
    assert pub2.first_index == 6
    assert pub2.first_time == pytest.approx(10.30)  # the slot of old action 15
    np.testing.assert_array_equal(pub2.positions, chunk2[6:])
    assert pub2.switch_time == pytest.approx(10.18 + 15 * DT)
    assert sched.next_request_time() == pytest.approx(10.18 + 15 * DT - 0.1)
    assert sched.stall_time(10.28) == 0.0


def test_publish_early_keeps_the_slot_after_the_executed_part() -> None:
    # Without it, a poll that lands 5 ms after the switch skips the action at switch + dt.
    late = make(request_lead_s=0.1)
    first_publication(late, 10.0, 0.08)
    late.request_sent(10.18)
    late.chunk_received(ramp_chunk(10.18), 10.18, 10.24)
    skipped = late.poll(10.285)
    assert skipped is not None and skipped.first_time == pytest.approx(10.32)

    early = make(request_lead_s=0.1, publish_early_s=0.01)
    first_publication(early, 10.0, 0.08)
    early.request_sent(10.18)
    early.chunk_received(ramp_chunk(10.18), 10.18, 10.24)
    assert early.poll(10.265) is None
    pub = early.poll(10.275)
    assert pub is not None
    assert pub.first_time == pytest.approx(10.30)  # the slot of old action 15, as on time
    assert pub.time_from_start[0] >= DT


def test_publish_early_must_be_below_min_lead() -> None:
    with pytest.raises(
        SchedulerConfigError, match="publish_early_s 0.02 must be < min_lead_s 0.02"
    ):
        SchedulerConfig(dt=DT, horizon=H, execute_horizon=E, publish_early_s=0.02)


def test_late_chunk_is_published_at_once() -> None:
    sched = make(request_lead_s=0.1)
    first_publication(sched, 10.0, 0.08)
    sched.request_sent(10.18)
    assert receive(sched, ramp_chunk(10.18), 10.18, 10.35)  # switch was 10.28
    pub = sched.poll(10.35)
    assert pub is not None
    assert pub.stamp == 10.35
    # 10.18 + i*0.02 >= 10.37 -> i = 10 (9.5 rounded up); first point 0.03 s ahead.
    assert pub.first_index == 10
    assert pub.time_from_start[0] == pytest.approx(0.03, abs=1e-9)
    assert pub.switch_time == pytest.approx(10.18 + 19 * DT)


def test_too_late_chunk_is_dropped_counted_and_requested_again() -> None:
    sched = make(horizon=10, execute_horizon=5)
    pub1 = first_publication(sched, 0.0, 0.0)
    assert pub1.end_time == pytest.approx(0.20)
    sched.request_sent(0.0)
    # Its actions are for 0.00..0.18, all while the old trajectory still moved the
    # arm; at 0.25 none is left after it.
    assert not receive(sched, ramp_chunk(0.0, horizon=10), 0.0, 0.25)
    assert sched.chunks_dropped_late == 1
    assert sched.poll(0.25) is None
    assert sched.wants_request(0.25)
    assert sched.latencies.count == 2


def test_held_chunk_polled_too_late_joins_where_the_arm_stopped() -> None:
    sched = make(horizon=10, execute_horizon=5, request_lead_s=0.05)
    pub1 = first_publication(sched, 0.0, 0.0)
    assert pub1.switch_time == pytest.approx(0.10)  # actions 0..4 in slots 1..5
    sched.request_sent(0.05)
    assert receive(sched, ramp_chunk(0.05, horizon=10), 0.05, 0.07)
    pub = sched.poll(5.0)  # the node stalled for seconds; the arm stopped at 0.20
    assert pub is not None and pub.first_index == 8 and pub.stamp == 5.0
    assert DT <= pub.time_from_start[0] < 2 * DT
    assert sched.chunks_dropped_late == 0


@pytest.mark.parametrize(("percentile", "margin"), [(50.0, 0.0), (95.0, 0.05)])
def test_auto_lead_is_the_rule_over_measured_latency(percentile: float, margin: float) -> None:
    sched = make(timing=AdaptiveTiming(lead_percentile=percentile, lead_margin_s=margin))
    t = 0.0
    latencies = [0.05, 0.09, 0.07, 0.12, 0.06]
    for latency in latencies:
        due = sched.next_request_time()
        assert due is not None
        t = max(t, due)
        sched.request_sent(t)
        receive(sched, ramp_chunk(t), t, t + latency)
        t = t + latency
        pub = sched.poll(max(t, sched.current.switch_time if sched.current else t))
        assert pub is not None
        t = pub.stamp
    expected = float(np.percentile(latencies, percentile)) + margin
    assert sched.request_lead() == pytest.approx(expected)
    assert sched.current is not None
    assert sched.next_request_time() == pytest.approx(sched.current.switch_time - expected)


def test_lead_is_capped_so_a_held_reply_keeps_an_action() -> None:
    sched = make(horizon=5, execute_horizon=3, request_lead_s=1.0)
    assert sched.request_lead() == pytest.approx(4 * DT - DT)
    assert make(mode="sync", request_lead_s=0.3).request_lead() == 0.0


def test_sync_mode_publishes_only_executed_part_and_requests_when_used_up() -> None:
    sched = make(mode="sync", request_lead_s=0.3)
    pub = first_publication(sched, 10.0, 0.08)
    assert pub.first_index == 0  # nothing ran before: from action 0 (openpi's broker)
    assert pub.positions.shape == (E, 3)
    assert pub.switch_time == pytest.approx(pub.end_time)
    assert sched.next_request_time() == pytest.approx(10.28)
    assert not sched.wants_request(10.27)
    assert sched.wants_request(10.28)
    sched.request_sent(10.28)
    assert receive(sched, ramp_chunk(10.28), 10.28, 10.36)
    pub2 = sched.poll(10.36)
    # The arm stood still at the end of the executed part since t_obs: from action 0.
    assert pub2 is not None and pub2.first_index == 0
    assert pub2.shift_s == pytest.approx(0.1)
    assert sched.stall_time(10.36) == pytest.approx(0.08)  # held still while waiting


def test_sync_mode_truncates_at_chunk_end() -> None:
    sched = make(mode="sync", horizon=10, execute_horizon=8)
    sched.request_sent(0.0, committed_steps=4)  # rows 0..3 repeat the held state
    receive(sched, ramp_chunk(0.0, horizon=10), 0.0, 0.05)
    pub = sched.poll(0.05)
    assert pub is not None
    assert pub.first_index == 4  # 0.08 >= 0.07, and no earlier than the committed rows
    assert pub.positions.shape[0] == 6
    assert pub.switch_time == pytest.approx(0.18)


# --------------------------------------------------------------- blending


def test_blending_cross_fades_from_old_to_new() -> None:
    sched = make(request_lead_s=0.1, smoothing=CrossFade(3))
    sched.request_sent(0.0)
    receive(sched, np.zeros((H, 2)), 0.0, 0.0)
    pub1 = sched.poll(0.0)
    assert pub1 is not None and pub1.blended == 0
    sched.request_sent(0.1)
    receive(sched, np.ones((H, 2)), 0.1, 0.15)
    pub2 = sched.poll(pub1.switch_time)
    assert pub2 is not None
    assert pub2.blended == 3
    # Smoothstep weights s(j/4), j = 1..3: the fade leaves the old chunk and joins the
    # new one with zero slope.
    np.testing.assert_allclose(pub2.positions[:5, 0], [0.15625, 0.5, 0.84375, 1.0, 1.0])


def test_blending_uses_old_actions_at_same_times_and_its_last_beyond_end() -> None:
    sched = make(horizon=10, execute_horizon=4, request_lead_s=0.05, smoothing=CrossFade(4))
    old = np.arange(10, dtype=float)[:, None]  # action i = i
    sched.request_sent(0.0)
    receive(sched, old, 0.0, 0.0)
    pub1 = sched.poll(0.0)
    assert pub1 is not None and pub1.first_index == 0 and pub1.origin == pytest.approx(DT)
    assert pub1.switch_time == pytest.approx(0.08)
    sched.request_sent(0.03)
    new = np.full((10, 1), 100.0)
    receive(sched, new, 0.03, 0.05)
    pub2 = sched.poll(0.08)
    assert pub2 is not None
    # 0.03 + i*0.02 >= 0.10 -> k = 4: points at 0.11, 0.13, 0.15, 0.17 s, between old
    # actions (old action i = i runs at 0.02 + i*0.02 s, so the old value at time t
    # is t/0.02 - 1).
    assert pub2.first_index == 4
    times = pub2.times[:4]
    old_at = times / DT - 1
    x = np.array([1, 2, 3, 4]) / 5
    w = x * x * (3 - 2 * x)
    np.testing.assert_allclose(pub2.positions[:4, 0], (1 - w) * old_at + w * 100.0)
    # Beyond the old chunk's end (0.08 s) the old chunk contributes its last action.
    sched2 = make(horizon=4, execute_horizon=4, request_lead_s=0.0, smoothing=CrossFade(2))
    sched2.request_sent(0.0)
    sched2.chunk_received(np.arange(4, dtype=float)[:, None], 0.0, 0.0)
    first = sched2.poll(0.0)
    assert first is not None and first.end_time == pytest.approx(0.08)
    sched2.request_sent(0.08)
    sched2.chunk_received(np.full((4, 1), 10.0), 0.08, 0.08)
    second = sched2.poll(0.08)
    assert second is not None
    x = np.array([1, 2]) / 3
    np.testing.assert_allclose(second.positions[:2, 0], 3 + (10 - 3) * x * x * (3 - 2 * x))


def boundary_step(prev: Publication, sched: ChunkScheduler, pub: Publication) -> float:
    """Largest jump from the old command at the stamp to the new first point, in units of
    the largest step inside the new publication."""
    inside = np.abs(np.diff(pub.positions, axis=0)).max()
    jump = np.abs(pub.positions[0] - _old_command_at(prev, pub.first_time)).max()
    return float(jump / inside)


def _old_command_at(prev: Publication, t: float) -> np.ndarray:
    j = int(np.clip(np.searchsorted(prev.times, t), 0, len(prev.times) - 1))
    return prev.positions[j]


def test_blending_makes_a_discontinuous_switch_continuous() -> None:
    def run(blend: int) -> float:
        sched = make(request_lead_s=0.1, smoothing=CrossFade(blend) if blend else NoSmoothing())
        sched.request_sent(0.0)
        receive(sched, ramp_chunk(0.0), 0.0, 0.05)
        pub1 = sched.poll(0.05)
        assert pub1 is not None
        t_obs = pub1.switch_time - 0.1
        sched.request_sent(t_obs)
        receive(sched, ramp_chunk(t_obs) + 0.5, t_obs, t_obs + 0.05)  # offset 0.5
        pub2 = sched.poll(pub1.switch_time)
        assert pub2 is not None
        return boundary_step(pub1, sched, pub2)

    without, with_blend = run(0), run(10)
    assert without > 20
    assert with_blend < 3


# ------------------------------------------------------- what the switch joins


def test_the_switch_joins_what_the_caller_says_the_controllers_follow() -> None:
    """The scheduler keeps no model of the commanded state: the smoothing joins the
    trajectory handed to ``peek`` (the gate's), whatever the previous chunk was."""
    limits = MotionLimits.from_joint_limits(
        {f"j{i}": JointLimit(-5.0, 25.0, 2.5) for i in range(3)}, ["j0", "j1", "j2"]
    )
    sched = make(request_lead_s=0.1, smoothing=Splice(limits=limits))
    pub1 = first_publication(sched, 10.0, 0.08)
    sched.request_sent(10.18)
    receive(sched, ramp_chunk(10.18) + 0.05, 10.18, 10.2)
    stamp = pub1.switch_time
    for where in (np.array([10.2, 11.2, 12.2]), np.array([10.25, 11.3, 12.1])):
        followed = ControllerTrajectory.standing(stamp, where)
        pub = sched.peek(stamp, followed)
        assert pub is not None
        # The first point, 20-40 ms in, leaves the followed state only as t^3 does.
        np.testing.assert_allclose(pub.positions[0], where, atol=0.01)
    # Nothing followed known: the rows as they are (the gate refuses such a chunk).
    pub = sched.peek(stamp, None)
    assert pub is not None and pub.blended == 0


# ----------------------------------------------------- failures and reset


def test_request_failed_retries_after_delay() -> None:
    sched = make(retry_delay_s=0.5)
    sched.request_sent(1.0)
    sched.request_failed(1.2, "connection lost")
    assert sched.next_request_time() == pytest.approx(1.7)
    assert not sched.wants_request(1.6)
    assert sched.wants_request(1.7)


def test_state_errors_name_the_problem() -> None:
    sched = make()
    with pytest.raises(SchedulerStateError) as info:
        sched.request_failed(0.0)
    assert str(info.value) == "request_failed() without a request in flight"
    with pytest.raises(SchedulerStateError) as info:
        sched.chunk_received(ramp_chunk(0.0), 0.0, 0.1)
    assert str(info.value) == "chunk_received(t_obs=0.0) without a request in flight"
    sched.request_sent(1.0)
    with pytest.raises(SchedulerStateError) as info:
        sched.request_sent(2.0)
    assert str(info.value) == (
        "request_sent(t_obs=2.0) while the request for t_obs=1.0 is still in flight; "
        "at most one request may be in flight"
    )
    with pytest.raises(SchedulerStateError) as info:
        sched.chunk_received(ramp_chunk(0.5), 0.5, 1.1)
    assert str(info.value) == (
        "chunk_received(t_obs=0.5) does not match the request in flight (t_obs=1.0)"
    )


@pytest.mark.parametrize(
    ("chunk", "message"),
    [
        (np.zeros((49, 3)), "chunk has shape (49, 3), expected (50, D) with D >= 1"),
        (np.zeros(50), "chunk has shape (50,), expected (50, D) with D >= 1"),
        (
            np.where(np.eye(50, 3) > 0, np.nan, 0.0),
            "chunk contains NaN or Inf; run safety.check_chunk first",
        ),
    ],
)
def test_bad_chunks_raise(chunk: np.ndarray, message: str) -> None:
    sched = make()
    sched.request_sent(0.0)
    with pytest.raises(ChunkError) as info:
        sched.chunk_received(chunk, 0.0, 0.1)
    assert str(info.value) == message
    assert sched.wants_request(0.1)


def test_a_refused_publication_keeps_current_and_requests_again() -> None:
    sched = make(request_lead_s=0.1, retry_delay_s=0.05)
    pub1 = first_publication(sched, 10.0, 0.08)
    sched.request_sent(10.18)
    receive(sched, ramp_chunk(10.18), 10.18, 10.2)
    peeked = sched.peek(10.28)
    assert peeked is not None and peeked.first_index == 6
    assert sched.peek(10.28) is not None  # peeking changes nothing
    sched.refuse(peeked, 10.28, "first point moves joint 'a' by 1.0000")
    assert sched.peek(10.29) is None and not sched.has_pending
    assert sched.current is pub1
    assert sched.next_request_time() == pytest.approx(10.33)
    sched.request_sent(10.33)
    receive(sched, ramp_chunk(10.33), 10.33, 10.35)
    peeked = sched.peek(10.35)
    assert peeked is not None
    sched.commit(peeked)
    assert sched.current is peeked


def test_commit_or_refuse_of_a_stale_peek_is_an_error() -> None:
    sched = make(request_lead_s=0.1)
    first_publication(sched, 10.0, 0.08)
    sched.request_sent(10.18)
    receive(sched, ramp_chunk(10.18), 10.18, 10.2)
    peeked = sched.peek(10.28)
    assert peeked is not None
    sched.reset()
    with pytest.raises(
        SchedulerStateError, match="commit\\(\\) of chunk 2, but the held chunk is N"
    ):
        sched.commit(peeked)
    with pytest.raises(SchedulerStateError, match="refuse\\(\\) of chunk 2"):
        sched.refuse(peeked, 10.28, "late")


def test_reset_forgets_chunks_and_discards_reply_in_flight() -> None:
    sched = make(request_lead_s=0.1)
    first_publication(sched, 10.0, 0.08)
    sched.request_sent(10.18)
    sched.reset()
    assert sched.current is None
    assert not sched.wants_request(10.2)  # the old reply is still on its way
    assert not receive(sched, ramp_chunk(10.18), 10.18, 10.25)
    assert sched.poll(10.25) is None
    assert sched.wants_request(10.25)
    pub = first_publication(sched, 11.0, 0.04)
    assert pub.chunk_seq == 2


def test_stall_time_counts_time_without_future_points() -> None:
    sched = make(horizon=10, execute_horizon=5, request_lead_s=0.0)
    pub1 = first_publication(sched, 0.0, 0.0)
    assert pub1.end_time == pytest.approx(0.20)
    sched.request_sent(pub1.switch_time)
    assert sched.stall_time(0.20) == pytest.approx(0.0, abs=1e-12)
    assert sched.stall_time(0.30) == pytest.approx(0.10)
    receive(sched, ramp_chunk(pub1.switch_time, horizon=10), pub1.switch_time, 0.25)
    assert sched.poll(0.25) is not None
    assert sched.stall_time(0.25) == pytest.approx(0.05)
    sched.reset()
    assert sched.stall_time(9.0) == pytest.approx(0.05)


def test_publication_arrays_are_read_only() -> None:
    pub = first_publication(make(), 0.0, 0.01)
    with pytest.raises(ValueError):
        pub.positions[0, 0] = 1.0
    with pytest.raises(ValueError):
        pub.time_from_start[0] = 1.0


# ---------------------------------------------------------- property runs


def simulate(
    cfg: SchedulerConfig,
    latencies: np.ndarray,
    *,
    tick: float,
    duration: float,
) -> tuple[ChunkScheduler, list[Publication], int]:
    """Drive the scheduler like the node's timer: every ``tick`` s deliver due replies,
    poll, then send a request if wanted. Reply n takes ``latencies[n]`` seconds.
    Returns the scheduler, its publications and the number of replies delivered."""
    sched = ChunkScheduler(cfg)
    received = 0
    pubs: list[Publication] = []
    arrival: float | None = None
    t_obs = 0.0
    n = 0
    for step in range(int(round(duration / tick))):
        now = step * tick
        if arrival is not None and now >= arrival:
            chunk = ramp_chunk(t_obs, cfg.horizon, 2, cfg.dt)
            receive(sched, chunk, t_obs, now)
            received += 1
            arrival = None
        pub = sched.poll(now)
        if pub is not None:
            pubs.append(pub)
        if sched.wants_request(now):
            sched.request_sent(now)
            t_obs = now
            arrival = now + float(latencies[n % len(latencies)])
            n += 1
    return sched, pubs, received


def check_invariants(cfg: SchedulerConfig, pubs: list[Publication]) -> None:
    for pub in pubs:
        tfs = pub.time_from_start
        assert np.isfinite(pub.positions).all()
        assert tfs[0] >= cfg.min_lead_s - 1e-9
        assert tfs[0] < cfg.min_lead_s + cfg.dt + 1e-9
        np.testing.assert_allclose(np.diff(tfs), cfg.dt, rtol=0, atol=1e-9)
        assert (np.diff(tfs) > 0).all()
        # Each point is the chunk's action for its own time (ramp chunk: value = time),
        # later by the time the arm stood still (a whole number of slots).
        np.testing.assert_allclose(pub.positions[:, 0], pub.times - pub.shift_s, atol=1e-6)
        assert pub.origin + pub.first_index * cfg.dt == pytest.approx(pub.first_time)
        assert pub.shift_s / cfg.dt == pytest.approx(round(pub.shift_s / cfg.dt), abs=1e-6)
    for prev, pub in zip(pubs, pubs[1:]):
        assert pub.stamp >= prev.stamp
        assert pub.chunk_seq > prev.chunk_seq


def test_property_zero_stall_when_replies_arrive_within_the_lead() -> None:
    """Zero stall, every chunk switched exactly at its predecessor's switch time, when
    L <= lead, L <= (E-1)*dt + min_lead and lead + min_lead <= (H-E)*dt (auto lead at
    the p95 plus a margin wider than the latency spread)."""
    rng = np.random.default_rng(7)
    runs = 0
    while runs < 25:
        dt = float(rng.choice([0.01, 0.02, 0.05]))
        horizon = int(rng.integers(5, 60))
        execute = int(rng.integers(1, horizon + 1))
        hi_max = min((execute - 1) * dt + dt, (horizon - execute) * dt - dt - 0.05)
        if hi_max <= 0:
            continue
        runs += 1
        hi = float(rng.uniform(0.0, hi_max))
        lo = float(rng.uniform(max(0.0, hi - 0.05), hi))
        cfg = SchedulerConfig(
            dt=dt,
            horizon=horizon,
            execute_horizon=execute,
            timing=AdaptiveTiming(lead_percentile=95.0, lead_margin_s=0.05),
        )
        latencies = rng.uniform(lo, hi, size=200)
        duration = round(max(2.0, 3 * horizon * dt), 3)
        sched, pubs, received = simulate(cfg, latencies, tick=0.001, duration=duration)
        assert len(pubs) >= 3
        check_invariants(cfg, pubs)
        for prev, pub in zip(pubs, pubs[1:]):
            assert pub.stamp == pytest.approx(prev.switch_time, abs=1e-9)
            assert pub.stamp <= prev.end_time + 1e-9
            # The old chunk ran exactly E actions; the new one starts in the next slot.
            assert prev.switch_time == pytest.approx(
                prev.origin + (prev.first_index + execute - 1) * dt
            )
        assert sched.stall_time(duration - 0.001) == pytest.approx(0.0, abs=1e-9)
        assert sched.chunks_dropped_late == 0


def test_property_zero_stall_latency_bound() -> None:
    """Replies slower than an executed part: one chunk per L seconds; zero stall while
    2L <= (H-1)*dt (one request in flight), for any E."""
    rng = np.random.default_rng(11)
    runs = 0
    while runs < 25:
        dt = float(rng.choice([0.01, 0.02, 0.05]))
        horizon = int(rng.integers(5, 60))
        execute = int(rng.integers(1, horizon + 1))
        # Latency-bound: every reply comes after the switch (L > (E-1)*dt + min_lead).
        lo, hi = (execute - 1) * dt + dt + 0.002, ((horizon - 1) * dt - 0.002) / 2
        if lo >= hi:
            continue
        runs += 1
        latency = float(rng.uniform(lo, hi))
        cfg = SchedulerConfig(dt=dt, horizon=horizon, execute_horizon=execute)
        sched, pubs, received = simulate(cfg, np.array([latency]), tick=0.001, duration=3.0)
        check_invariants(cfg, pubs)
        for prev, pub in zip(pubs, pubs[1:]):
            assert pub.stamp <= prev.end_time + 1e-9
        assert sched.stall_time(3.0 - 0.001) == pytest.approx(0.0, abs=1e-9)
        assert sched.chunks_dropped_late == 0


@pytest.mark.parametrize("mode", ["early", "sync"])
def test_property_random_latencies_keep_invariants(mode: str) -> None:
    rng = np.random.default_rng(3)
    published = 0
    for _ in range(15):
        dt = float(rng.choice([0.01, 0.02, 1 / 30, 0.05]))
        horizon = int(rng.integers(2, 60))
        execute = int(rng.integers(1, horizon + 1))
        cfg = SchedulerConfig(
            dt=dt,
            horizon=horizon,
            execute_horizon=execute,
            smoothing=CrossFade(steps) if (steps := int(rng.integers(0, 4))) else NoSmoothing(),
            mode=mode,  # type: ignore[arg-type]
        )
        latencies = rng.exponential(0.3, size=100)
        sched, pubs, received = simulate(cfg, latencies, tick=0.003, duration=3.0)
        for pub in pubs:
            tfs = pub.time_from_start
            assert np.isfinite(pub.positions).all()
            assert tfs[0] >= cfg.min_lead_s - 1e-9
            np.testing.assert_allclose(np.diff(tfs), dt, atol=1e-9)
            if mode == "sync":
                assert len(tfs) <= execute
        handled = len(pubs) + sched.chunks_dropped_late
        assert received - handled in (0, 1)  # the last may still be held
        published += len(pubs)
    assert published > 50
