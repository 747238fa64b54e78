"""Chunk boundaries with a noisy policy: none vs blend vs prefix, at 80 ms and 200 ms inference.

Runs the visual closed loop (`relay_ros.sim.closed_loop`: world cameras, the reference
visual policy with chunk-to-chunk noise, policy_node's scheduler, the simulated
joint_trajectory_controller) on a synthetic clock, once per smoothing and latency
and seed, and prints one table row each:

- boundary step median / max: at each chunk switch, the jump from the old command
  to the new chunk over the largest step inside the new chunk (~1 = seamless);
- jerk: RMS of the third difference of the commanded positions / (10 ms)^3;
- tracking error median and time on target (end effector within 3 cm of the target).

Goals: with prefix, boundary step max <= 1.5 and jerk at least 3x lower
than none. Writes a PNG with the three side by side (``--png``).

    .venv/bin/python bench/boundaries.py [--duration 20] [--seeds 0 1 2] [--png PATH]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from relay_ros.sim.closed_loop import SMOOTHINGS, ClosedLoopResult, LoopSettings, run_closed_loop


def _row(label: str, results: list[ClosedLoopResult]) -> tuple[str, dict[str, float]]:
    ratios = np.concatenate([r.boundary_ratios for r in results])
    errors = np.concatenate([r.task.errors_m for r in results])
    jerk = float(np.mean([r.jerk_rms or np.nan for r in results]))
    values = {
        "b_med": float(np.median(ratios)),
        "b_max": float(ratios.max()),
        "jerk": jerk,
        "err": float(np.median(errors)) * 100.0,
        "on": float(np.mean(errors <= results[0].task.on_target_m)) * 100.0,
        "stall": float(np.mean([r.stall_time_s for r in results])),
    }
    text = (
        f"| {label} | {values['b_med']:.2f} / {values['b_max']:.2f} | {values['jerk']:.0f} | "
        f"{values['err']:.1f} | {values['on']:.0f}% | {values['stall']:.2f} |"
    )
    return text, values


def _plot(results: dict[str, ClosedLoopResult], path: Path, latency_ms: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    fig = Figure(figsize=(15, 5.5), layout="constrained")
    axes = fig.subplots(2, len(results), sharex=True, sharey="row")
    for c, (smoothing, r) in enumerate(results.items()):
        window = (r.times >= 2.0) & (r.times <= 8.0)
        for row, joint in enumerate((0, 1)):
            ax = axes[row, c]
            for k, (times, positions) in enumerate(r.chunks):
                keep = (times >= 2.0) & (times <= 8.0)
                if keep.any():
                    ax.plot(
                        times[keep],
                        positions[keep, joint],
                        color=("tab:blue", "tab:green")[k % 2],
                        lw=0.8,
                        alpha=0.6,
                    )
            ax.plot(r.times[window], r.commanded[window, joint], color="black", lw=1.3)
            ax.set_ylabel(f"joint{joint + 1} [rad]", fontsize=8)
            ax.tick_params(labelsize=7)
        axes[0, c].set_title(
            f"{smoothing}: boundary step max {r.boundary_max:.1f}, jerk {r.jerk_rms:.0f} rad/s^3",
            fontsize=10,
        )
        axes[1, c].set_xlabel("time since the first chunk [s]", fontsize=8)
    fig.suptitle(
        f"Chunk boundaries with a noisy policy at {latency_ms} ms inference: black = commanded, "
        "colours = published chunks",
        fontsize=11,
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--duration", type=float, default=20.0, help="simulated seconds per run")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--latencies-ms", type=int, nargs="+", default=[80, 200])
    p.add_argument("--png", type=Path, default=Path("bench_output/boundaries.png"))
    args = p.parse_args(argv)
    started = time.perf_counter()
    print(
        f"visual closed loop, chunk noise 1, H=50 at 50 Hz, E=25, early requests, jitter 20 ms, "
        f"{args.duration:g} s x seeds {args.seeds}"
    )
    failures = []
    for latency_ms in args.latencies_ms:
        print(f"\ninference {latency_ms} ms\n")
        print(
            "| smoothing | boundary step med / max | jerk RMS [rad/s^3] | "
            "tracking error med [cm] | time on target | stall [s] |"
        )
        print("|---|---|---|---|---|---|")
        values = {}
        first_seed: dict[str, ClosedLoopResult] = {}
        for smoothing in SMOOTHINGS:
            results = [
                run_closed_loop(
                    LoopSettings(
                        duration_s=args.duration,
                        latency_s=latency_ms / 1000.0,
                        smoothing=smoothing,
                        seed=seed,
                    )
                )
                for seed in args.seeds
            ]
            first_seed[smoothing] = results[0]
            text, values[smoothing] = _row(smoothing, results)
            print(text)
        ratio = values["none"]["jerk"] / values["prefix"]["jerk"]
        goal_step = values["prefix"]["b_max"] <= 1.5
        print(
            f"\nprefix: boundary step max {values['prefix']['b_max']:.2f} (goal <= 1.5: "
            f"{'met' if goal_step else 'missed'}), jerk {ratio:.1f}x lower than none "
            f"(goal >= 3x: {'met' if ratio >= 3 else 'missed'})"
        )
        if not goal_step or ratio < 3:
            failures.append(latency_ms)
        png = args.png.with_name(f"{args.png.stem}_{latency_ms}ms{args.png.suffix}")
        _plot(first_seed, png, latency_ms)
        print(f"plot: {png}")
    print(f"\n{time.perf_counter() - started:.0f} s")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
