"""Wire observations for the π0 and GR00T families, and replies back to one flat chunk.

:class:`ObservationBuilder` turns what the node has (RGB frames per camera key, the
state vector in the configured joint order, the prompt) into exactly the observation
map of the wire protocol (docs/protocol.md), for the server described by a
:class:`~relay_ros.pipeline.server_spec.ServerSpec`:

- π0 family: ``{"images": {key: (H, W, 3) uint8}, "state": float32 (state_width,),
  "prompt": str, ...}``. The state is zero-padded to the server's ``action_dim``
  (32 on the openpi checkpoints), the length the server expects.
- GR00T: ``{"video": {key: (1, H, W, 3) uint8}, "state": {state_key: (1, k) float32},
  "prompt": str, ...}``, with a frame for every ``video_keys`` entry. The flat state
  vector is split into the ``state_keys`` groups consecutively, in metadata order,
  by the group widths.

Frames are resized on the client (aspect kept, zero padding) to the server's
``image_size``, so the server receives small frames.

Optional fields: ``session_id`` is sent only when the metadata says
``needs_session_id`` (an openpi server does not know the key; a server that needs
it gets an error here instead of a silent failure there). Likewise
``observation_time`` (the observation's time in seconds on the node clock) is sent
only when the metadata says ``needs_observation_time``: the recorded policy of
``relay-ros replay`` (:mod:`relay_ros.server.recorded`) reads it. ``seed`` and
``sampling_params`` are sent when given (not None).

:func:`reply_to_chunk` converts a successful reply into an (H, D) float32 chunk: the
π0 array as is, or the GR00T action groups concatenated in the metadata
``action_keys`` order. Error replies must be handled before; passing one raises
:class:`ReplyError`. Finiteness is not checked here: that is the safety module's job
(it refuses the chunk and reports why).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from relay_ros.pipeline.images import ImageConversionError, resize_with_pad
from relay_ros.pipeline.server_spec import ServerSpec

__all__ = [
    "ObservationBuilder",
    "ObservationError",
    "ReplyError",
    "reply_to_chunk",
]

logger = logging.getLogger(__name__)


class ObservationError(ValueError):
    """The builder configuration or its inputs do not fit the model's observation."""


class ReplyError(ValueError):
    """A reply cannot be turned into an action chunk (an error map, wrong shapes)."""


