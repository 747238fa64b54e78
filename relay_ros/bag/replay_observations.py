"""``relay-ros replay --save-observations DIR``: what the model received, as files.

Every observation the reference server accepts is written to ``DIR`` (request
``n`` counts from 1 in arrival order):

- ``NNNN_<camera key>.png``: each camera frame exactly as it reached the server
  (after the node's resize and zero padding to the model's ``image_size``), in
  true colours (the PNG stores RGB as RGB), so a swapped camera or a BGR/RGB mix-up
  is visible at a glance;
- ``NNNN_state.json``: the state as sent (π0: the zero-padded vector; GR00T: the
  state groups; a layout: its parts joined), the same values by ``state_joints``
  name, the prompt and, with the recorded policy, ``observation_time_s`` (seconds
  after the bag start).

:class:`ObservationSaver` is the server's ``observation_hook``: the hook only
queues the (read-only, zero-copy) arrays; a writer thread of its own encodes the
PNGs, so the server's loop and the replay's timing are not slowed by disk writes.
Plain Python (OpenCV for PNG and JPEG), no rclpy.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from relay_ros.formats import WireFormat, format_for
from relay_ros.node.debug_topics import frame_to_rgb
from relay_ros.server.recorded import OBSERVATION_TIME_KEY

__all__ = ["ObservationSaver"]

logger = logging.getLogger(__name__)

# Observations waiting for the writer; the hook waits up to _PUT_TIMEOUT_S when full.
_QUEUE_SIZE = 256
_PUT_TIMEOUT_S = 5.0


class ObservationSaver:
    """Writes each observation the server receives into ``directory`` (see module doc).

    Args:
        directory: Created if missing; must be empty (files are never overwritten).
        state_joints: Names of the state vector's entries, in order.
        bag_start_s: Bag time of the bag's first message (for ``observation_time_s``).
        wire_format: The observations' wire format, which reads their frames and
            state (None: the model's own, looked up per observation).

    Raises:
        ValueError: ``directory`` is a file or a non-empty directory.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        state_joints: Sequence[str],
        bag_start_s: float,
        wire_format: WireFormat | None = None,
    ) -> None:
        path = Path(directory)
        if path.exists() and (not path.is_dir() or any(path.iterdir())):
            raise ValueError(
                f"--save-observations directory '{path}' exists and is not empty; "
                "files are never overwritten"
            )
        path.mkdir(parents=True, exist_ok=True)
        self.directory = path
        self._joints = tuple(state_joints)
        self._start = bag_start_s
        self._format = wire_format
        self._queue: queue.Queue[tuple[int, str, dict[str, Any]] | None] = queue.Queue(_QUEUE_SIZE)
        self._count = 0
        self.saved = 0
        self.dropped = 0
        self.errors: list[str] = []
        self._thread = threading.Thread(
            target=self._write_loop, name="relay-replay-observations", daemon=True
        )
        self._thread.start()

    def __call__(self, model: str, observation: dict[str, Any]) -> None:
        """The server's ``observation_hook``: queue one observation for writing."""
        self._count += 1
        try:
            self._queue.put((self._count, model, observation), timeout=_PUT_TIMEOUT_S)
        except queue.Full:
            self.dropped += 1
            logger.warning(
                "observation %d not saved: the writer is %d behind", self._count, _QUEUE_SIZE
            )

    def close(self, timeout: float = 30.0) -> None:
        """Write what is queued (waiting up to ``timeout`` s) and stop the writer."""
        try:
            self._queue.put(None, timeout=timeout)
        except queue.Full:
            logger.warning("observation writer did not catch up within %.0f s", timeout)
            return
        self._thread.join(timeout)

    def _write_loop(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            index, model, observation = item
            try:
                self._write(index, model, observation)
                self.saved += 1
            except (OSError, ValueError, cv2.error) as exc:
                message = f"observation {index} not saved: {exc}"
                self.errors.append(message)
                logger.warning(message)

    def _write(self, index: int, model: str, observation: Mapping[str, Any]) -> None:
        stem = self.directory / f"{index:04d}"
        frames, flat = (self._format or format_for(model)).observed(observation)
        for key, frame in frames.items():
            bgr = cv2.cvtColor(frame_to_rgb(frame), cv2.COLOR_RGB2BGR)
            name = f"{stem}_{key}.png"
            if not cv2.imwrite(name, bgr):
                raise OSError(f"could not write {name}")
        state = observation.get("state")
        sent: Any = (
            {k: np.asarray(v, dtype=np.float64).reshape(-1).tolist() for k, v in state.items()}
            if isinstance(state, Mapping)
            else flat  # π0: the padded vector; a layout: its parts joined
        )
        record: dict[str, Any] = {
            "request": index,
            "model": model,
            "prompt": observation.get("prompt", ""),
            "state_joints": dict(zip(self._joints, flat)),
            "state": sent,
        }
        if observation.get("sampling_params") is not None:  # the LoRA adapter
            record["sampling_params"] = observation["sampling_params"]
        t = observation.get(OBSERVATION_TIME_KEY)
        if t is not None:
            record["observation_time_s"] = round(float(t) - self._start, 6)
        with open(f"{stem}_state.json", "x", encoding="utf-8") as f:
            json.dump(record, f, indent=1)
            f.write("\n")
