"""The outcome of a replay: what policy_node would have commanded, and how well.

:class:`ReplayReport` (formatted by :meth:`ReplayReport.format`, the text
``relay-ros replay`` prints) holds the report types :class:`Chunk`,
:class:`HoldCommand`, :class:`HoldPeriod` and :class:`JointGap`.
:func:`read_preview` reads chunks and holds back from the recorded
``~/preview`` topic; :func:`command_gaps` compares the commanded positions with
the recorded joint states. Plain Python over the output bag, no rclpy.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from relay_ros.bag.reader import BagReader
from relay_ros.pipeline.trajectory import (
    T_OBS_PREFIX,
    JointTrajectoryData,
    read_joint_trajectory,
)

__all__ = [
    "PREVIEW_TAG",
    "Chunk",
    "HoldCommand",
    "HoldPeriod",
    "JointGap",
    "ReplayReport",
    "INPUT_REFUSAL_PREFIXES",
    "command_gaps",
    "is_input_refusal",
    "overall_gap",
    "read_preview",
    "replaced_at",
]

#: Prefix of ``header.frame_id`` on the node's chunk messages (``t_obs=<seconds>``).
PREVIEW_TAG = T_OBS_PREFIX

#: A hold's messages to its controllers are published back to back: those recorded
#: within this long of the first (seconds), one per controller, are one event.
_HOLD_EVENT_S = 0.05


@dataclass(frozen=True)
class Chunk:
    """One chunk the node would have commanded (all controllers of one publication).

    Attributes:
        stamp: ``header.stamp``, bag time in seconds (absolute).
        t_obs: Time of the observation it was computed from, bag time in seconds.
        joint_names: Commanded joints, controllers in configuration order.
        times: (N,) absolute bag time of each point (stamp + time_from_start), s.
        positions: (N, J) commanded positions (rad, or m for prismatic joints).
    """

    stamp: float
    t_obs: float
    joint_names: tuple[str, ...]
    times: np.ndarray
    positions: np.ndarray

    def action_indices(self, dt: float) -> np.ndarray:
        """Index of each point in the policy's chunk: ``round((time - t_obs) / dt)``."""
        return np.rint((self.times - self.t_obs) / dt).astype(int)


@dataclass(frozen=True)
class HoldCommand:
    """A hold event: the node's one-point "stop at ``positions``" messages of one event.

    One per event, whatever the number of controllers it was sent to; ``stamp`` is
    when it was sent (bag time, s: a hold's ``header.stamp`` is zero).
    """

    stamp: float
    joint_names: tuple[str, ...]
    positions: np.ndarray


@dataclass(frozen=True)
class HoldPeriod:
    """An interval in which the node held position instead of streaming chunks.

    ``start``/``end`` are seconds after the bag start (``end`` None: still holding
    at the end of the bag); ``reason`` is the node's first sentence for it.
    """

    reason: str
    start: float
    end: float | None


@dataclass(frozen=True)
class JointGap:
    """|commanded(t) - recorded(t)| for one joint over the commanded points.

    Recorded joint states are interpolated linearly (by bag time) at the time
    of every commanded point inside the recorded range. Units of the joint
    (rad or m). ``samples`` is 0 (and the numbers NaN) if nothing overlapped.
    """

    joint: str
    mean_abs: float
    max_abs: float
    samples: int


