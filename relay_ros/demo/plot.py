"""The demo picture: commanded vs followed joint positions and latencies, as a PNG.

matplotlib is imported inside `plot_demo` (with the Agg backend), so that importing
the demo package needs neither matplotlib nor a display.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from relay_ros.demo.errors import DemoArgumentError
from relay_ros.demo.report import format_ms, stall_intervals
from relay_ros.demo.result import PRE_ROLL_S, DemoResult

__all__ = ["plot_demo"]

_MODE_COLORS = {"early": "tab:blue", "sync": "tab:orange"}


def plot_demo(results: Sequence[DemoResult], path: str | os.PathLike[str]) -> Path:
    """Write the demo picture as a PNG and return its path.

    One column per run; one row per joint with the followed position (black), every
    published chunk (thin coloured lines, alternating colours, including the part a
    later chunk replaced), chunk switches (dotted verticals), holding periods (red
    bands) and the joint limits when they are near; a last row with the latency
    histograms of all runs.

    Raises:
        DemoArgumentError: ``results`` is empty or the runs have different joints.
    """
    if not results:
        raise DemoArgumentError("results is empty; expected at least one DemoResult")
    joints = results[0].joint_names
    for r in results[1:]:
        if r.joint_names != joints:
            raise DemoArgumentError(
                f"runs have different joints: {list(r.joint_names)} vs {list(joints)}"
            )
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    n_rows = len(joints) + 1
    n_cols = len(results)
    fig = Figure(figsize=(7.5 * n_cols, 1.5 * len(joints) + 3.2), layout="constrained")
    grid = fig.add_gridspec(n_rows, n_cols, height_ratios=[1.0] * len(joints) + [1.6])
    chunk_colors = ("tab:blue", "tab:green")
    for c, r in enumerate(results):
        stalls = stall_intervals(r)
        share = 100.0 * r.stall_time_s / r.duration_s if r.duration_s > 0 else 0.0
        axes = None
        for j, joint in enumerate(joints):
            ax = fig.add_subplot(grid[j, c], sharex=axes)
            axes = axes or ax
            for start, end in stalls:
                ax.axvspan(start, end, color="tab:red", alpha=0.15, lw=0)
            for t in r.switch_times:
                ax.axvline(t, color="0.6", lw=0.5, ls=":")
            for k, chunk in enumerate(r.chunks):
                ax.plot(
                    chunk.times,
                    chunk.positions[:, j],
                    color=chunk_colors[k % 2],
                    lw=0.9,
                    alpha=0.7,
                )
            ax.plot(r.times, r.followed[:, j], color="black", lw=1.4)
            data = [r.followed[:, j]] + [ch.positions[:, j] for ch in r.chunks]
            values = np.concatenate(data) if data else np.zeros(0)
            values = values[np.isfinite(values)]
            if values.size:
                low, high = float(values.min()), float(values.max())
                margin = max(0.15, 0.15 * (high - low))
                for limit in r.joint_limits[joint]:
                    if low - margin <= limit <= high + margin:
                        ax.axhline(limit, color="tab:red", lw=0.8, ls="--")
            ax.set_ylabel(joint, fontsize=8)
            ax.tick_params(labelsize=7)
            ax.set_xlim(-PRE_ROLL_S, r.duration_s)
            if j == 0:
                task = ""
                if r.task is not None and r.task.on_target_share is not None:
                    task = f", on target {100.0 * r.task.on_target_share:.0f}%"
                fault = f" ({r.fault})" if r.fault else ""
                ax.set_title(
                    f"{r.request_mode} requests{fault}: stall {r.stall_time_s:.2f} s "
                    f"({share:.0f}%), {r.chunks_published} chunks{task}",
                    fontsize=10,
                )
            if j < len(joints) - 1:
                ax.tick_params(labelbottom=False)
            else:
                ax.set_xlabel("time since the first chunk [s]", fontsize=8)
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    handles = [
        Line2D([], [], color="black", lw=1.4, label="followed (/joint_states)"),
        Line2D([], [], color=chunk_colors[0], lw=0.9, label="commanded chunks (~/preview)"),
        Line2D([], [], color="0.6", lw=0.5, ls=":", label="chunk switch"),
        Patch(color="tab:red", alpha=0.15, label="holding (no future point)"),
        Line2D([], [], color="tab:red", lw=0.8, ls="--", label="joint limit"),
    ]
    fig.legend(handles=handles, loc="outside lower center", ncols=5, fontsize=8)

    hist = fig.add_subplot(grid[n_rows - 1, :])
    all_ms = np.concatenate([r.latencies_s for r in results]) * 1000.0
    if all_ms.size:
        bins = np.linspace(float(all_ms.min()) - 1.0, float(all_ms.max()) + 1.0, 40)
        for r in results:
            if r.latencies_s.size == 0:
                continue
            hist.hist(
                r.latencies_s * 1000.0,
                bins=bins,
                alpha=0.55,
                color=_MODE_COLORS.get(r.request_mode),
                label=f"{r.request_mode}: p50 {format_ms(r.latency_p50_s)} ms, "
                f"p99 {format_ms(r.latency_p99_s)} ms, n={r.latencies_s.size}",
            )
        hist.legend(fontsize=8)
    hist.set_xlabel("observation -> reply latency [ms]", fontsize=8)
    hist.set_ylabel("requests", fontsize=8)
    hist.tick_params(labelsize=7)
    fig.suptitle(
        f"relay_ros demo: {results[0].model}, server latency {results[0].latency_ms:g} "
        f"+/- {results[0].jitter_ms:g} ms; joint positions in rad (m for prismatic joints)",
        fontsize=11,
    )
    fig.savefig(out, dpi=100)
    return out
