"""Request lead and execute horizon that follow the latency (relay_ros.pipeline.adaptive_timing):
the rule against hand-computed values, its bounds, and a user's value winning, live too,
through the scheduler and StreamingCore on a synthetic clock."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from streaming_rig import CoreRig  # test/ helper

from relay_ros.pipeline.adaptive_timing import (
    AdaptiveTiming,
    adaptive_execute_horizon,
    adaptive_lead,
)
from relay_ros.pipeline.scheduler import ChunkScheduler
from relay_ros.pipeline.scheduler_config import SchedulerConfig
from relay_ros.server.metadata import build_metadata

DT = 0.02
RULE = AdaptiveTiming()


def test_the_lead_is_the_median_latency() -> None:
    assert adaptive_lead(0.083, RULE) == pytest.approx(0.083)
    assert adaptive_lead(None, RULE) == 0.0  # nothing measured: timed from a reply anyway
    assert adaptive_lead(0.083, AdaptiveTiming(lead_margin_s=0.05)) == pytest.approx(0.133)


@pytest.mark.parametrize(
    ("latency_s", "expected"),
    [
        (None, 25),  # nothing measured yet: the cap
        (0.01, 4),  # ceil(1.5 * 0.5) = 1: the floor
        (0.08, 6),  # ceil(1.5 * 4) = 6
        (0.081, 7),  # ceil(1.5 * 4.05) = 7
        (0.2, 15),  # ceil(1.5 * 10) = 15
        (0.3, 23),  # ceil(1.5 * 15) = 23
        (0.4, 25),  # 30, capped at H/2
        (5.0, 25),
    ],
)
def test_the_execute_horizon_covers_one_and_a_half_latencies(
    latency_s: float | None, expected: int
) -> None:
    assert adaptive_execute_horizon(latency_s, DT, 25, RULE) == expected


def test_the_cap_wins_over_the_floor_and_the_rule_is_checked() -> None:
    assert adaptive_execute_horizon(0.01, DT, 2, RULE) == 2  # a server with H = 4
    for kwargs, message in [
        ({"lead_percentile": 0.0}, "lead_percentile 0.0 must be in"),
        ({"lead_margin_s": -0.1}, "lead_margin_s -0.1 must be a number >= 0"),
        ({"horizon_factor": 0.0}, "horizon_factor 0.0 must be a number > 0"),
        ({"min_execute_horizon": 0}, "min_execute_horizon 0 must be an integer >= 1"),
    ]:
        with pytest.raises(ValueError, match=message):
            AdaptiveTiming(**kwargs)


def _scheduler(latencies: list[float], **config: object) -> ChunkScheduler:
    options: dict[str, object] = {"dt": DT, "horizon": 50, "execute_horizon": 25}
    options.update(config)
    sched = ChunkScheduler(SchedulerConfig(**options))  # type: ignore[arg-type]
    for latency in latencies:
        sched.latencies.add(latency)
    return sched


def test_the_scheduler_follows_the_latency_only_when_automatic() -> None:
    measured = [0.19, 0.2, 0.21, 0.2, 0.25]
    auto = _scheduler(measured, adaptive_execute_horizon=True)
    assert auto.execute_horizon() == 15 and auto.request_lead() == pytest.approx(0.2)
    fixed = _scheduler(measured, adaptive_execute_horizon=False, request_lead_s=0.15)
    assert fixed.execute_horizon() == 25 and fixed.request_lead() == pytest.approx(0.15)
    # The lead never passes (H-1)*dt - min_lead: a reply must keep an action.
    slow = _scheduler([3.0], adaptive_execute_horizon=True)
    assert slow.request_lead() == pytest.approx(49 * DT - DT)
    assert slow.execute_horizon() == 25


def test_a_slower_link_gets_a_shorter_horizon_after_a_faster_one_and_back() -> None:
    sched = _scheduler([0.08] * 20, adaptive_execute_horizon=True)
    assert sched.execute_horizon() == 6
    for _ in range(100):  # the window (100) now holds only the slow link
        sched.latencies.add(0.3)
    assert sched.execute_horizon() == 23
    assert sched.request_lead() == pytest.approx(0.3)


def test_the_core_adapts_and_a_value_the_user_sets_wins_live() -> None:
    rig = CoreRig(latency_s=0.1)
    rig.connect()
    rig.run_until(lambda: len(rig.chunks()) >= 6)
    # 100 ms replies: E = ceil(1.5 * 5) = 8, the lead the median (0.1 s).
    assert rig.core.execute_horizon == 8
    assert rig.core.request_lead_s == pytest.approx(0.1, abs=0.011)
    health = rig.health()
    assert health.values["execute_horizon"] == "8" and health.values["smoothing"].startswith(
        "splice"
    )
    rig.core.apply_config(
        dataclasses.replace(rig.config, execute_horizon=20, request_lead_s=0.25), rig.now
    )
    assert rig.core.execute_horizon == 20 and rig.core.request_lead_s == pytest.approx(0.25)
    published = len(rig.chunks())
    rig.run_until(lambda: len(rig.chunks()) >= published + 3)
    starts = [m.points.stamp + m.points.time_from_start[0] for m in rig.chunks("arm")[-3:]]
    # E = 20 in force: each chunk starts 20 actions after the last, within the slot
    # of its own observation's grid.
    np.testing.assert_allclose(np.diff(starts), 20 * DT, atol=DT)
    rig.core.apply_config(rig.config, rig.now)  # back to automatic
    assert rig.core.execute_horizon == 8
    # In sync mode E is the server's H/2 (openpi's broker), the lead 0.
    sync = CoreRig(latency_s=0.1, overrides={"request_mode": "sync"})
    sync.connect()
    sync.run_until(lambda: len(sync.chunks()) >= 2)
    assert sync.core.execute_horizon == 25 and sync.core.request_lead_s == 0.0


def test_the_prefix_keeps_half_the_horizon_its_server_sizes_the_soft_region_from() -> None:
    rig = CoreRig(
        latency_s=0.1,
        metadata=build_metadata("pi05", action_prefix=True),
        overrides={"smoothing": "prefix"},
    )
    rig.connect()
    rig.run_until(lambda: len(rig.observations) >= 4)
    assert rig.core.execute_horizon == 25
    assert rig.observations[-1]["execute_horizon"] == 25
    assert rig.core.request_lead_s == pytest.approx(0.1, abs=0.011)  # the lead still adapts