class ObservationBuilder:
    """Builds wire observations for one server.

    Args:
        spec: What the server announced (:meth:`ServerSpec.from_metadata`).
        camera_keys: The camera keys frames are given for (the camera map's keys).
        state_joints: Joint names of the flat state vector, in order (the node's
            ``state_joints``). Optional; when given, its length is checked here, at
            start (π0 family: at most ``state_width``; GR00T: exactly the sum of the
            ``state_keys`` widths), and every ``build`` checks the state length.

    Raises:
        ObservationError: Camera keys the server does not accept, too many of them,
            a GR00T video key without a camera, or state joints that do not fit.
    """

    def __init__(
        self,
        spec: ServerSpec,
        *,
        camera_keys: Sequence[str],
        state_joints: Sequence[str] | None = None,
    ) -> None:
        self.spec = spec
        self.model = spec.model
        self.image_size: tuple[int, int] = spec.image_size
        self.needs_session_id = spec.needs_session_id
        self.needs_observation_time = spec.needs_observation_time
        keys = tuple(camera_keys)
        if not keys:
            raise ObservationError("camera_keys is empty; expected at least one camera")
        if len(set(keys)) != len(keys):
            raise ObservationError(f"camera_keys {list(keys)} lists a key more than once")
        allowed = spec.camera_keys
        for key in keys:
            if key not in allowed:
                raise ObservationError(f"camera key {key!r} is not one of {list(allowed)}")
        if spec.all_cameras_required:
            # The embodiment needs every video key (the reference server refuses others).
            absent = [key for key in allowed if key not in keys]
            if absent:
                raise ObservationError(
                    f"GR00T embodiment {spec.embodiment!r} needs every video key "
                    f"{list(allowed)}; no camera for {absent}"
                )
        if len(keys) > spec.max_cameras:
            raise ObservationError(
                f"{len(keys)} cameras {list(keys)} exceed max_cameras={spec.max_cameras}"
            )
        self.camera_keys: tuple[str, ...] = keys
        self.state_joints: tuple[str, ...] | None = (
            None if state_joints is None else tuple(state_joints)
        )
        self.state_width = spec.state_width
        if self.state_joints is not None:
            n = len(self.state_joints)
            if spec.family == "groot" and n != self.state_width:
                raise ObservationError(
                    f"state_joints has {n} joints {list(self.state_joints)}; GR00T state_keys "
                    f"{dict(spec.state_groups)} need {self.state_width}"
                )
            if spec.family != "groot" and n > self.state_width:
                raise ObservationError(
                    f"state_joints has {n} joints; {self.model} takes at most "
                    f"action_dim={self.state_width}"
                )

    def _frame(self, key: str, frame: np.ndarray | bytes) -> np.ndarray | bytes:
        if isinstance(frame, bytes):
            # JPEG bytes (relay_ros.pipeline.image_encoding), fitted before encoding.
            if self.spec.family == "groot":
                raise ObservationError(
                    f"camera {key!r} is JPEG bytes; GR00T servers take raw arrays only"
                )
            return frame
        try:
            return resize_with_pad(np.asarray(frame), *self.image_size)
        except ImageConversionError as exc:
            raise ObservationError(f"camera {key!r}: {exc}") from exc

    def _state(self, state: np.ndarray) -> np.ndarray | dict[str, np.ndarray]:
        flat = np.asarray(state, dtype=np.float64).reshape(-1)
        if self.state_joints is not None and flat.size != len(self.state_joints):
            raise ObservationError(
                f"state has {flat.size} values; expected one per state joint "
                f"{list(self.state_joints)}"
            )
        if not np.isfinite(flat).all():
            raise ObservationError(f"state {flat.tolist()} contains NaN or Inf")
        if self.spec.family != "groot":
            if flat.size > self.state_width:
                raise ObservationError(
                    f"state has {flat.size} values; {self.model} takes at most "
                    f"action_dim={self.state_width}"
                )
            padded = np.zeros(self.state_width, dtype=np.float32)
            padded[: flat.size] = flat
            return padded
        if flat.size != self.state_width:
            raise ObservationError(
                f"state has {flat.size} values; GR00T state_keys {dict(self.spec.state_groups)} "
                f"need {self.state_width}"
            )
        groups: dict[str, np.ndarray] = {}
        offset = 0
        for key, width in self.spec.state_groups.items():
            groups[key] = flat[offset : offset + width].astype(np.float32).reshape(1, width)
            offset += width
        return groups

    def build(
        self,
        frames: Mapping[str, np.ndarray | bytes],
        state: np.ndarray,
        prompt: str,
        *,
        session_id: str | None,
        seed: int | None,
        sampling_params: dict | None = None,
        observation_time: float | None = None,
    ) -> dict[str, Any]:
        """Assemble one observation.

        Args:
            frames: Camera key -> (H, W, 3) uint8 RGB frame of any size, exactly the
                builder's ``camera_keys``. Frames not at ``image_size`` are resized.
                π0/π0.5 frames may be JPEG bytes (fitted to ``image_size`` already),
                sent as they are.
            state: The flat state vector in the configured joint order (radians /
                metres).
            prompt: The task instruction.
            session_id: Sent when the metadata has ``needs_session_id`` (then required).
            seed: Sent when not None (same observation + seed -> same actions).
            sampling_params: Sent when not None (e.g. ``{"lora": "name"}``).
            observation_time: When the observation was taken (s, node clock); sent
                when the metadata has ``needs_observation_time`` (then required).

        Returns:
            The observation map, ready for ``PolicyClient.infer``.

        Raises:
            ObservationError: A missing or unexpected camera, a bad frame, a state of
                the wrong length or with NaN/Inf, a non-string prompt, a missing
                session id or observation time, or a non-integer seed.
        """
        missing = [k for k in self.camera_keys if k not in frames]
        extra = [k for k in frames if k not in self.camera_keys]
        if missing:
            raise ObservationError(
                f"no frame for camera {missing[0]!r}; expected frames for {list(self.camera_keys)}"
            )
        if extra:
            raise ObservationError(
                f"frame for camera {extra[0]!r}, which is not one of {list(self.camera_keys)}"
            )
        if not isinstance(prompt, str):
            raise ObservationError(f"prompt must be a str, got {type(prompt).__name__}")
        images = {key: self._frame(key, frames[key]) for key in self.camera_keys}
        obs: dict[str, Any]
        if self.spec.family == "groot":
            obs = {
                "video": {key: img[np.newaxis] for key, img in images.items()},
                "state": self._state(state),
                "prompt": prompt,
            }
        else:
            obs = {"images": images, "state": self._state(state), "prompt": prompt}
        if self.needs_session_id:
            if not isinstance(session_id, str) or not session_id:
                raise ObservationError(
                    f"session_id is {session_id!r}; the server needs a non-empty session id"
                )
            obs["session_id"] = session_id
        if self.needs_observation_time:
            if (
                isinstance(observation_time, bool)
                or not isinstance(observation_time, (int, float))
                or not np.isfinite(observation_time)
            ):
                raise ObservationError(
                    f"observation_time is {observation_time!r}; the server "
                    "needs_observation_time (seconds on the node clock)"
                )
            obs["observation_time"] = float(observation_time)
        if seed is not None:
            if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
                raise ObservationError(f"seed must be an int, got {seed!r}")
            obs["seed"] = int(seed)
        if sampling_params is not None:
            if not isinstance(sampling_params, Mapping):
                raise ObservationError(
                    f"sampling_params must be a dict, got {type(sampling_params).__name__}"
                )
            obs["sampling_params"] = dict(sampling_params)
        return obs


