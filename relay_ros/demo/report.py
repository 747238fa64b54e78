"""What the user reads: the live progress line and the summary table of the runs.

`format_progress` is one line for a `DemoProgress`; `format_summary` puts the
measures of one or more `DemoResult` s side by side; `stall_intervals` derives the
holding periods from the published chunks (also drawn by `plot_demo`).
"""

from __future__ import annotations

from collections.abc import Sequence

from relay_ros.demo.errors import DemoArgumentError
from relay_ros.demo.result import DemoProgress, DemoResult

__all__ = ["format_ms", "format_progress", "format_summary", "stall_intervals"]


def format_ms(value: float | None, digits: int = 0) -> str:
    """Seconds as milliseconds with ``digits`` decimals, or ``n/a`` for None."""
    return "n/a" if value is None else f"{value * 1000:.{digits}f}"


def stall_intervals(result: DemoResult) -> list[tuple[float, float]]:
    """The periods (start, end) in seconds when the arm had no future point to follow.

    Derived from the published chunks: a chunk's last point to the next chunk's
    publication (and to the end of the run after the last chunk).
    """
    intervals = []
    for i, chunk in enumerate(result.chunks):
        nxt = result.chunks[i + 1].stamp if i + 1 < len(result.chunks) else result.duration_s
        if nxt > chunk.end:
            intervals.append((chunk.end, nxt))
    return intervals


def format_progress(p: DemoProgress) -> str:
    """One progress line (no newline), e.g.
    ``early   6.5/20.0 s  chunks 13  latency p50 81 ms  stall 0.000 s``."""
    if p.starting:
        return f"{p.request_mode:<5}  starting: waiting for the first chunk ..."
    return (
        f"{p.request_mode:<5} {p.elapsed_s:5.1f}/{p.duration_s:.1f} s  chunks {p.chunks:3d}  "
        f"latency p50 {format_ms(p.latency_p50_s)} ms  stall {p.stall_time_s:.3f} s"
    )


def _summary_rows(r: DemoResult) -> list[tuple[str, str]]:
    share = 100.0 * r.stall_time_s / r.duration_s if r.duration_s > 0 else 0.0
    sw = r.switches
    if sw is None:
        c0 = c1 = counted = "n/a"
    else:
        counted = f"{sw.moving} / {sw.at_rest}"
        ratio, p95 = sw.c0_over_step, sw.c0_p95_over_step
        c0 = "n/a" if ratio is None or p95 is None else f"{ratio:.2f} / {p95:.2f}"
        c1 = "n/a" if sw.c1_median is None else f"{sw.c1_median:.2f}"
    startup = "n/a" if r.startup_s is None else f"{r.startup_s * 1000:.0f}"
    first = "n/a" if r.first_point_distance is None else f"{r.first_point_distance:.3f}"
    if r.action_age_p50_s is None:
        age = "n/a"
    else:
        age = f"{format_ms(r.action_age_p50_s)} / {format_ms(r.action_age_max_s)}"
    task = r.task
    if task is None or task.median_m is None:
        error, on_target = "n/a", "n/a"
    else:
        error = f"{task.median_m * 100:.1f} / {(task.p90_m or 0.0) * 100:.1f}"
        on_target = f"{100.0 * (task.on_target_share or 0.0):.0f}%"
    jerk = "n/a" if r.jerk_rms is None else f"{r.jerk_rms:.0f}"
    lead = "n/a" if r.request_lead_s is None else format_ms(r.request_lead_s)
    execute = "n/a" if r.execute_horizon is None else str(r.execute_horizon)
    return [
        ("smoothing", r.smoothing.split(" (", 1)[0] or "n/a"),
        ("execute horizon / request lead [ms] (end)", f"{execute} / {lead}"),
        ("start-up: first request -> chunk [ms]", startup),
        ("start-up: refusals before it", str(r.refusals_before_first)),
        ("start-up: first point from state [rad]", first),
        ("target error med / p90 [cm]", error),
        ("time on target", on_target),
        ("chunks (received/published)", f"{r.chunks_received} / {r.chunks_published}"),
        ("requests", str(r.requests)),
        ("latency p50 / p99 [ms]", f"{format_ms(r.latency_p50_s)} / {format_ms(r.latency_p99_s)}"),
        ("stall time [s]", f"{r.stall_time_s:.3f} ({share:.1f}%)"),
        ("stall events", str(r.stall_events)),
        ("switches moving / at rest", counted),
        ("switch C0 / typical step med / p95 (moving)", c0),
        ("switch C1 med [rad/s] (moving)", c1),
        ("jerk RMS [rad/s^3] (real sample times)", jerk),
        ("observation age p50 / max [ms]", age),
        ("rejected messages", str(r.rejected)),
        ("refused by the node (whole run)", str(r.refusals)),
        *(
            [("bytes per request (uplink)", f"{r.bytes_per_request:,.0f}")]
            if r.bytes_per_request is not None
            else []
        ),
        *(
            [
                (
                    "upload / server / download p50 [ms]",
                    " / ".join(
                        format_ms(r.network.get(k)) for k in ("upload_s", "server_s", "download_s")
                    ),
                )
            ]
            if r.network
            else []
        ),
    ]


def _title(r: DemoResult, with_policy: bool) -> str:
    """Column title: mode and duration, the smoothing when runs differ, and any fault."""
    parts = [r.request_mode]
    if with_policy:
        parts.append(r.policy.smoothing)
    if r.fault:
        parts.append(r.fault)
    return f"{' '.join(parts)} ({r.duration_s:g} s)"


def format_summary(results: Sequence[DemoResult]) -> str:
    """The summary table of one or more runs side by side (one column per run).

    Raises:
        DemoArgumentError: ``results`` is empty.
    """
    if not results:
        raise DemoArgumentError("results is empty; expected at least one DemoResult")
    first = results[0]
    header = (
        f"relay_ros demo: {first.model}, simulated inference {first.latency_ms:g} ms "
        f"+/- {first.jitter_ms:g} ms"
    )
    if first.dt is not None:
        header += f", dt {first.dt * 1000:.1f} ms"
    header += f", arm tracking lag {first.tracking_lag_s * 1000:g} ms"
    if first.smoothing:
        header += f"\nsmoothing: {first.smoothing}"
    policies = {r.policy.label() for r in results}
    if len(policies) == 1:
        header += f"\n{policies.pop()}"
    if first.link is not None:
        header += f"\nlink {first.link}; frames {first.image_encoding}"
    header += "\nthe target moves from each run's first chunk on: every column sees the same world"
    titles = [_title(r, len(policies) > 1) for r in results]
    rows = [_summary_rows(r) for r in results]
    labels = [label for label, _ in rows[0]]
    label_width = max(len(label) for label in labels)
    widths = [
        max(len(title), *(len(row[i][1]) for i in range(len(labels))))
        for title, row in zip(titles, rows)
    ]
    lines = [header, ""]
    lines.append(" " * label_width + "".join(f"  {t:>{w}}" for t, w in zip(titles, widths)))
    lines.append("-" * (label_width + sum(w + 2 for w in widths)))
    for i, label in enumerate(labels):
        cells = "".join(f"  {row[i][1]:>{w}}" for row, w in zip(rows, widths))
        lines.append(f"{label:<{label_width}}{cells}")
    for r in results:
        if r.rejection_reasons:
            reasons = ", ".join(f"{k}: {v}" for k, v in sorted(r.rejection_reasons.items()))
            lines.append(f"{r.request_mode}: rejections by reason: {reasons}")
    return "\n".join(lines)
