"""The gentle start (``ramp_in_s``) against a start at full speed, on the same worlds.

Runs `relay_ros.sim.streaming_loop` as bench/motion.py does (world cameras, the
reference visual policy with chunk noise, policy_node's StreamingCore with
config/pi05.yaml, inference 80 ms +- 20 ms, controllers at 100 Hz +- 1.5 ms that
start each trajectory from their last command, the arm exact or 40 ms behind) once
per seed with ``ramp_in_s`` 0.5 (the node's default) and once with 0, on the same
world and random draws. Measured on what the controllers command, at their real
cycle times, from the first published chunk on (largest over the commanded joints):

- peak speed and acceleration in the first 0.25 s and 0.5 s (finite differences on
  the real sample times);
- jerk RMS over the first second and over the whole run;
- tracking error (median) and time on target (within 3 cm) over the run.

Cells are medians over the seeds with the spread (min..max); "paired" is the
per-seed difference ramp - no ramp, "wins" the seeds where the ramp is lower.

    .venv/bin/python bench/ramp_in.py [--seeds 0 .. 9] [--duration 10]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence

import numpy as np

from relay_ros.sim.motion_measures import jerk_rms
from relay_ros.sim.streaming_loop import LoopRun, LoopRunResult, run_streaming_loop

RAMP_S = 0.5
ARMS: tuple[tuple[str, float], ...] = (("exact", 0.0), ("lag 40 ms", 0.04))


def _peaks(result: LoopRunResult, until_s: float) -> tuple[float, float]:
    """Largest commanded speed and acceleration over the joints in ``[0, until_s]``."""
    keep = result.times <= until_s
    times, values = result.times[keep], result.commanded[keep]
    speed = np.diff(values, axis=0) / np.diff(times)[:, None]
    middle = 0.5 * (times[1:] + times[:-1])
    accel = np.diff(speed, axis=0) / np.diff(middle)[:, None]
    return float(np.abs(speed).max()), float(np.abs(accel).max())


def _measures(result: LoopRunResult) -> dict[str, float]:
    first = result.times <= 1.0
    speed_q, accel_q = _peaks(result, 0.25)
    speed_h, accel_h = _peaks(result, 0.5)
    return {
        "speed 0.25 s": speed_q,
        "speed 0.5 s": speed_h,
        "accel 0.25 s": accel_q,
        "accel 0.5 s": accel_h,
        "jerk 1 s": jerk_rms(result.times[first], result.commanded[first]) or float("nan"),
        "jerk run": result.jerk_rms or float("nan"),
        "error [cm]": 100.0 * (result.task.median_m or float("nan")),
        "on target": 100.0 * (result.task.on_target_share or 0.0),
    }


def _cell(values: Sequence[float], digits: int) -> str:
    array = np.asarray(values, dtype=np.float64)
    return f"{np.median(array):.{digits}f} ({array.min():.{digits}f}..{array.max():.{digits}f})"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=list(range(10)))
    parser.add_argument("--duration", type=float, default=10.0, help="simulated s measured")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    header = (
        "| arm | ramp_in_s | peak speed 0.25 s / 0.5 s [rad/s] | peak accel. 0.25 s / 0.5 s "
        "[rad/s^2] | jerk first 1 s [rad/s^3] | jerk run | paired jerk run | wins | "
        "error [cm] | on target |"
    )
    print(header)
    print("|" + "---|" * (header.count("|") - 1))
    for arm, lag in ARMS:
        measured: dict[float, list[dict[str, float]]] = {RAMP_S: [], 0.0: []}
        for seed in args.seeds:
            for ramp in (RAMP_S, 0.0):
                run = LoopRun(
                    seed=seed, duration_s=args.duration, tracking_lag_s=lag, ramp_in_s=ramp
                )
                measured[ramp].append(_measures(run_streaming_loop(run)))
        paired = [a["jerk run"] - b["jerk run"] for a, b in zip(measured[RAMP_S], measured[0.0])]
        wins = sum(p < 0 for p in paired)
        for ramp, rows in measured.items():
            column = {key: [row[key] for row in rows] for key in rows[0]}
            print(
                f"| {arm} | {ramp:g} | {_cell(column['speed 0.25 s'], 2)} / "
                f"{_cell(column['speed 0.5 s'], 2)} | {_cell(column['accel 0.25 s'], 1)} / "
                f"{_cell(column['accel 0.5 s'], 1)} | {_cell(column['jerk 1 s'], 0)} | "
                f"{_cell(column['jerk run'], 0)} | "
                + (f"{_cell(paired, 0)} | {wins}/{len(paired)}" if ramp else " | ")
                + f" | {_cell(column['error [cm]'], 2)} | {np.median(column['on target']):.0f}% |"
            )
    elapsed = time.perf_counter() - started
    print(f"\n{len(args.seeds)} seeds, {args.duration:g} s each, {elapsed:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
