"""When the streaming core's tick has work: the cameras' read window, the next
deadline, and a request timed to the frames' arrival (no rclpy, time passed in).

The node ticks the core when it next has work instead of on a fixed period
(``StreamingCore.next_deadline``), reads the cameras only shortly before a request
(``StreamingCore.wants_frames``), and with the ``"frame_arrival"`` observation
timing sends a request as soon as fresh frames came (:func:`frames_just_came`).
These are the rules, as functions of the scheduler's plan.
"""

from __future__ import annotations

import math

from relay_ros.pipeline.camera_frames import FRAME_LOOKAHEAD_S, LAST_READ_LEAD_S
from relay_ros.pipeline.observation_inputs import ObservationInputs
from relay_ros.pipeline.scheduler import ChunkScheduler

__all__ = ["frames_just_came", "frames_wanted", "next_deadline", "stall_message"]


def frames_wanted(scheduler: ChunkScheduler, now: float) -> bool:
    """Whether the cameras should be read now: the next request is due within
    ``FRAME_LOOKAHEAD_S`` (so frames can be converted as they come, before it)."""
    due = scheduler.next_request_time()
    return due is not None and now >= due - FRAME_LOOKAHEAD_S


def next_deadline(scheduler: ChunkScheduler, now: float, tick_period: float) -> float | None:
    """When the next tick has work, on the node clock.

    - a held chunk: its publication time;
    - else before the next request: ``FRAME_LOOKAHEAD_S`` before it (from then on
      :func:`frames_wanted` is true), then one ``tick_period`` at a time until the
      request, never past it, with one tick ``LAST_READ_LEAD_S`` before it (a last
      read, so that the request's own tick finds the frames that came before it
      converted);
    - ``None`` when only an event can bring work (a reply or a failure).
    """
    held = scheduler.publication_due
    if held is not None:
        return held
    due = scheduler.next_request_time()
    if due is None:
        return None
    if now < due - FRAME_LOOKAHEAD_S:
        return due - FRAME_LOOKAHEAD_S
    if due <= now:
        return now + tick_period  # a request that was due but not made (a hold): retry
    last_read = due - LAST_READ_LEAD_S
    if now < last_read:
        return min(last_read, now + tick_period)
    return min(due, now + tick_period)


def frames_just_came(scheduler: ChunkScheduler, inputs: ObservationInputs, now: float) -> bool:
    """``"frame_arrival"`` timing: every camera has a new frame in the last camera
    period (at most ``FRAME_LOOKAHEAD_S``) before the next request is due, so the
    request goes now, with fresh frames and state, instead of with frames up to a
    period old when due."""
    due = scheduler.next_request_time()
    if due is None or not math.isfinite(due):
        return False
    window = min(FRAME_LOOKAHEAD_S, inputs.frame_period() or FRAME_LOOKAHEAD_S)
    return now >= due - window and inputs.refreshed_since(due - window)


def stall_message(scheduler: ChunkScheduler, in_flight_s: float | None, now: float) -> str | None:
    """Why the robot stands still for want of a chunk, or None while the published
    trajectory still has points ahead; ``in_flight_s``: how long the request in
    flight has been out (None: none)."""
    current = scheduler.current
    if current is not None and now <= current.end_time:
        return None
    if current is None:
        message = "waiting for a chunk: nothing to follow yet"
    else:
        message = (
            f"stalled, waiting for a chunk: the last trajectory ended "
            f"{now - current.end_time:.2f} s ago"
        )
    if in_flight_s is not None:
        message += f"; a request has been in flight for {in_flight_s:.2f} s"
    return message
