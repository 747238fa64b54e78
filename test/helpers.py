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
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

import numpy as np
import pytest

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


# ------------------------------------------------------------------ load


class StarvationProbe:
    """How late a sleeping thread of this process woke: a measure of load.

    A thread sleeps ``period`` s at a time and keeps the largest oversleep seen. When
    it is large, this process (its threads compete for the same cores and GIL) could
    not run on time either, and timing claims about a run made meanwhile cannot be
    judged. Use as a context manager around the run; read :attr:`worst_s`.
    """

    def __init__(self, period: float = 0.005) -> None:
        self.period = period
        self.worst_s = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="starvation-probe", daemon=True)

    def _watch(self) -> None:
        while not self._stop.is_set():
            before = time.monotonic()
            time.sleep(self.period)
            self.worst_s = max(self.worst_s, time.monotonic() - before - self.period)

    def __enter__(self) -> StarvationProbe:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def run_judged(run: Callable[[], tuple[T, str | None]], attempts: int = 3, what: str = "run") -> T:
    """``run()`` again (up to ``attempts`` times) while it says it cannot be judged;
    skip when no attempt could be.

    ``run()`` returns its result and None when the claims about it can be judged, or
    why not: a measured condition the claim depends on and that the machine, not the
    code under test, decides (a reply later than the plan allows, a message the test's
    own threads delivered too late). For tests whose claims hold on a machine that
    keeps up: a loaded machine makes them slower, never red. Claims that hold however
    late things run (limits, no NaN) belong outside, on every run.
    """
    reasons = []
    for _ in range(attempts):
        result, problem = run()
        if problem is None:
            return result
        reasons.append(problem)
    pytest.skip(f"no {what} of {attempts} could be judged: " + "; ".join(reasons))


def run_unstarved(run: Callable[[], T], limit_s: float = 0.15, attempts: int = 3) -> T:
    """``run()`` again (up to ``attempts`` times) while this process was starved for
    more than ``limit_s`` during it; skip when every attempt was (:func:`run_judged`).

    For tests whose claims are about timing on a machine that keeps up (a demo run
    stall-free, on target) and depend on this process's threads running on time.
    """

    def probed() -> tuple[T, str | None]:
        with StarvationProbe() as probe:
            result = run()
        if probe.worst_s <= limit_s:
            return result, None
        return result, f"this process was starved {probe.worst_s:.3f} s (> {limit_s} s)"

    return run_judged(probed, attempts)
