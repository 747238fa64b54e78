"""A fair motion measure: paired runs of the node's StreamingCore on the same world.

Runs `relay_ros.sim.streaming_loop` (world cameras, the reference visual policy with
chunk noise, policy_node's StreamingCore, a network, simulated
joint_trajectory_controllers with jittered cycles) on a synthetic clock. Every
variant runs on the same seeds, and the target moves on the world's time from the
first published chunk, so the variants see the same target motion: differences are
the variants', not the world's. Each cell is the median over the seeds with the
seed spread (min..max) where it matters; "paired" rows are the per-seed difference.

Tables (each at 80 ms and 200 ms inference, and 80 ms behind the ``lte`` link):

1. early vs sync (smoothing none and prefix): target error, time on target;
2. start-up on its own: first request -> first published chunk, its round trip,
   refusals before it, distance of its first point from the measured state;
3. smoothing on the same runs (early): none, client blend (``blend_steps`` =
   E/2), server prefix, LeRobot async_inference's weighted-average overlap
   (0.3 old + 0.7 new) emulated: jerk from the real sample times, C0 and C1 at the
   switches (moving switches; those at rest counted apart), error, time on target;
4. observation timing (``frame_arrival``, ``frame``, ``request``; early, prefix);
5. execute horizon E per model (early, prefix; GR00T: H=16 at 30 Hz, so100).

    .venv/bin/python bench/motion.py [--seeds 0 1 2 3 4] [--duration 10] [--quick]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import replace

import numpy as np

from relay_ros.sim.streaming_loop import LOOP_SMOOTHINGS, LoopRun, LoopRunResult, run_streaming_loop

CONDITIONS: tuple[tuple[str, float, str | None], ...] = (
    ("80 ms", 0.08, None),
    ("200 ms", 0.2, None),
    ("lte + 80 ms", 0.08, "lte"),
)

Metric = Callable[[LoopRunResult], float | None]


def _runs(base: LoopRun, seeds: Sequence[int]) -> list[LoopRunResult]:
    return [run_streaming_loop(replace(base, seed=s)) for s in seeds]


def _values(results: list[LoopRunResult], metric: Metric) -> np.ndarray:
    return np.array([np.nan if (v := metric(r)) is None else float(v) for r in results])


def _med(results: list[LoopRunResult], metric: Metric, fmt: str, spread: bool = False) -> str:
    v = _values(results, metric)
    if np.all(np.isnan(v)):
        return "n/a"
    text = format(float(np.nanmedian(v)), fmt)
    if spread:
        text += f" ({format(float(np.nanmin(v)), fmt)}..{format(float(np.nanmax(v)), fmt)})"
    return text


def _paired(a: list[LoopRunResult], b: list[LoopRunResult], metric: Metric, fmt: str) -> str:
    """Median and range over seeds of ``metric(a) - metric(b)``."""
    d = _values(a, metric) - _values(b, metric)
    if np.all(np.isnan(d)):
        return "n/a"
    med, lo, hi = np.nanmedian(d), np.nanmin(d), np.nanmax(d)
    return f"{format(float(med), fmt)} ({format(float(lo), fmt)}..{format(float(hi), fmt)})"


def err_cm(r: LoopRunResult) -> float | None:
    return None if r.task.median_m is None else r.task.median_m * 100.0


def on_pct(r: LoopRunResult) -> float | None:
    share = r.task.on_target_share
    return None if share is None else share * 100.0


def jerk(r: LoopRunResult) -> float | None:
    return r.jerk_rms


def c0_ratio(r: LoopRunResult) -> float | None:
    return r.switches.c0_over_step


def c1(r: LoopRunResult) -> float | None:
    return r.switches.c1_median


def _table(title: str, header: Sequence[str]) -> None:
    print(f"\n{title}\n")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))


def _row(cells: Sequence[str]) -> None:
    print("| " + " | ".join(cells) + " |")


def early_vs_sync(seeds: Sequence[int], duration: float) -> dict[str, dict[str, list]]:
    _table(
        "1. early vs sync on the same world (median over seeds; paired = early - sync per "
        "seed, median (min..max))",
        [
            "link",
            "smoothing",
            "error early [cm]",
            "error sync [cm]",
            "paired error [cm]",
            "on target early",
            "on target sync",
            "paired on target [pt]",
        ],
    )
    kept: dict[str, dict[str, list]] = {}
    for label, latency, link in CONDITIONS:
        for smoothing in ("none", "prefix"):
            base = LoopRun(latency_s=latency, link=link, smoothing=smoothing, duration_s=duration)
            early = _runs(base, seeds)
            sync = _runs(replace(base, request_mode="sync"), seeds)
            kept.setdefault(label, {})[smoothing] = [early, sync]
            _row(
                [
                    label,
                    smoothing,
                    _med(early, err_cm, ".2f"),
                    _med(sync, err_cm, ".2f"),
                    _paired(early, sync, err_cm, "+.2f"),
                    _med(early, on_pct, ".0f") + "%",
                    _med(sync, on_pct, ".0f") + "%",
                    _paired(early, sync, on_pct, "+.0f"),
                ]
            )
    return kept


def _both(runs: list, metric: Metric, fmt: str, spread: bool = False) -> str:
    return " / ".join(_med(rs, metric, fmt, spread) for rs in runs)


def startup(kept: dict[str, dict[str, list]]) -> None:
    _table(
        "2. start-up (first request -> first published chunk; median (min..max) over seeds, "
        "early / sync)",
        [
            "link",
            "smoothing",
            "first chunk [ms]",
            "its round trip [ms]",
            "refusals before it",
            "first point from state [rad]",
        ],
    )
    for label, by_smoothing in kept.items():
        for smoothing, runs in by_smoothing.items():
            refusals = [int(np.sum(_values(rs, lambda r: r.startup.refusals))) for rs in runs]
            _row(
                [
                    label,
                    smoothing,
                    _both(runs, lambda r: r.startup.first_chunk_s * 1e3, ".0f", True),
                    _both(runs, lambda r: r.startup.round_trip_s * 1e3, ".0f"),
                    " / ".join(map(str, refusals)),
                    _both(runs, lambda r: r.startup.first_point_distance, ".3f"),
                ]
            )


def smoothing(seeds: Sequence[int], duration: float) -> None:
    _table(
        "3. smoothing on the same runs (early; median (min..max) over seeds; C0 = position "
        "gap at a moving switch over a typical step, C1 = velocity gap [rad/s])",
        [
            "link",
            "smoothing",
            "jerk [rad/s^3]",
            "C0 / step",
            "C1 [rad/s]",
            "switches moving / at rest",
            "error [cm]",
            "on target",
            "refusals",
        ],
    )
    for label, latency, link in CONDITIONS:
        results = {}
        for name in LOOP_SMOOTHINGS:
            base = LoopRun(latency_s=latency, link=link, smoothing=name, duration_s=duration)
            results[name] = _runs(base, seeds)
            rs = results[name]
            moving = int(np.sum(_values(rs, lambda r: r.switches.moving)))
            rest = int(np.sum(_values(rs, lambda r: r.switches.at_rest)))
            _row(
                [
                    label,
                    name,
                    _med(rs, jerk, ".0f", True),
                    _med(rs, c0_ratio, ".2f", True),
                    _med(rs, c1, ".2f"),
                    f"{moving} / {rest}",
                    _med(rs, err_cm, ".2f", True),
                    _med(rs, on_pct, ".0f") + "%",
                    str(int(np.sum(_values(rs, lambda r: r.refusals)))),
                ]
            )
        unchecked = _runs(
            LoopRun(latency_s=latency, link=link, duration_s=duration, unchecked=True), seeds
        )
        _row(
            [label, "none, unchecked", _med(unchecked, jerk, ".0f", True)]
            + [_med(unchecked, c0_ratio, ".2f", True), _med(unchecked, c1, ".2f")]
            + [
                f"{int(np.sum(_values(unchecked, lambda r: r.switches.moving)))} / "
                f"{int(np.sum(_values(unchecked, lambda r: r.switches.at_rest)))}",
                _med(unchecked, err_cm, ".2f", True),
                _med(unchecked, on_pct, ".0f") + "%",
            ]
            + [str(int(np.sum(_values(unchecked, lambda r: r.refusals))))]
        )
        none, prefix, blend, lerobot = (results[k] for k in ("none", "prefix", "blend", "lerobot"))
        ratio = _values(unchecked, jerk) / _values(prefix, jerk)
        print(
            f"\n{label}: jerk none, unchecked / prefix per seed {np.nanmin(ratio):.0f}.."
            f"{np.nanmax(ratio):.0f} (median {np.nanmedian(ratio):.0f}); prefix - lerobot jerk "
            f"{_paired(prefix, lerobot, jerk, '+.0f')}; blend - prefix: jerk "
            f"{_paired(blend, prefix, jerk, '+.0f')}, error "
            f"{_paired(blend, prefix, err_cm, '+.2f')} cm, on target "
            f"{_paired(blend, prefix, on_pct, '+.0f')} pt"
        )


def observation_timing(seeds: Sequence[int], duration: float) -> None:
    _table(
        "4. observation timing (early, prefix; median over seeds; paired = this - "
        "frame_arrival per seed)",
        ["link", "timing", "error [cm]", "paired error [cm]", "on target", "jerk [rad/s^3]"],
    )
    for label, latency, link in CONDITIONS[:2]:
        base = LoopRun(latency_s=latency, link=link, smoothing="prefix", duration_s=duration)
        reference = _runs(replace(base, observation_timing="frame_arrival"), seeds)
        for timing in ("frame_arrival", "frame", "request"):
            rs = (
                reference
                if timing == "frame_arrival"
                else _runs(replace(base, observation_timing=timing), seeds)
            )
            _row(
                [
                    label,
                    timing,
                    _med(rs, err_cm, ".2f"),
                    _paired(rs, reference, err_cm, "+.2f"),
                    _med(rs, on_pct, ".0f") + "%",
                    _med(rs, jerk, ".0f"),
                ]
            )


#: Execute horizons swept per model; the first is the shipped default (config/<model>.yaml).
HORIZONS: dict[str, tuple[int, ...]] = {
    "pi05": (25, 10, 15),
    "pi0": (25, 10, 15),
    "groot": (8, 4, 12),
}


def execute_horizon(seeds: Sequence[int], duration: float, models: Sequence[str]) -> None:
    _table(
        "5. execute horizon E (early, prefix; median (min..max) over seeds; paired = this E - "
        "the default per seed)",
        [
            "model",
            "link",
            "E",
            "error [cm]",
            "paired error [cm]",
            "on target",
            "paired on target [pt]",
            "jerk [rad/s^3]",
            "requests / s",
        ],
    )
    for model in models:
        for label, latency, link in CONDITIONS:
            default: list[LoopRunResult] = []
            for e in HORIZONS[model]:
                base = LoopRun(
                    model=model,
                    latency_s=latency,
                    link=link,
                    smoothing="prefix",
                    execute_horizon=e,
                    duration_s=duration,
                )
                rs = _runs(base, seeds)
                default = default or rs
                _row(
                    [
                        model,
                        label,
                        str(e),
                        _med(rs, err_cm, ".2f", True),
                        _paired(rs, default, err_cm, "+.2f"),
                        _med(rs, on_pct, ".0f") + "%",
                        _paired(rs, default, on_pct, "+.0f"),
                        _med(rs, jerk, ".0f"),
                        _med(rs, lambda r: r.requests / duration, ".1f"),
                    ]
                )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    p.add_argument("--duration", type=float, default=10.0, help="simulated s after the start")
    p.add_argument("--models", nargs="+", default=["pi05", "groot"], choices=sorted(HORIZONS))
    p.add_argument("--quick", action="store_true", help="tables 1-3 only")
    args = p.parse_args(argv)
    started = time.perf_counter()
    print(
        f"StreamingCore on the visual world, chunk noise 1, inference jitter +-20 ms, "
        f"controller cycles 100 Hz +-1.5 ms, {args.duration:g} s per run after the first "
        f"chunk, seeds {args.seeds}; pi05 (H=50 at 50 Hz) unless said (pi0's reference "
        "server announces the same H and rate: its rows equal pi05's)"
    )
    kept = early_vs_sync(args.seeds, args.duration)
    startup(kept)
    smoothing(args.seeds, args.duration)
    if not args.quick:
        observation_timing(args.seeds, args.duration)
        execute_horizon(args.seeds, args.duration, args.models)
    print(f"\n{time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
