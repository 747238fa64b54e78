"""A fair motion measure: paired runs of the node's StreamingCore on the same world.

Runs `relay_ros.sim.streaming_loop` (world cameras, the reference visual policy with
chunk noise, policy_node's StreamingCore with config/<model>.yaml, a network,
simulated joint_trajectory_controllers with jittered cycles and a lagging arm) on a
synthetic clock. Every variant runs on the same seeds; the target moves on the
world's time from the first published chunk, and every random draw has its own
seeded stream per request (chunk noise, inference time, link), so two variants of a
seed see the same world and the same draws: differences are the variants'. Each
cell is the median over the seeds (with the spread min..max where it matters);
"paired" is the per-seed difference, "wins" the seeds where the first is lower.

The server is the seeds' (no ``action_prefix`` extension) unless a table says
otherwise. Every run starts at full speed (``LoopRun.ramp_in_s`` 0): the tables
measure the switches; bench/ramp_in.py measures the node's gentle start. "default"
is the shipped configuration (early requests, smoothing auto, automatic lead and
execute horizon; ``ramp_in_s`` aside); "sync" the same with ``request_mode: sync``
(E = H/2, its smoothing too), "sync, none" openpi's ActionChunkBroker (no smoothing).

Tables:

1. default vs sync, server without the prefix, the arm exact and lagging 40 ms;
2. smoothing strategies on the same runs (early, automatic timing, exact arm);
3. a server with the prefix: prefix (automatic and fixed E) against the splice;
4. timing: the automatic lead and E against the earlier fixed ones, observation age
   against its physical bound (the median latency plus one control period);
5. the controller the user runs (lagging arm): Jazzy with and without
   ``interpolate_from_desired_state``, ros2_controllers 2026 ``allow_trajectory_replacement``;
6. start-up; 7. GR00T; 8. observation timing.

    .venv/bin/python bench/motion.py [--seeds 0 .. 9] [--duration 10] [--quick: tables 1-3]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import replace

import numpy as np

from relay_ros.pipeline.adaptive_timing import AdaptiveTiming
from relay_ros.sim.streaming_loop import LoopRun, LoopRunResult, run_streaming_loop

LINKS: tuple[tuple[str, float, str | None], ...] = (
    ("80 ms", 0.08, None),
    ("200 ms", 0.2, None),
    ("300 ms", 0.3, None),
    ("lte + 80 ms", 0.08, "lte"),
)
ARMS: tuple[tuple[str, float], ...] = (("exact", 0.0), ("lag 40 ms", 0.04))
#: The earlier fixed timing: lead at the p95 latency + 50 ms, E = H/2 (25 of 50).
FIXED_LEAD = AdaptiveTiming(lead_percentile=95.0, lead_margin_s=0.05)
#: A refusal of the segment from where the check takes the controller to be to the
#: first point (the check starts it where the user's controller does: from its
#: command with interpolate_from_desired_state, whatever a healthy arm lags).
MEASURED_START = "from where the controller is"
CONTROL_PERIOD_S = 0.01

Metric = Callable[[LoopRunResult], float | None]


def runs(base: LoopRun, seeds: Sequence[int]) -> list[LoopRunResult]:
    return [run_streaming_loop(replace(base, seed=s)) for s in seeds]


def values(results: list[LoopRunResult], metric: Metric) -> np.ndarray:
    return np.array([np.nan if (v := metric(r)) is None else float(v) for r in results])


def med(results: list[LoopRunResult], metric: Metric, fmt: str, spread: bool = False) -> str:
    v = values(results, metric)
    if np.all(np.isnan(v)):
        return "n/a"
    text = format(float(np.nanmedian(v)), fmt)
    if spread:
        text += f" ({format(float(np.nanmin(v)), fmt)}..{format(float(np.nanmax(v)), fmt)})"
    return text


def paired(a: list[LoopRunResult], b: list[LoopRunResult], metric: Metric, fmt: str) -> str:
    """Median and range over seeds of ``metric(a) - metric(b)``."""
    d = values(a, metric) - values(b, metric)
    if np.all(np.isnan(d)):
        return "n/a"
    lo, hi = np.nanmin(d), np.nanmax(d)
    mid = format(float(np.nanmedian(d)), fmt)
    return f"{mid} ({format(float(lo), fmt)}..{format(float(hi), fmt)})"


def wins(a: list[LoopRunResult], b: list[LoopRunResult], metric: Metric) -> str:
    """Seeds on which ``a`` is lower than ``b``."""
    return f"{int(np.sum(values(a, metric) < values(b, metric)))}/{len(a)}"


def total(results: list[LoopRunResult], metric: Callable[[LoopRunResult], int]) -> int:
    return int(sum(metric(r) for r in results))


def err_cm(r: LoopRunResult) -> float | None:
    return None if r.task.median_m is None else r.task.median_m * 100.0


def on_pct(r: LoopRunResult) -> float | None:
    share = r.task.on_target_share
    return None if share is None else share * 100.0


def jerk(r: LoopRunResult) -> float | None:
    return r.jerk_rms


def c0(r: LoopRunResult) -> float | None:
    return r.switches.c0_over_step


def c0_p95(r: LoopRunResult) -> float | None:
    return r.switches.c0_p95_over_step


def c1(r: LoopRunResult) -> float | None:
    return r.switches.c1_median


def age_ms(r: LoopRunResult) -> float | None:
    return None if r.age_p50_s is None else r.age_p50_s * 1000.0


def bound_ms(r: LoopRunResult) -> float | None:
    """The physical bound of the observation age: latency p50 + one control period."""
    return None if r.latency_p50_s is None else (r.latency_p50_s + CONTROL_PERIOD_S) * 1000.0


def age_ratio(r: LoopRunResult) -> float | None:
    a, b = age_ms(r), bound_ms(r)
    return None if a is None or b is None else a / b


def measured_start(r: LoopRunResult) -> int:
    return sum(1 for reason in r.refusal_reasons if MEASURED_START in reason)


def refused(results: list[LoopRunResult]) -> str:
    """Refusals, with those of the first segment (`MEASURED_START`) in brackets."""
    n, m = total(results, lambda r: r.refusals), total(results, measured_start)
    return f"{n} ({m})" if m else str(n)


def table(title: str, header: Sequence[str]) -> None:
    print(f"\n{title}\n")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))


def row(cells: Sequence[str]) -> None:
    print("| " + " | ".join(cells) + " |")


def default_vs_sync(seeds: Sequence[int], duration: float) -> dict[str, list[LoopRunResult]]:
    table(
        "1. default vs sync, server without action_prefix (paired = default - sync; refusals: "
        "total (of them, on the segment from where the controller is to the first point))",
        [
            "arm",
            "link",
            "error default [cm]",
            "error sync [cm]",
            "error sync, none [cm]",
            "paired error [cm]",
            "wins",
            "jerk default / sync [rad/s^3]",
            "C0 / step med / p95",
            "refusals default / sync",
            "stall default [s]",
            "obs. age p50 [ms] / bound",
        ],
    )
    kept: dict[str, list[LoopRunResult]] = {}
    for arm, lag in ARMS:
        for label, latency, link in LINKS:
            base = LoopRun(latency_s=latency, link=link, duration_s=duration, tracking_lag_s=lag)
            default = runs(base, seeds)
            sync = runs(replace(base, request_mode="sync"), seeds)
            broker = runs(replace(base, request_mode="sync", smoothing="none"), seeds)
            kept[f"{arm} {label}"] = default
            kept[f"{arm} {label} sync"] = sync
            row(
                [
                    arm,
                    label,
                    med(default, err_cm, ".2f"),
                    med(sync, err_cm, ".2f"),
                    med(broker, err_cm, ".2f"),
                    paired(default, sync, err_cm, "+.2f"),
                    wins(default, sync, err_cm),
                    f"{med(default, jerk, '.0f')} / {med(sync, jerk, '.0f')}",
                    f"{med(default, c0, '.2f')} / {med(default, c0_p95, '.2f')}",
                    f"{refused(default)} / {refused(sync)}",
                    med(default, lambda r: r.stall_time_s, ".2f"),
                    f"{med(default, age_ms, '.0f')} / {med(default, bound_ms, '.0f')} "
                    f"(x{med(default, age_ratio, '.2f')})",
                ]
            )
    return kept


STRATEGIES: tuple[str, ...] = ("splice", "none", "crossfade", "lerobot_average", "act_ensemble")


def smoothing_table(seeds: Sequence[int], duration: float) -> None:
    table(
        "2. smoothing strategies (early, automatic timing, exact arm, server without "
        "action_prefix; paired = this - splice; C0 = position gap at a moving switch over a "
        "typical step, C1 = velocity gap)",
        [
            "link",
            "smoothing",
            "error [cm]",
            "paired error [cm]",
            "on target",
            "jerk [rad/s^3]",
            "C0 / step med / p95",
            "C1 med [rad/s]",
            "switches moving / at rest",
            "refusals",
        ],
    )
    for label, latency, link in LINKS[:2]:
        base = LoopRun(latency_s=latency, link=link, duration_s=duration, tracking_lag_s=0.0)
        splice = runs(replace(base, smoothing="splice"), seeds)
        variants = [(name, replace(base, smoothing=name)) for name in STRATEGIES[1:]]
        variants.append(("none, unchecked", replace(base, smoothing="none", unchecked=True)))
        for name, results in [("splice", splice)] + [(n, runs(b, seeds)) for n, b in variants]:
            moving = total(results, lambda r: r.switches.moving)
            rest = total(results, lambda r: r.switches.at_rest)
            row(
                [
                    label,
                    name,
                    med(results, err_cm, ".2f", True),
                    paired(results, splice, err_cm, "+.2f"),
                    med(results, on_pct, ".0f") + "%",
                    med(results, jerk, ".0f", True),
                    f"{med(results, c0, '.2f')} / {med(results, c0_p95, '.2f')}",
                    med(results, c1, ".2f"),
                    f"{moving} / {rest}",
                    refused(results),
                ]
            )


def prefix_table(seeds: Sequence[int], duration: float) -> None:
    table(
        "3. a server that advertises action_prefix (exact arm; paired = this - splice)",
        [
            "link",
            "smoothing",
            "E",
            "error [cm]",
            "paired error [cm]",
            "wins over splice",
            "jerk [rad/s^3]",
            "C0 / step med / p95",
            "refusals",
        ],
    )
    for label, latency, link in (LINKS[0], LINKS[1], LINKS[3]):
        base = LoopRun(
            latency_s=latency,
            link=link,
            duration_s=duration,
            tracking_lag_s=0.0,
            server_prefix=True,
        )
        splice = runs(base, seeds)
        # The prefix keeps E = H/2 when automatic (the server sizes its soft region
        # from E), so its automatic E is 25.
        variants = [
            ("splice (auto)", "auto", splice),
            ("prefix", "auto (25)", runs(replace(base, smoothing="prefix"), seeds)),
        ]
        for name, e, results in variants:
            row(
                [
                    label,
                    name,
                    e,
                    med(results, err_cm, ".2f", True),
                    paired(results, splice, err_cm, "+.2f"),
                    "-" if results is splice else wins(results, splice, err_cm),
                    med(results, jerk, ".0f"),
                    f"{med(results, c0, '.2f')} / {med(results, c0_p95, '.2f')}",
                    refused(results),
                ]
            )


def timing_table(seeds: Sequence[int], duration: float) -> None:
    table(
        "4. timing (early, splice, exact arm; paired = this - automatic; bound = latency p50 "
        "+ one control period)",
        [
            "link",
            "lead / E",
            "error [cm]",
            "paired error [cm]",
            "wins over automatic",
            "obs. age p50 [ms] / bound",
            "E (end)",
            "requests / s",
            "jerk [rad/s^3]",
            "stall [s]",
        ],
    )
    for label, latency, link in (LINKS[0], LINKS[1], LINKS[3]):
        base = LoopRun(latency_s=latency, link=link, duration_s=duration, tracking_lag_s=0.0)
        auto = runs(base, seeds)
        variants = [
            ("p50 / automatic (default)", auto),
            ("p50 / 25", runs(replace(base, execute_horizon=25), seeds)),
            (
                "p95 + 50 ms / 25 (earlier)",
                runs(replace(base, execute_horizon=25, timing=FIXED_LEAD), seeds),
            ),
        ]
        for name, results in variants:
            row(
                [
                    label,
                    name,
                    med(results, err_cm, ".2f", True),
                    paired(results, auto, err_cm, "+.2f"),
                    "-" if results is auto else wins(results, auto, err_cm),
                    f"{med(results, age_ms, '.0f')} / {med(results, bound_ms, '.0f')} "
                    f"(x{med(results, age_ratio, '.2f')})",
                    med(results, lambda r: r.execute_horizon, ".0f"),
                    med(results, lambda r: r.requests / duration, ".1f"),
                    med(results, jerk, ".0f"),
                    med(results, lambda r: r.stall_time_s, ".2f"),
                ]
            )


CONTROLLERS: tuple[tuple[str, dict[str, bool]], ...] = (
    ("Jazzy, interpolate_from_desired_state", {}),
    ("Jazzy default (from the measured state)", {"interpolate_from_desired_state": False}),
    ("2026 allow_trajectory_replacement", {"allow_trajectory_replacement": True}),
)


def controller_table(seeds: Sequence[int], duration: float) -> None:
    table(
        "5. the controller the user runs (arm lag 40 ms; paired = default - sync on that "
        "controller)",
        [
            "link",
            "controller",
            "error default / sync [cm]",
            "paired error [cm]",
            "wins",
            "jerk default / sync [rad/s^3]",
            "C0 / step med / p95",
            "refusals default / sync",
        ],
    )
    for label, latency, link in LINKS[:2]:
        for name, settings in CONTROLLERS:
            base = LoopRun(latency_s=latency, link=link, duration_s=duration, **settings)
            default = runs(base, seeds)
            sync = runs(replace(base, request_mode="sync"), seeds)
            row(
                [
                    label,
                    name,
                    f"{med(default, err_cm, '.2f')} / {med(sync, err_cm, '.2f')}",
                    paired(default, sync, err_cm, "+.2f"),
                    wins(default, sync, err_cm),
                    f"{med(default, jerk, '.0f')} / {med(sync, jerk, '.0f')}",
                    f"{med(default, c0, '.2f')} / {med(default, c0_p95, '.2f')}",
                    f"{refused(default)} / {refused(sync)}",
                ]
            )


def startup_table(kept: dict[str, list[LoopRunResult]]) -> None:
    table(
        "6. start-up (exact arm; first request -> first published chunk, median (min..max); "
        "default / sync)",
        [
            "link",
            "first chunk [ms]",
            "its round trip [ms]",
            "refusals before it",
            "first point from state [rad]",
        ],
    )
    for label, _, _ in LINKS:
        pair = [kept[f"exact {label}"], kept[f"exact {label} sync"]]
        row(
            [
                label,
                " / ".join(
                    med(rs, lambda r: r.startup.first_chunk_s * 1e3, ".0f", True) for rs in pair
                ),
                " / ".join(med(rs, lambda r: r.startup.round_trip_s * 1e3, ".0f") for rs in pair),
                " / ".join(str(total(rs, lambda r: r.startup.refusals)) for rs in pair),
                " / ".join(med(rs, lambda r: r.startup.first_point_distance, ".3f") for rs in pair),
            ]
        )


def groot_table(seeds: Sequence[int], duration: float) -> None:
    table(
        "7. GR00T (H = 16 at 30 Hz, so100; exact arm, server without action_prefix; paired = "
        "default - sync)",
        [
            "link",
            "error default / sync [cm]",
            "paired error [cm]",
            "wins",
            "jerk default / sync",
            "C0 / step med / p95",
            "E (end)",
            "refusals",
        ],
    )
    for label, latency, link in LINKS[:2]:
        base = LoopRun(
            model="groot", latency_s=latency, link=link, duration_s=duration, tracking_lag_s=0.0
        )
        default = runs(base, seeds)
        sync = runs(replace(base, request_mode="sync"), seeds)
        row(
            [
                label,
                f"{med(default, err_cm, '.2f')} / {med(sync, err_cm, '.2f')}",
                paired(default, sync, err_cm, "+.2f"),
                wins(default, sync, err_cm),
                f"{med(default, jerk, '.0f')} / {med(sync, jerk, '.0f')}",
                f"{med(default, c0, '.2f')} / {med(default, c0_p95, '.2f')}",
                med(default, lambda r: r.execute_horizon, ".0f"),
                f"{refused(default)} / {refused(sync)}",
            ]
        )


def observation_table(seeds: Sequence[int], duration: float) -> None:
    table(
        "8. observation timing (default configuration, exact arm; paired = this - frame_arrival)",
        ["link", "timing", "error [cm]", "paired error [cm]", "on target", "obs. age p50 [ms]"],
    )
    for label, latency, link in LINKS[:2]:
        base = LoopRun(latency_s=latency, link=link, duration_s=duration, tracking_lag_s=0.0)
        reference = runs(replace(base, observation_timing="frame_arrival"), seeds)
        for timing in ("frame_arrival", "frame", "request"):
            results = (
                reference
                if timing == "frame_arrival"
                else runs(replace(base, observation_timing=timing), seeds)
            )
            row(
                [
                    label,
                    timing,
                    med(results, err_cm, ".2f"),
                    paired(results, reference, err_cm, "+.2f"),
                    med(results, on_pct, ".0f") + "%",
                    med(results, age_ms, ".0f"),
                ]
            )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, nargs="+", default=list(range(10)))
    p.add_argument("--duration", type=float, default=10.0, help="simulated s after the start")
    p.add_argument("--quick", action="store_true", help="tables 1-3 only")
    args = p.parse_args(argv)
    started = time.perf_counter()
    print(
        f"StreamingCore on the visual world, chunk noise 1, inference jitter +-20 ms, "
        f"controller cycles 100 Hz +-1.5 ms, {args.duration:g} s per run after the first "
        f"chunk, seeds {args.seeds}; pi05 (H=50 at 50 Hz) unless said"
    )
    kept = default_vs_sync(args.seeds, args.duration)
    smoothing_table(args.seeds, args.duration)
    prefix_table(args.seeds, args.duration)
    if not args.quick:
        timing_table(args.seeds, args.duration)
        controller_table(args.seeds, args.duration)
        startup_table(kept)
        groot_table(args.seeds, args.duration)
        observation_table(args.seeds, args.duration)
    print(f"\n{time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