def reply_to_chunk(reply: Any, spec: ServerSpec) -> np.ndarray:
    """Turn a successful ``PolicyClient.infer`` reply into one (H, D) float32 chunk.

    Args:
        reply: π0 family: the (H, action_dim) array. GR00T: ``{"action.x": (1, H, k)}``
            (or (H, k)). A full reply map ``{"actions": ...}`` is unwrapped.
        spec: The server (``action_horizon``, ``action_dim``, GR00T action groups).

    Returns:
        A new, writable float32 array of shape (action_horizon, D). Values are not
        checked for NaN/Inf (the safety checks do that).

    Raises:
        ReplyError: An error reply (``{"type": "error", ...}``) or other control map,
            or shapes that do not match the server's metadata.
    """
    if isinstance(reply, Mapping) and "type" in reply:
        raise ReplyError(
            f"reply_to_chunk got a reply of type {reply.get('type')!r} "
            f"(message {reply.get('message')!r}), not actions; check for error replies "
            "before converting"
        )
    if isinstance(reply, Mapping) and "actions" in reply:
        reply = reply["actions"]
    horizon = spec.action_horizon

    if isinstance(reply, np.ndarray):
        if reply.ndim != 2:
            raise ReplyError(
                f"actions have shape {reply.shape}; expected (action_horizon, action_dim)"
            )
        dim = spec.action_dim
        if reply.shape[0] != horizon or (dim is not None and reply.shape[1] != dim):
            raise ReplyError(f"actions have shape {reply.shape}; metadata says ({horizon}, {dim})")
        return np.array(reply, dtype=np.float32)

    if not isinstance(reply, Mapping):
        raise ReplyError(
            f"reply is a {type(reply).__name__}; expected an array (π0) or a dict of "
            "action groups (GR00T)"
        )
    order = list(spec.action_groups) or list(reply)
    missing = [k for k in order if k not in reply]
    extra = [k for k in reply if k not in order]
    if missing or extra:
        raise ReplyError(
            f"reply action groups {list(reply)} do not match the expected groups {order}"
        )
    parts = []
    for key in order:
        part = np.asarray(reply[key])
        if part.ndim == 3 and part.shape[0] == 1:
            part = part[0]
        if part.ndim != 2:
            raise ReplyError(
                f"action group {key!r} has shape {np.shape(reply[key])}; expected (1, H, k)"
            )
        if part.shape[0] != horizon:
            raise ReplyError(
                f"action group {key!r} has {part.shape[0]} steps; metadata action_horizon "
                f"is {horizon}"
            )
        width = spec.action_groups.get(key)
        if width is not None and part.shape[1] != width:
            raise ReplyError(f"action group {key!r} has width {part.shape[1]}; expected {width}")
        parts.append(part)
    return np.concatenate(parts, axis=1).astype(np.float32)
