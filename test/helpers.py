"""Helpers shared by the tests: one time factor, one wait, one free port, observations.

Kept free of ROS imports so the ROS-free compat runs (.ci/compat) can use them.

Time factor: every test timeout and deadline goes through :func:`scaled`, which
multiplies it by the environment variable ``RELAY_ROS_TEST_TIMEOUT_FACTOR``
(default 1; websockets' tests do the same with ``WEBSOCKETS_TESTS_TIMEOUT_FACTOR``).
On a slow or loaded machine, ``RELAY_ROS_TEST_TIMEOUT_FACTOR=3`` makes tests wait
longer before giving up; it never changes what they assert.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

import numpy as np

T = TypeVar("T")

_FACTOR_VARIABLE = "RELAY_ROS_TEST_TIMEOUT_FACTOR"


def timeout_factor() -> float:
    """``RELAY_ROS_TEST_TIMEOUT_FACTOR`` as a number > 0 (1 when unset)."""
    text = os.environ.get(_FACTOR_VARIABLE, "").strip()
    if not text:
        return 1.0
    try:
        factor = float(text)
    except ValueError:
        factor = float("nan")
    if not factor > 0 or factor == float("inf"):
        raise ValueError(f"{_FACTOR_VARIABLE} is {text!r}; expected a finite number > 0")
    return factor


def scaled(seconds: float) -> float:
    """``seconds`` times the test time factor: use it for every timeout and deadline."""
    return seconds * timeout_factor()


def wait_until(
    predicate: Callable[[], T],
    timeout: float = 10.0,
    message: str | Callable[[], str] = "",
    period: float = 0.01,
) -> T:
    """Poll ``predicate`` until it returns something truthy and return that value.

    ``timeout`` is scaled by the time factor. On timeout, raise AssertionError
    naming ``message`` (a string, or a callable for details known only then).
    """
    limit = scaled(timeout)
    deadline = time.monotonic() + limit
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            what = message() if callable(message) else message
            raise AssertionError(f"{what or 'condition'} not met within {limit:.1f} s")
        time.sleep(period)


def free_port() -> int:
    """A loopback TCP port with nothing listening on it (free when this returns)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# ------------------------------------------------------------------ observations
# One builder per model family of the reference server (relay_ros.wire.env.MODEL_IDS):
# pi0 and pi05 take the openpi layout (images / state / prompt), groot the GR00T one
# (video / state / prompt, a time axis of 1). Defaults match the reference server's
# metadata; tests that need other sizes pass them or the server's metadata.

PI_STATE_DIM = 32
PI_IMAGE_SIZE = (224, 224)
PI_CAMERAS = ("base_0_rgb", "left_wrist_0_rgb", "right_wrist_0_rgb")


def pi_observation(
    metadata: Mapping[str, Any] | None = None,
    *,
    cameras: Iterable[str] = ("base_0_rgb",),
    image_size: tuple[int, int] | None = None,
    state_dim: int | None = None,
    prompt: str = "wave",
    random: bool = False,
    **extra: Any,
) -> dict[str, Any]:
    """A valid pi0 / pi05 observation: uint8 HxWx3 images, float32 state, prompt.

    Sizes come from ``image_size`` / ``state_dim``, else a server's ``metadata``
    (image_size, action_dim), else the reference defaults (224x224, 32).
    ``random``: seeded random pixels and a ramp state instead of zeros. ``extra``
    keys (seed, session_id, or a replacement images / state) are set as they are.
    """
    meta = metadata or {}
    height, width = image_size or tuple(meta.get("image_size", PI_IMAGE_SIZE))
    dim = state_dim or int(meta.get("action_dim", PI_STATE_DIM))
    rng = np.random.default_rng(0)
    obs: dict[str, Any] = {
        "images": {
            key: (
                rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
                if random
                else np.zeros((height, width, 3), np.uint8)
            )
            for key in cameras
        },
        "state": (
            np.linspace(-0.5, 0.5, dim, dtype=np.float32) if random else np.zeros(dim, np.float32)
        ),
        "prompt": prompt,
    }
    obs.update(extra)
    return obs


def groot_observation(
    metadata: Mapping[str, Any],
    *,
    image_size: tuple[int, int] | None = None,
    state_value: float = 0.0,
    prompt: str = "stack the blocks",
) -> dict[str, Any]:
    """A valid GR00T observation for a server's metadata (video_keys, state_keys).

    Each video key gets one zero frame (1xHxWx3), each state key a (1, n) float32
    row of ``state_value``; ``image_size`` defaults to the metadata's.
    """
    height, width = image_size or tuple(metadata["image_size"])
    return {
        "video": {key: np.zeros((1, height, width, 3), np.uint8) for key in metadata["video_keys"]},
        "state": {
            key: np.full((1, n), state_value, np.float32)
            for key, n in metadata["state_keys"].items()
        },
        "prompt": prompt,
    }


# ------------------------------------------------------------------ demo runs


def assert_chunks_in_time_unless_a_reply_was_late(result: Any, table: str) -> None:
    """Early requests keep the arm supplied: in a demo run (relay_ros.demo.DemoResult)
    policy_node publishes every chunk before the previous one's last point, unless
    the machine made some round trip longer than a whole execute window.

    Judged on what the node published (``~/preview`` stamps and point times, as
    relay_ros.demo.report.stall_intervals does), not on the simulated arm's own stall
    measure: on a loaded machine the arm's follower and the DDS delivery to it are
    starved too, and its stall then says nothing about the node's scheduling. With
    early requests a gap needs a reply later than the execute window (the chunk in
    hand covers that window and the rest of its horizon); on an idle machine replies
    take ~0.1-0.3 s against 0.5 s, so the check is strict there.
    """
    gaps = [
        (chunk.end, nxt.stamp)
        for chunk, nxt in zip(result.chunks, result.chunks[1:])
        if nxt.stamp > chunk.end
    ]
    window = result.execute_horizon * result.dt
    late = np.asarray(result.latencies_s) > window
    assert not gaps or late.any(), (
        f"chunks published after the previous one ran out {gaps} with every reply "
        f"within the {window:.2f} s execute window\n{table}"
    )
