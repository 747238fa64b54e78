"""The demo picture a robot engineer reads at a glance, as a PNG.

One column per run (early, sync), four rows:

1. **end-effector error** to the target over time (cm), the 3 cm "on target" band,
   holds shaded: is the robot doing the task?
2. **joint velocity** of the joints that move the end effector (commanded, from the
   control cycles' real times), switches dotted: stop-and-go and seams show as dips
   and spikes. The other joints carry only the reference policy's noise in this world
   and are left out (the legend says so);
3. **observation age** of the action the arm runs (ms): how old the picture behind
   each motion is;
4. **one switch zoomed** (the moving switch with the median position gap, or the
   first switch): the command of those joints around it, with the old and the new
   chunk's points, so a seam or a jump is visible at its own scale.

The title carries the latency measured in the run (not the one configured), the
smoothing the node ran and the server's kind. matplotlib is imported inside
`plot_demo` (Agg backend), so that importing the demo package needs neither
matplotlib nor a display.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from relay_ros.demo.errors import DemoArgumentError
from relay_ros.demo.report import format_ms, stall_intervals
from relay_ros.demo.result import PRE_ROLL_S, DemoResult

__all__ = ["plot_demo", "zoomed_switch"]

_JOINT_COLORS = ("tab:blue", "tab:orange")
_ZOOM_S = 0.2  # seconds either side of the zoomed switch


def zoomed_switch(result: DemoResult) -> float | None:
    """The switch the zoom shows (s since the first chunk): the moving switch with the
    median position gap, else the first switch after the start, else None."""
    moving = [s for s in result.steps if not s.at_rest and s.t > 0.0]
    if moving:
        ordered = sorted(moving, key=lambda s: s.position_gap)
        return float(ordered[len(ordered) // 2].t)
    later = [float(t) for t in result.switch_times if t > 0.0]
    return later[0] if later else None


def _velocities(times: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """Velocity (N,) from positions on the real sample times (NaN-safe)."""
    if times.size < 2:
        return np.zeros_like(positions)
    return np.gradient(positions, times)


def _shade_holds(ax: Any, result: DemoResult) -> None:
    for start, end in stall_intervals(result):
        ax.axvspan(start, end, color="tab:red", alpha=0.15, lw=0)


def _error_row(ax: Any, r: DemoResult) -> None:
    task = r.task
    if task is None or task.errors_m.size == 0:
        ax.text(0.5, 0.5, "no task measure", ha="center", transform=ax.transAxes)
        return
    measured = (r.times >= 0.0) & (r.times <= r.duration_s)
    times = r.times[measured][: task.errors_m.size]
    ax.axhspan(0.0, task.on_target_m * 100.0, color="tab:green", alpha=0.12, lw=0)
    ax.plot(times, task.errors_m[: times.size] * 100.0, color="black", lw=1.0)
    _shade_holds(ax, r)
    median = (task.median_m or 0.0) * 100.0
    ax.set_ylabel("end effector\nto target [cm]", fontsize=8)
    ax.set_title(
        f"{r.request_mode} requests{f' ({r.fault})' if r.fault else ''}: error median "
        f"{median:.1f} cm, on target {100.0 * (task.on_target_share or 0.0):.0f}%, "
        f"refused {r.refusals}, stall {r.stall_time_s:.2f} s",
        fontsize=9,
    )


def _velocity_row(ax: Any, r: DemoResult) -> None:
    for color, joint in zip(_JOINT_COLORS, r.task_joints):
        j = r.joint_names.index(joint)
        ax.plot(r.times, _velocities(r.times, r.commanded[:, j]), color=color, lw=0.9)
    for t in r.switch_times:
        ax.axvline(t, color="0.6", lw=0.5, ls=":")
    _shade_holds(ax, r)
    ax.set_ylabel("joint velocity\n[rad/s]", fontsize=8)


def _age_row(ax: Any, r: DemoResult) -> None:
    ax.plot(r.times, r.ages * 1000.0, color="tab:purple", lw=1.0)
    _shade_holds(ax, r)
    finite = r.ages[np.isfinite(r.ages) & (r.times >= 0.0)]
    if finite.size:
        ax.axhline(float(np.median(finite)) * 1000.0, color="tab:purple", lw=0.6, ls="--")
    ax.set_ylabel("observation\nage [ms]", fontsize=8)
    ax.set_xlabel("time since the first chunk [s]", fontsize=8)


def _zoom_row(ax: Any, r: DemoResult) -> None:
    at = zoomed_switch(r)
    if at is None:
        ax.text(0.5, 0.5, "no switch to show", ha="center", transform=ax.transAxes)
        return
    window = (r.times >= at - _ZOOM_S) & (r.times <= at + _ZOOM_S)
    index = int(np.argmin(np.abs(r.times - at)))
    earlier = [c for c in r.chunks if c.stamp <= at + 1e-3]
    shown = list(zip(("o", "x")[2 - len(earlier[-2:]) :], earlier[-2:]))  # old, new
    for color, joint in zip(_JOINT_COLORS, r.task_joints):
        j = r.joint_names.index(joint)
        base = r.commanded[index, j]
        ax.plot(
            (r.times[window] - at) * 1000.0,
            r.commanded[window, j] - base,
            color=color,
            lw=2.0,
            label=f"{joint} commanded",
        )
        for style, chunk in shown:
            near = (chunk.times >= at - _ZOOM_S) & (chunk.times <= at + _ZOOM_S)
            ax.plot(
                (chunk.times[near] - at) * 1000.0,
                chunk.positions[near, j] - base,
                color=color,
                lw=0.6,
                ls="--",
                marker=style,
                ms=3,
            )
    ax.axvline(0.0, color="0.4", lw=0.8, ls=":")
    ax.set_xlabel(f"ms around the switch at {at:.2f} s (o old chunk, x new chunk)", fontsize=8)
    ax.set_ylabel("position - value\nat the switch [rad]", fontsize=8)


def plot_demo(results: Sequence[DemoResult], path: str | os.PathLike[str]) -> Path:
    """Write the demo picture (module docstring) as a PNG and return its path.

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
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    n_cols = len(results)
    fig = Figure(figsize=(max(11.0, 7.0 * n_cols), 10.5), layout="constrained")
    grid = fig.add_gridspec(4, n_cols, height_ratios=[1.0, 1.0, 0.8, 1.2])
    for c, r in enumerate(results):
        top = fig.add_subplot(grid[0, c])
        rows = [top] + [fig.add_subplot(grid[i, c], sharex=top) for i in (1, 2)]
        _error_row(rows[0], r)
        _velocity_row(rows[1], r)
        _age_row(rows[2], r)
        for ax in rows:
            ax.set_xlim(-PRE_ROLL_S, r.duration_s)
            ax.tick_params(labelsize=7)
        for ax in rows[:2]:
            ax.tick_params(labelbottom=False)
        zoom = fig.add_subplot(grid[3, c])
        _zoom_row(zoom, r)
        zoom.tick_params(labelsize=7)
    first = results[0]
    others = [j for j in first.joint_names if j not in first.task_joints]
    handles = [
        Line2D([], [], color=color, lw=1.2, label=f"{joint}")
        for color, joint in zip(_JOINT_COLORS, first.task_joints)
    ] + [
        Line2D([], [], color="0.6", lw=0.5, ls=":", label="chunk switch"),
        Patch(color="tab:red", alpha=0.15, label="holding (no future point)"),
        Patch(color="tab:green", alpha=0.12, label="on target (3 cm)"),
    ]
    fig.legend(handles=handles, loc="outside lower center", ncols=len(handles), fontsize=8)
    latencies = np.concatenate([r.latencies_s for r in results])
    measured = (
        f"measured latency p50 {format_ms(float(np.percentile(latencies, 50)))} ms, "
        f"p99 {format_ms(float(np.percentile(latencies, 99)))} ms"
        if latencies.size
        else "no latency measured"
    )
    smoothing = first.smoothing.split(" (", 1)[0] or "n/a"
    server = "with" if first.policy.advertises_prefix else "without"
    fig.suptitle(
        f"relay_ros demo: {first.model}, {measured}\nsmoothing {smoothing}, server "
        f"{server} action_prefix, arm lag {first.tracking_lag_s * 1000:g} ms\n"
        f"velocities of {', '.join(first.task_joints)} (they move the end effector); "
        f"{', '.join(others)} carry only the policy's noise here: left out",
        fontsize=10,
    )
    fig.savefig(out, dpi=100)
    return out
