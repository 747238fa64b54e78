"""Wire observations for the connected server, and its replies back to one flat chunk.

:class:`ObservationBuilder` turns what the node has (RGB frames per camera key, the
state vector in the configured joint order, the prompt) into exactly the observation
map of the server described by a :class:`~relay_ros.pipeline.server_spec.ServerSpec`.
The layout is its wire format's (``spec.format``, :mod:`relay_ros.formats`): the
seeds' π0 family (``images`` + padded ``state``), GR00T (``video`` + state groups),
or an openpi environment's layout; this module does what every format shares.

Frames are resized on the client (aspect kept, zero padding) to the server's
``image_size``, so the server receives small frames.

Optional fields: ``session_id`` is sent only when the metadata says
``needs_session_id`` (an openpi server does not know the key; a server that needs
it gets an error here instead of a silent failure there). Likewise
``observation_time`` (the observation's time in seconds on the node clock) is sent
only when the metadata says ``needs_observation_time``: the recorded policy of
``relay-ros replay`` (:mod:`relay_ros.server.recorded`) reads it. ``seed`` and
``sampling_params`` are sent when given (not None).

:func:`reply_to_chunk` converts a successful reply into an (H, D) float32 chunk (the
format's reading: the π0 array as is, the GR00T action groups concatenated in the
metadata ``action_keys`` order). Error replies must be handled before; passing one raises
:class:`ReplyError`. Finiteness is not checked here: that is the safety module's job
(it refuses the chunk and reports why).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from relay_ros.formats import FormatError
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
            a camera the server needs missing, or state joints that do not fit.
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
        self.state_joints: tuple[str, ...] | None = (
            None if state_joints is None else tuple(state_joints)
        )
        self.state_width = spec.state_width
        try:
            spec.format.check_cameras(keys, spec)
            if self.state_joints is not None:
                spec.format.check_state_joints(self.state_joints, spec)
        except FormatError as exc:
            raise ObservationError(str(exc)) from None
        self.camera_keys: tuple[str, ...] = keys

    def _frame(self, key: str, frame: np.ndarray | bytes) -> np.ndarray | bytes:
        if isinstance(frame, bytes):
            # JPEG bytes (relay_ros.pipeline.image_encoding), fitted before encoding;
            # the format says whether its server takes them.
            return frame
        try:
            return resize_with_pad(np.asarray(frame), *self.image_size)
        except ImageConversionError as exc:
            raise ObservationError(f"camera {key!r}: {exc}") from exc

    def _state(self, state: np.ndarray) -> np.ndarray:
        flat = np.asarray(state, dtype=np.float64).reshape(-1)
        if self.state_joints is not None and flat.size != len(self.state_joints):
            raise ObservationError(
                f"state has {flat.size} values; expected one per state joint "
                f"{list(self.state_joints)}"
            )
        if not np.isfinite(flat).all():
            raise ObservationError(f"state {flat.tolist()} contains NaN or Inf")
        return flat

    def build(
        self,
        frames: Mapping[str, np.ndarray | bytes],
        state: np.ndarray,
        prompt: str,
        *,
        session_id: str | None,
        seed: int | None,
        sampling_params: Mapping[str, Any] | None = None,
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
        try:
            obs = self.spec.format.observation(images, self._state(state), prompt, self.spec)
        except FormatError as exc:
            raise ObservationError(str(exc)) from None
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
        reply: The actions in the server's format (π0: an (H, action_dim) array;
            GR00T: ``{"action.x": (1, H, k)}``). A full reply map ``{"actions": ...}``
            is unwrapped.
        spec: The server (its format, ``action_horizon``, widths, groups).

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
    try:
        return spec.format.reply_to_chunk(reply, spec)
    except FormatError as exc:
        raise ReplyError(str(exc)) from None
