"""The motion instrument itself: jerk from real sample times and the C0/C1 gaps at
chunk switches read about zero for a seamless line, also with jittered control
cycles, and a deliberate step reads as exactly one step."""

from __future__ import annotations

import numpy as np
import pytest

from relay_ros.sim.motion_measures import jerk_rms, switch_summary
from relay_ros.sim.trajectory_command import TrajectoryCommand
from relay_ros.sim.trajectory_follower import TrajectoryFollower

DT = 0.02  # chunk point spacing (50 Hz)
SPEED = 0.5  # rad/s: a step of 0.01 rad between points
H, E = 50, 25


def run_line(*, jitter_s: float, step_at: int | None = None, seed: int = 0):
    """Stream chunks of the line q = SPEED * t into a controller ticked at 100 Hz
    (each cycle jittered by up to ``jitter_s``), a new chunk every E points, each
    re-timed to its arrival as policy_node does; chunk ``step_at`` and the ones after
    it are offset by one step."""
    rng = np.random.default_rng(seed)
    f = TrajectoryFollower(["j"], [0.0], name="arm")
    times, offset, chunk, next_chunk = [], 0.0, 0, 0.0
    t = 0.0
    while t < 4.0:
        if t >= next_chunk:
            if step_at is not None and chunk == step_at:
                offset = SPEED * DT
            tfs = DT * np.arange(1, H + 1)
            points = [(float(s), [SPEED * (t + s) + offset], [SPEED]) for s in tfs[:-1]]
            points.append((float(tfs[-1]), [SPEED * (t + tfs[-1]) + offset], [0.0]))
            assert f.receive(TrajectoryCommand(t, ["j"], points), t)
            chunk += 1
            next_chunk = t + E * DT
        f.update(t)
        times.append(t)
        t = 0.01 * (len(times)) + rng.uniform(-jitter_s, jitter_s)
    return f


@pytest.mark.parametrize("jitter_s", [0.0, 0.0017], ids=["even", "jittered"])
def test_a_seamless_line_reads_zero_jerk_and_zero_gaps(jitter_s: float) -> None:
    f = run_line(jitter_s=jitter_s)
    history = f.measures.history()
    assert np.ptp(np.diff(history.times)) > (0.003 if jitter_s else -1.0)
    moving = history.times > 0.05  # after the first chunk's start from rest
    assert jerk_rms(history.times[moving], history.commanded[moving]) < 1e-6
    summary = switch_summary(f.measures.boundary_steps())
    assert summary.moving >= 6 and summary.at_rest == 0
    assert summary.typical_step == pytest.approx(SPEED * DT)
    assert summary.c0_p95 < 1e-9 and summary.c1_p95 < 1e-6


def test_a_fixed_dt_would_read_the_jitter_as_jerk() -> None:
    # What the real sample times buy: the same jittered run over a fixed dt^3.
    history = run_line(jitter_s=0.0017).measures.history()
    third = np.diff(history.commanded[5:, 0], n=3) / 0.01**3
    assert np.sqrt(np.mean(third**2)) > 100.0


def test_a_deliberate_step_reads_as_one_step() -> None:
    f = run_line(jitter_s=0.0017, step_at=4)
    steps = f.measures.boundary_steps()
    gaps = [s.position_gap for s in steps]
    assert gaps[3] == pytest.approx(SPEED * DT)  # the switch to chunk 4
    assert max(gaps[:3] + gaps[4:]) < 1e-9
    assert switch_summary(steps).c0_p95 < SPEED * DT  # one of 7 switches


def test_jerk_of_a_cubic_on_uneven_times_is_exact() -> None:
    times = np.cumsum(np.random.default_rng(1).uniform(0.008, 0.012, 40))
    positions = np.stack([times**3, np.zeros_like(times)], axis=1)
    # x = t^3 has a constant third derivative of 6 (the other joint none).
    assert jerk_rms(times, positions) == pytest.approx(6.0 / np.sqrt(2.0))
    assert jerk_rms(times[:3], positions[:3]) is None
    positions[5, 0] = np.nan
    assert jerk_rms(times, positions) is None
