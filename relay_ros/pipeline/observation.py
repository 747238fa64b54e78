"""Wire observations for π0 / π0.5 / GR00T, and action replies back to one flat chunk.

:class:`ObservationBuilder` turns what the node has (RGB frames per camera key, the
state vector in the configured joint order, the prompt) into exactly the observation
map of the wire protocol (``shared/spec/protocol.md``):

- π0 / π0.5: ``{"images": {key: (H, W, 3) uint8}, "state": float32 (action_dim,),
  "prompt": str, ...}``. The state is zero-padded to the metadata ``action_dim``
  (32 on the openpi checkpoints), the length the server expects.
- GR00T: ``{"video": {key: (1, H, W, 3) uint8}, "state": {state_key: (1, k) float32},
  "prompt": str, ...}``, with a frame for every metadata ``video_keys`` entry. The
  flat state vector is split into the metadata ``state_keys`` groups: by default
  consecutively, in metadata order, by the group widths; or by an explicit
  ``state_layout`` (state key -> indices into the flat vector;
  :func:`state_layout_from_joint_groups` builds it from joint names).

Frames are resized on the client (aspect kept, zero padding) to the metadata
``image_size`` (default [224, 224]), so the server receives small frames.

Optional fields: ``session_id`` is sent only when the metadata says
``needs_session_id`` (an openpi server does not know the key; a server that needs
it gets an error here instead of a silent failure there). Likewise
``observation_time`` (the observation's time in seconds on the node clock) is sent
only when the metadata says ``needs_observation_time``: the recorded policy of
``relay-ros replay`` (:mod:`relay_ros.server.recorded`) reads it. ``seed`` and
``sampling_params`` are sent when given (not None).

:func:`reply_to_chunk` converts a successful reply into an (H, D) float32 chunk: the
π0 array as is (D = ``action_dim``), or the GR00T action groups concatenated in the
metadata ``action_keys`` order. Error replies must be handled before; passing one
raises :class:`ReplyError`. Finiteness is not checked here: that is the safety
module's job (it refuses the chunk and reports why).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from relay_ros.pipeline.camera_map import DEFAULT_CAMERA_KEYS
from relay_ros.pipeline.images import ImageConversionError, resize_with_pad

__all__ = [
    "DEFAULT_ACTION_DIM",
    "DEFAULT_IMAGE_SIZE",
    "MODELS",
    "ObservationBuilder",
    "ObservationError",
    "ReplyError",
    "groot_action_widths",
    "reply_to_chunk",
    "state_layout_from_joint_groups",
]

logger = logging.getLogger(__name__)

#: Model IDs the node supports.
MODELS: tuple[str, ...] = ("pi05", "pi0", "groot")

#: ``image_size`` used when the metadata has none (an openpi server), [height, width].
DEFAULT_IMAGE_SIZE: tuple[int, int] = (224, 224)

#: Action/state width of the openpi π0 / π0.5 checkpoints, used when metadata has no
#: ``action_dim`` (an openpi server).
DEFAULT_ACTION_DIM = 32


class ObservationError(ValueError):
    """The builder configuration or its inputs do not fit the model's observation."""


class ReplyError(ValueError):
    """A reply cannot be turned into an action chunk (an error map, wrong shapes)."""


def _check_model(model: str) -> None:
    if model not in MODELS:
        raise ObservationError(f"model {model!r} is not one of {list(MODELS)}")


def _image_size(metadata: Mapping[str, Any]) -> tuple[int, int]:
    size = metadata.get("image_size")
    if size is None:
        return DEFAULT_IMAGE_SIZE
    try:
        height, width = (int(v) for v in size)
    except (TypeError, ValueError) as exc:
        raise ObservationError(
            f"metadata image_size {size!r} is not [height, width]; expected two integers"
        ) from exc
    if height <= 0 or width <= 0:
        raise ObservationError(f"metadata image_size {size!r} must be positive")
    return height, width


def _state_keys(metadata: Mapping[str, Any]) -> dict[str, int]:
    keys = metadata.get("state_keys")
    if not isinstance(keys, Mapping) or not keys:
        raise ObservationError(
            f"GR00T metadata 'state_keys' is {keys!r}; expected a non-empty map state key -> width"
        )
    widths: dict[str, int] = {}
    for key, width in keys.items():
        if isinstance(width, bool) or not isinstance(width, (int, np.integer)) or width <= 0:
            raise ObservationError(
                f"GR00T metadata state_keys[{key!r}] = {width!r}; expected a positive integer"
            )
        widths[str(key)] = int(width)
    return widths


