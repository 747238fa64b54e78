"""The PNG of a replay: per joint, recorded positions against every commanded chunk.

Hold periods are shaded in every panel, numbered ``H1``, ``H2``, ... at the top,
and listed with their reasons under the panels (one colour per kind of reason).
The title carries the report's headline. matplotlib is imported inside
:func:`plot_replay` (Agg backend), so the report modules import without it.
"""

from __future__ import annotations

import os
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from relay_ros.bag.replay_report import HoldPeriod, ReplayReport, replaced_at

__all__ = ["plot_replay"]

# Longest hold reason written under the plot (longer ones end in "...").
_REASON_CHARS = 110


def plot_replay(
    report: ReplayReport,
    joint_times: np.ndarray,
    joint_positions: Mapping[str, np.ndarray],
    path: str | os.PathLike[str],
) -> Path:
    """Write a PNG: per joint, recorded positions and every commanded chunk, holds labelled."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    joints = list(report.gaps) or list(joint_positions)
    t0 = report.bag_start_s
    switches = sorted([c.stamp for c in report.chunks] + [h.stamp for h in report.holds])
    colours = _hold_colours(report.hold_periods)
    reasons = len(report.hold_periods)
    fig, axes = plt.subplots(
        len(joints),
        1,
        figsize=(10, 1.8 * len(joints) + 1.2 + 0.22 * reasons),
        sharex=True,
        squeeze=False,
    )
    for ax, joint in zip(axes[:, 0], joints):
        if joint in joint_positions:
            ax.plot(
                joint_times - t0, joint_positions[joint], color="black", lw=1.2, label="recorded"
            )
        for k, chunk in enumerate(report.chunks):
            if joint in chunk.joint_names:
                j = chunk.joint_names.index(joint)
                followed = chunk.times < replaced_at(chunk, switches)
                t, q = chunk.times - t0, chunk.positions[:, j]
                ax.plot(t, q, color="tab:blue", lw=0.8, alpha=0.3, ls="--")
                ax.plot(
                    t[followed],
                    q[followed],
                    color="tab:blue",
                    lw=1.4,
                    label="commanded (followed part solid)" if k == 0 else None,
                )
        for k, hold in enumerate(report.holds):
            if joint in hold.joint_names:
                ax.plot(
                    hold.stamp - t0,
                    hold.positions[hold.joint_names.index(joint)],
                    "x",
                    color="tab:red",
                    label="hold command" if k == 0 else None,
                )
        for k, period in enumerate(report.hold_periods):
            end = period.end if period.end is not None else report.duration_s
            ax.axvspan(period.start, end, color=colours[k], alpha=0.18)
        gap = report.gaps.get(joint)
        title = (
            joint
            if gap is None or not gap.samples
            else (f"{joint}  (mean |cmd-rec| {gap.mean_abs:.3f}, max {gap.max_abs:.3f})")
        )
        ax.set_title(title, fontsize=9, loc="left")
        ax.grid(alpha=0.3)
    _number_holds(axes[0, 0], report, colours)
    axes[0, 0].legend(loc="upper right", fontsize=8)
    axes[-1, 0].set_xlabel("bag time (s)")
    headline = "\n".join(textwrap.wrap(report.headline(), 130))
    fig.suptitle(
        f"{report.bag.name}: commanded ({report.model}, dry run) vs recorded\n{headline}",
        fontsize=9,
    )
    bottom = 0.0
    if reasons:
        lines = [
            f"H{k + 1} {_span(p, report.duration_s)}: {_short(p.reason)}"
            for k, p in enumerate(report.hold_periods)
        ]
        height_in = fig.get_size_inches()[1]
        bottom = (0.22 * reasons + 0.3) / height_in
        for k, line in enumerate(lines):
            fig.text(
                0.01,
                bottom - (0.22 * (k + 1)) / height_in,
                line,
                fontsize=7,
                color=colours[k],
                family="monospace",
            )
    fig.tight_layout(rect=(0.0, bottom, 1.0, 1.0))
    out = Path(path)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def _span(period: HoldPeriod, duration_s: float) -> str:
    end = period.end if period.end is not None else duration_s
    return f"{period.start:.2f}-{end:.2f} s"


def _short(reason: str) -> str:
    return reason if len(reason) <= _REASON_CHARS else reason[: _REASON_CHARS - 3] + "..."


def _hold_colours(periods: Sequence[HoldPeriod]) -> list[Any]:
    """One colour per kind of hold reason (its text before the first ': ')."""
    import matplotlib

    palette = matplotlib.color_sequences["tab10"]
    heads: dict[str, int] = {}
    for period in periods:
        heads.setdefault(period.reason.partition(": ")[0], len(heads))
    # Skip blue and red (chunks, hold commands) and black-ish greys.
    usable = [c for i, c in enumerate(palette) if i not in (0, 3, 7)]
    return [usable[heads[p.reason.partition(": ")[0]] % len(usable)] for p in periods]


def _number_holds(ax: Any, report: ReplayReport, colours: Sequence[Any]) -> None:
    """``H1``, ``H2``, ... above each hold period of the top panel."""
    for k, period in enumerate(report.hold_periods):
        end = period.end if period.end is not None else report.duration_s
        ax.annotate(
            f"H{k + 1}",
            xy=((period.start + end) / 2, 1.0),
            xycoords=("data", "axes fraction"),
            ha="center",
            va="bottom",
            fontsize=7,
            color=colours[k],
        )