@dataclass
class ReplayReport:
    """The outcome of a replay (times in seconds after the bag start unless noted).

    Attributes:
        bag: Input bag path.
        output: Output bag path (holds ``~/preview``, controller topics, diagnostics).
        model: Policy model ID.
        url: Policy server URL used.
        seed: Sampling seed (None: random sampling).
        rate: Playback rate factor.
        bag_start_ns: Bag time of the first message (absolute, ns).
        duration_s: Bag length.
        played: Messages played per topic.
        bag_topics: Every topic of the input bag with its message count.
        recorded: Messages recorded into the output bag per topic.
        preview_topic: The node's preview topic.
        dt: Control period of the chunks (s).
        chunks: Chunks the node would have commanded, in publication order.
        holds: Hold commands the node published.
        hold_periods: When and why the node held position.
        refusals: Refused chunks, frames and observations per reason (numbers in
            reasons are ``#``); :attr:`chunk_refusal_count` counts the chunks.
        counts: The node's counters at the end (requests, chunks_published, ...).
        latency_ms: Latency statistics (count, mean, p50, p95, p99, max), ms.
        gaps: Per joint gap between commanded and recorded positions.
        diagnostics: Values of the node's last ``/diagnostics`` status.
        policy: The reference server's policy (``"recorded"`` or ``"synthetic"``),
            None for a server given with ``url``.
    """

    bag: Path
    output: Path
    model: str
    url: str
    seed: int | None
    rate: float
    bag_start_ns: int
    duration_s: float
    played: dict[str, int]
    bag_topics: dict[str, int]
    recorded: dict[str, int]
    preview_topic: str
    dt: float | None
    chunks: list[Chunk] = field(default_factory=list)
    holds: list[HoldCommand] = field(default_factory=list)
    hold_periods: list[HoldPeriod] = field(default_factory=list)
    refusals: dict[str, int] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    latency_ms: dict[str, float | None] = field(default_factory=dict)
    gaps: dict[str, JointGap] = field(default_factory=dict)
    diagnostics: dict[str, str] = field(default_factory=dict)
    policy: str | None = None

    @property
    def bag_start_s(self) -> float:
        """Bag time of the first message, absolute seconds."""
        return self.bag_start_ns / 1e9

    @property
    def refusal_count(self) -> int:
        """Everything the node refused (chunks, frames, stale observations)."""
        return sum(self.refusals.values())

    @property
    def chunk_refusal_count(self) -> int:
        """Chunks the node refused (safety checks, malformed replies).

        Refused inputs (stale or missing frames and joint states, undecodable
        frames) are not chunks: they describe the recording, e.g. a camera dropout.
        """
        return sum(n for reason, n in self.refusals.items() if not is_input_refusal(reason))

    def failures(self, *, allow_refusals: bool = False) -> list[str]:
        """Why this replay should fail a script or CI job (empty: it passed).

        Nothing commanded always fails; refused chunks fail unless
        ``allow_refusals``.
        """
        problems = []
        if not self.chunks:
            problems.append("nothing was commanded (0 chunks); see the holds in the report")
        refused = self.chunk_refusal_count
        if refused and not allow_refusals:
            problems.append(
                f"{refused} chunk(s) refused; see the report (--allow-refusals accepts them)"
            )
        return problems

    def headline(self) -> str:
        """The first line of the report: commanded vs recorded over all joints."""
        if self.policy == "recorded":
            what = "bridge timing error (recorded policy; 0 = a perfect bridge)"
        elif self.policy == "synthetic":
            what = "commanded vs recorded (synthetic policy: only shows the pipeline runs)"
        else:
            what = "commanded vs recorded (policy of the server at --url)"
        total = overall_gap(self.gaps.values())
        held = f"held {self.held_s:.2f} s of {self.duration_s:.2f} s"
        if total is None:
            return f"{what}: nothing commanded, {held}"
        return (
            f"{what}: mean |commanded - recorded| {total.mean_abs:.4f}, max "
            f"{total.max_abs:.4f} ({total.joint}) over {total.samples} points; {held}"
        )

    @property
    def held_s(self) -> float:
        """Seconds of the bag in which the node held position (sum of the hold periods)."""
        return sum(
            (p.end if p.end is not None else self.duration_s) - p.start for p in self.hold_periods
        )

    def format(self) -> str:
        """The human-readable report ``relay-ros replay`` prints (headline first)."""
        seed = "random" if self.seed is None else str(self.seed)
        lines = [
            self.headline(),
            "",
            f"replayed {self.bag} ({self.duration_s:.2f} s) at rate {self.rate:g} through "
            f"policy_node (dry run, {self.model}, seed {seed})",
            f"policy server: {self.url}",
            f"output bag: {self.output}",
            "  recorded: " + ", ".join(f"{t} {n}" for t, n in self.recorded.items()),
            "",
            "messages played:",
        ]
        width = max((len(t) for t in self.bag_topics), default=10)
        for topic, total in self.bag_topics.items():
            if topic in self.played:
                lines.append(f"  {topic:<{width}}  {self.played[topic]:>6} / {total}")
            else:
                lines.append(f"  {topic:<{width}}  {'-':>6} / {total} (not used by the node)")
        c = self.counts
        lines += [
            "",
            f"chunks: {len(self.chunks)} published on {self.preview_topic}, "
            f"{c.get('requests', 0)} requests, {c.get('chunks_received', 0)} replies, "
            f"{c.get('error_replies', 0)} error replies, "
            f"{c.get('connection_errors', 0)} connection errors",
        ]
        if self.chunks:
            first, last = self.chunks[0].stamp, self.chunks[-1].stamp
            lines.append(
                f"  first at {first - self.bag_start_s:.3f} s, last at "
                f"{last - self.bag_start_s:.3f} s (bag time), {len(self.holds)} hold event(s)"
            )
        lat = self.latency_ms
        if lat.get("count"):
            lines.append(
                "latency (observation -> reply, bag time): "
                + ", ".join(
                    f"{k} {lat[k]:.1f} ms" for k in ("p50", "p95", "p99", "max") if lat.get(k)
                )
                + f" over {int(lat['count'] or 0)} replies"
            )
        else:
            lines.append("latency: no replies")
        lines.append("")
        if self.refusals:
            lines.append(
                f"refusals: {self.refusal_count} ({self.chunk_refusal_count} chunk(s), "
                f"{self.refusal_count - self.chunk_refusal_count} input(s))"
            )
            for reason, n in self.refusals.items():
                lines.append(f"  {n:>4} x {reason}")
        else:
            lines.append("refusals: none")
        if self.hold_periods:
            lines.append("holds (node held position instead of streaming):")
            for hold in self.hold_periods:
                end = f"{hold.end:.3f} s" if hold.end is not None else "end of bag"
                lines.append(f"  {hold.start:7.3f} s .. {end}: {hold.reason}")
        else:
            lines.append("holds: none")
        lines.append("")
        if self.gaps:
            lines.append(
                "commanded vs recorded joint states per joint, |commanded(t) - recorded(t)| "
                "(joints not configured are ignored):"
            )
            jw = max(len(j) for j in self.gaps)
            lines.append(f"  {'joint':<{jw}}  {'mean':>8}  {'max':>8}  points")
            for gap in self.gaps.values():
                lines.append(
                    f"  {gap.joint:<{jw}}  {gap.mean_abs:8.4f}  {gap.max_abs:8.4f}  {gap.samples}"
                )
        else:
            lines.append("commanded vs recorded: nothing commanded")
        return "\n".join(lines)