def state_layout_from_joint_groups(
    groups: Mapping[str, Sequence[str]], joint_names: Sequence[str]
) -> dict[str, tuple[int, ...]]:
    """Turn ``{state_key: [joint names]}`` into ``{state_key: (indices,)}``.

    Args:
        groups: GR00T state key -> the joints of that group, in group order.
        joint_names: The flat state vector's joint order (the JointStateCache's).

    Raises:
        ObservationError: A joint that is not in ``joint_names``.
    """
    index = {name: i for i, name in enumerate(joint_names)}
    layout: dict[str, tuple[int, ...]] = {}
    for key, joints in groups.items():
        indices = []
        for joint in joints:
            if joint not in index:
                raise ObservationError(
                    f"state group {key!r}: joint {joint!r} is not one of {list(joint_names)}"
                )
            indices.append(index[joint])
        layout[key] = tuple(indices)
    return layout


def groot_action_widths(
    metadata: Mapping[str, Any], *, action_widths: Mapping[str, int] | None = None
) -> dict[str, int]:
    """Width of each GR00T action group, in metadata ``action_keys`` order.

    The metadata lists action keys but not their widths. A width comes from
    ``action_widths`` when given, else from the state group of the same name
    (``action.single_arm`` -> ``state.single_arm``), which is how GR00T embodiments
    are defined (so100: arm 5, gripper 1).

    Raises:
        ObservationError: No ``action_keys``, or a group whose width is unknown.
    """
    keys = metadata.get("action_keys")
    if not isinstance(keys, Sequence) or isinstance(keys, str) or not keys:
        raise ObservationError(
            f"GR00T metadata 'action_keys' is {keys!r}; expected a non-empty list"
        )
    state_keys = (
        metadata.get("state_keys") if isinstance(metadata.get("state_keys"), Mapping) else {}
    )
    given = dict(action_widths or {})
    unknown = [k for k in given if k not in keys]
    if unknown:
        raise ObservationError(
            f"action_widths names {unknown[0]!r}, which is not one of {list(keys)}"
        )
    widths: dict[str, int] = {}
    for key in keys:
        if key in given:
            width = given[key]
        else:
            suffix = str(key).split(".", 1)[1] if "." in str(key) else str(key)
            width = state_keys.get(f"state.{suffix}")
            if width is None:
                raise ObservationError(
                    f"width of GR00T action group {key!r} is unknown: no state group "
                    f"'state.{suffix}' in {list(state_keys)}; give it in action_widths"
                )
        if isinstance(width, bool) or not isinstance(width, (int, np.integer)) or width <= 0:
            raise ObservationError(f"width of action group {key!r} is {width!r}; expected > 0")
        widths[str(key)] = int(width)
    return widths


