"""The PNG of a replay: per joint, recorded positions against every commanded chunk.

matplotlib is imported inside :func:`plot_replay` (Agg backend), so the report
modules import without it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from relay_ros.bag.replay_report import ReplayReport, replaced_at

__all__ = ["plot_replay"]


def plot_replay(
    report: ReplayReport,
    joint_times: np.ndarray,
    joint_positions: Mapping[str, np.ndarray],
    path: str | os.PathLike[str],
) -> Path:
    """Write a PNG: per joint, recorded positions and every commanded chunk, holds shaded."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    joints = list(report.gaps) or list(joint_positions)
    t0 = report.bag_start_s
    switches = sorted([c.stamp for c in report.chunks] + [h.stamp for h in report.holds])
    fig, axes = plt.subplots(
        len(joints), 1, figsize=(10, 1.8 * len(joints) + 1), sharex=True, squeeze=False
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
                    label="hold" if k == 0 else None,
                )
        for k, period in enumerate(report.hold_periods):
            end = period.end if period.end is not None else report.duration_s
            ax.axvspan(
                period.start,
                end,
                color="tab:orange",
                alpha=0.15,
                label="holding" if k == 0 else None,
            )
        gap = report.gaps.get(joint)
        title = (
            joint
            if gap is None or not gap.samples
            else (f"{joint}  (mean |cmd-rec| {gap.mean_abs:.3f}, max {gap.max_abs:.3f})")
        )
        ax.set_title(title, fontsize=9, loc="left")
        ax.grid(alpha=0.3)
    axes[0, 0].legend(loc="upper right", fontsize=8)
    axes[-1, 0].set_xlabel("bag time (s)")
    fig.suptitle(f"{report.bag.name}: commanded ({report.model}, dry run) vs recorded")
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out