def read_preview(
    output: str | os.PathLike[str], preview_topic: str
) -> tuple[list[Chunk], list[HoldCommand]]:
    """Chunks and hold commands from a recorded ``~/preview`` topic.

    Per-controller messages of one publication (same stamp and ``t_obs``) are
    merged into one :class:`Chunk`; per-controller hold messages of one event into
    one :class:`HoldCommand`. Messages without a ``t_obs=`` tag are holds; a hold is
    stamped zero (the controller starts it on arrival), so its time is when it was
    recorded, and the messages of one event are those recorded within
    :data:`_HOLD_EVENT_S` of its first, one per controller.
    """
    chunks: list[Chunk] = []
    parts: dict[tuple[float, float], list[JointTrajectoryData]] = {}
    hold_parts: dict[float, list[JointTrajectoryData]] = {}
    with BagReader(output) as reader:
        if preview_topic not in reader.topics:
            return [], []
        event: float | None = None
        for message in reader.messages([preview_topic]):
            data = read_joint_trajectory(reader.deserialize(message))
            if data.t_obs is None:
                if not data.positions:
                    continue
                at = data.stamp or message.timestamp_ns * 1e-9
                recent = event is not None and at - event <= _HOLD_EVENT_S
                group = hold_parts[event] if recent and event is not None else None
                if group is not None and not any(
                    set(data.joint_names) & set(m.joint_names) for m in group
                ):
                    group.append(data)
                else:
                    event = at
                    hold_parts.setdefault(at, []).append(data)
            else:
                parts.setdefault((data.stamp, data.t_obs), []).append(data)
    for (stamp, t_obs), msgs in parts.items():
        names = tuple(n for m in msgs for n in m.joint_names)
        columns = [m.position_array() for m in msgs]
        n = min(c.shape[0] for c in columns)
        times = msgs[0].times[:n]
        chunks.append(Chunk(stamp, t_obs, names, times, np.hstack([c[:n] for c in columns])))
    holds = [
        HoldCommand(
            stamp,
            tuple(n for m in msgs for n in m.joint_names),
            np.concatenate([m.position_array()[0] for m in msgs]),
        )
        for stamp, msgs in hold_parts.items()
    ]
    chunks.sort(key=lambda c: c.stamp)
    holds.sort(key=lambda h: h.stamp)
    return chunks, holds