class ObservationBuilder:
    """Builds wire observations for one model and server.

    Args:
        model: ``"pi05"``, ``"pi0"`` or ``"groot"``.
        metadata: The server metadata (``PolicyClient.get_server_metadata()``).
        camera_keys: The camera keys frames are given for (the camera map's keys).
        state_joints: Joint names of the flat state vector, in order (the node's
            ``state_joints``). Optional; when given, its length is checked here, at
            start (π0: at most ``action_dim``; GR00T without groups: the sum of the
            ``state_keys`` widths), and every ``build`` checks the state length.
        state_groups: GR00T only: state key -> joint names (needs ``state_joints``);
            turned into ``state_layout``.
        state_layout: GR00T only: state key -> indices into the flat state vector
            (see :func:`state_layout_from_joint_groups`). Without groups or layout,
            the flat vector is split consecutively by the ``state_keys`` widths, in
            metadata order.

    Raises:
        ObservationError: Unknown model, metadata for another model, camera keys
            the model does not accept or too many of them, or a bad state layout.
    """

    def __init__(
        self,
        model: str,
        metadata: Mapping[str, Any],
        *,
        camera_keys: Sequence[str],
        state_joints: Sequence[str] | None = None,
        state_groups: Mapping[str, Sequence[str]] | None = None,
        state_layout: Mapping[str, Sequence[int]] | None = None,
    ) -> None:
        _check_model(model)
        served = metadata.get("model")
        if served is not None and served != model:
            raise ObservationError(
                f"server runs model {served!r}, but the node is set to {model!r}"
            )
        self.model = model
        self.image_size: tuple[int, int] = _image_size(metadata)
        self.needs_session_id = bool(metadata.get("needs_session_id", False))
        self.needs_observation_time = bool(metadata.get("needs_observation_time", False))
        keys = tuple(camera_keys)
        if not keys:
            raise ObservationError("camera_keys is empty; expected at least one camera")
        if len(set(keys)) != len(keys):
            raise ObservationError(f"camera_keys {list(keys)} lists a key more than once")
        if model == "groot":
            video_keys = metadata.get("video_keys")
            allowed = tuple(video_keys) if isinstance(video_keys, Sequence) else ()
            max_cameras: int | None = len(allowed)
        else:
            allowed = DEFAULT_CAMERA_KEYS[model]
            max_cameras = metadata.get("max_cameras")
        for key in keys:
            if key not in allowed:
                raise ObservationError(f"camera key {key!r} is not one of {list(allowed)}")
        if model == "groot":
            # The embodiment needs every video key (the reference server refuses others).
            absent = [key for key in allowed if key not in keys]
            if absent:
                raise ObservationError(
                    f"GR00T embodiment {metadata.get('embodiment')!r} needs every video key "
                    f"{list(allowed)}; no camera for {absent}"
                )
        if max_cameras is not None and len(keys) > int(max_cameras):
            raise ObservationError(
                f"{len(keys)} cameras {list(keys)} exceed max_cameras={max_cameras}"
            )
        self.camera_keys: tuple[str, ...] = keys

        self.state_joints: tuple[str, ...] | None = (
            None if state_joints is None else tuple(state_joints)
        )
        self._state_widths: dict[str, int] = {}
        self._state_layout: dict[str, np.ndarray] | None = None
        if model == "groot":
            self._state_widths = _state_keys(metadata)
            if state_groups is not None:
                if state_layout is not None:
                    raise ObservationError("give state_groups or state_layout, not both")
                if self.state_joints is None:
                    raise ObservationError("state_groups needs state_joints (the joint order)")
                state_layout = state_layout_from_joint_groups(state_groups, self.state_joints)
            if state_layout is not None:
                self._state_layout = self._check_layout(state_layout)
            self.state_width = sum(self._state_widths.values())
            if (
                self._state_layout is None
                and self.state_joints is not None
                and len(self.state_joints) != self.state_width
            ):
                raise ObservationError(
                    f"state_joints has {len(self.state_joints)} joints "
                    f"{list(self.state_joints)}; GR00T state_keys {self._state_widths} need "
                    f"{self.state_width} (or give state_groups)"
                )
        else:
            if state_layout is not None or state_groups is not None:
                raise ObservationError(
                    f"state_groups/state_layout apply to GR00T only; {model} takes the flat "
                    "state vector"
                )
            self.state_width = int(metadata.get("action_dim") or DEFAULT_ACTION_DIM)
            if self.state_joints is not None and len(self.state_joints) > self.state_width:
                raise ObservationError(
                    f"state_joints has {len(self.state_joints)} joints; {model} takes at most "
                    f"action_dim={self.state_width}"
                )
        if self._state_layout is not None and self.state_joints is not None:
            for key, indices in self._state_layout.items():
                if indices.size and int(indices.max()) >= len(self.state_joints):
                    raise ObservationError(
                        f"state_layout[{key!r}] uses index {int(indices.max())}, but "
                        f"state_joints has {len(self.state_joints)} joints"
                    )

    def _check_layout(self, layout: Mapping[str, Sequence[int]]) -> dict[str, np.ndarray]:
        missing = [k for k in self._state_widths if k not in layout]
        extra = [k for k in layout if k not in self._state_widths]
        if missing or extra:
            bad = (missing or extra)[0]
            raise ObservationError(
                f"state_layout key {bad!r} {'is missing' if missing else 'is unknown'}; "
                f"expected exactly the state keys {list(self._state_widths)}"
            )
        checked: dict[str, np.ndarray] = {}
        for key, width in self._state_widths.items():
            indices = np.asarray(list(layout[key]), dtype=np.intp)
            if indices.size != width or (indices < 0).any():
                raise ObservationError(
                    f"state_layout[{key!r}] = {list(layout[key])}; expected {width} "
                    "non-negative indices into the state vector"
                )
            checked[key] = indices
        return checked

    def _frame(self, key: str, frame: np.ndarray) -> np.ndarray:
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
        if self.model != "groot":
            if flat.size > self.state_width:
                raise ObservationError(
                    f"state has {flat.size} values; {self.model} takes at most "
                    f"action_dim={self.state_width}"
                )
            padded = np.zeros(self.state_width, dtype=np.float32)
            padded[: flat.size] = flat
            return padded
        groups: dict[str, np.ndarray] = {}
        if self._state_layout is None:
            if flat.size != self.state_width:
                raise ObservationError(
                    f"state has {flat.size} values; GR00T state_keys {self._state_widths} "
                    f"need {self.state_width}"
                )
            offset = 0
            for key, width in self._state_widths.items():
                groups[key] = flat[offset : offset + width].astype(np.float32).reshape(1, width)
                offset += width
            return groups
        for key, indices in self._state_layout.items():
            if indices.size and int(indices.max()) >= flat.size:
                raise ObservationError(
                    f"state_layout[{key!r}] uses index {int(indices.max())}, but the state "
                    f"has {flat.size} values"
                )
            groups[key] = flat[indices].astype(np.float32).reshape(1, indices.size)
        return groups

    def build(
        self,
        frames: Mapping[str, np.ndarray],
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
        if self.model == "groot":
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


def _expected(metadata: Mapping[str, Any], name: str) -> int | None:
    value = metadata.get(name)
    return None if value is None else int(value)


def reply_to_chunk(
    reply: Any,
    metadata: Mapping[str, Any],
    *,
    action_keys_order: Sequence[str] | None = None,
    action_widths: Mapping[str, int] | None = None,
) -> np.ndarray:
    """Turn a successful ``PolicyClient.infer`` reply into one (H, D) float32 chunk.

    Args:
        reply: π0/π0.5: the (H, action_dim) array. GR00T: ``{"action.x": (1, H, k)}``
            (or (H, k)). A full reply map ``{"actions": ...}`` is unwrapped.
        metadata: The server metadata (``action_horizon``, ``action_dim``,
            ``action_keys``).
        action_keys_order: GR00T group order; default the metadata ``action_keys``.
        action_widths: GR00T: expected width per group; when given, checked.

    Returns:
        A new, writable float32 array of shape (action_horizon, D). Values are not
        checked for NaN/Inf (the safety checks do that).

    Raises:
        ReplyError: An error reply (``{"type": "error", ...}``) or other control map,
            or shapes that do not match the metadata.
    """
    if isinstance(reply, Mapping) and "type" in reply:
        raise ReplyError(
            f"reply_to_chunk got a reply of type {reply.get('type')!r} "
            f"(message {reply.get('message')!r}), not actions; check for error replies "
            "before converting"
        )
    if isinstance(reply, Mapping) and "actions" in reply:
        reply = reply["actions"]
    horizon = _expected(metadata, "action_horizon")

    if isinstance(reply, np.ndarray):
        if reply.ndim != 2:
            raise ReplyError(
                f"actions have shape {reply.shape}; expected (action_horizon, action_dim)"
            )
        dim = _expected(metadata, "action_dim")
        if (horizon is not None and reply.shape[0] != horizon) or (
            dim is not None and reply.shape[1] != dim
        ):
            raise ReplyError(f"actions have shape {reply.shape}; metadata says ({horizon}, {dim})")
        return np.array(reply, dtype=np.float32)

    if not isinstance(reply, Mapping):
        raise ReplyError(
            f"reply is a {type(reply).__name__}; expected an array (π0) or a dict of "
            "action groups (GR00T)"
        )
    if action_keys_order is not None:
        order = list(action_keys_order)
    elif metadata.get("action_keys"):
        order = list(metadata["action_keys"])
    else:
        order = list(reply)
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
        if horizon is not None and part.shape[0] != horizon:
            raise ReplyError(
                f"action group {key!r} has {part.shape[0]} steps; metadata action_horizon "
                f"is {horizon}"
            )
        if (
            action_widths is not None
            and key in action_widths
            and part.shape[1] != action_widths[key]
        ):
            raise ReplyError(
                f"action group {key!r} has width {part.shape[1]}; expected {action_widths[key]}"
            )
        parts.append(part)
    steps = {p.shape[0] for p in parts}
    if len(steps) != 1:
        raise ReplyError(f"action groups have different horizons {sorted(steps)}")
    return np.concatenate(parts, axis=1).astype(np.float32)