def command_gaps(
    chunks: Sequence[Chunk],
    holds: Sequence[HoldCommand],
    joint_times: np.ndarray,
    joint_positions: Mapping[str, np.ndarray],
) -> dict[str, JointGap]:
    """Per joint mean and max |commanded(t) - recorded(t)|.

    commanded(t) follows joint_trajectory_controller: a chunk's points count until
    the next chunk or hold replaces it. recorded(t) is the joint state linearly
    interpolated at t (bag time); points outside the recorded range are skipped.
    """
    switches = sorted([c.stamp for c in chunks] + [h.stamp for h in holds])
    diffs: dict[str, list[np.ndarray]] = {}
    for chunk in chunks:
        keep = chunk.times < replaced_at(chunk, switches)
        for j, name in enumerate(chunk.joint_names):
            diffs.setdefault(name, [])
            rec = joint_positions.get(name)
            if rec is None or len(joint_times) == 0:
                continue
            t = chunk.times[keep]
            inside = (t >= joint_times[0]) & (t <= joint_times[-1])
            valid = ~np.isnan(rec)
            if not inside.any() or valid.sum() < 1:
                continue
            recorded = np.interp(t[inside], joint_times[valid], rec[valid])
            diffs[name].append(np.abs(chunk.positions[keep, j][inside] - recorded))
    gaps: dict[str, JointGap] = {}
    for name, parts in diffs.items():
        values = np.concatenate(parts) if parts else np.array([])
        if values.size:
            gaps[name] = JointGap(name, float(values.mean()), float(values.max()), int(values.size))
        else:
            gaps[name] = JointGap(name, math.nan, math.nan, 0)
    return gaps


#: How StreamingCore words the refusals of inputs (as opposed to chunks): a stale
#: or missing observation, bad joint states, a camera frame it could not convert.
INPUT_REFUSAL_PREFIXES = (
    "stale observation:",
    "joint states:",
    "joint states on ",
    "camera '",
    "no frame yet",
    "no usable frame",
)


def is_input_refusal(reason: str) -> bool:
    """True for a refused input (observation, frame, joint states), False for a chunk."""
    return reason.startswith(INPUT_REFUSAL_PREFIXES)


def overall_gap(gaps: Iterable[JointGap]) -> JointGap | None:
    """Mean over every point of every joint, the largest gap and its joint (``joint``).

    None when no joint has samples.
    """
    with_samples = [g for g in gaps if g.samples]
    if not with_samples:
        return None
    samples = sum(g.samples for g in with_samples)
    mean = sum(g.mean_abs * g.samples for g in with_samples) / samples
    worst = max(with_samples, key=lambda g: g.max_abs)
    return JointGap(worst.joint, mean, worst.max_abs, samples)


def replaced_at(chunk: Chunk, switches: Sequence[float]) -> float:
    """When the next chunk or hold replaces ``chunk`` (inf if none does), bag time s."""
    return next((s for s in switches if s > chunk.stamp), math.inf)
