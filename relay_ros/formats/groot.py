"""The seeds' GR00T wire format: ``video`` and ``state`` groups, one reply array per action group.

Observation: ``{"video": {key: (1, H, W, 3) uint8}, "state": {state_key: (1, k)
float32}, "prompt": str, ...}`` with a raw frame (never JPEG) for every
``video_keys`` entry of the embodiment the server runs; the node's flat state
vector is split into the ``state_keys`` groups consecutively, in metadata order.
Reply: ``{"action.x": (1, H, k) float32, ...}``, concatenated into the flat chunk
in the metadata's ``action_keys`` order (each action group as wide as the state
group of the same name). Output controllers name their group with ``action_key``
(and optionally ``dims`` within it). The reference server reads the embodiments
from ``config/groot_embodiments.yaml`` (:mod:`relay_ros.formats.embodiment`).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from relay_ros.formats.action_space import ActionPart
from relay_ros.formats.base import FormatError, SpecView, Validator, int_list
from relay_ros.formats.embodiment import Embodiment, split_action_groups
from relay_ros.formats.requests import (
    ObservationError,
    PrefixKeys,
    Request,
    check_action_prefix,
    check_sampling_params,
    common_fields,
    finite_array,
    prefix_fields,
)
from relay_ros.logsafe import shorten
from relay_ros.models import ModelSpec

__all__ = ["GROOT", "GrootFormat", "validate_groot"]


def _positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
        raise FormatError(f"server metadata {name} is {value!r}; expected a positive integer")
    return int(value)


def _key_list(name: str, value: Any) -> tuple[str, ...]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence) or not value:
        raise FormatError(f"GR00T server metadata {name} is {value!r}; expected a non-empty list")
    return tuple(str(key) for key in value)


def _widths(name: str, value: Any) -> dict[str, int]:
    if not isinstance(value, Mapping) or not value:
        raise FormatError(
            f"GR00T server metadata {name} is {value!r}; expected a non-empty map key -> width"
        )
    return {str(key): _positive_int(f"{name}[{key!r}]", width) for key, width in value.items()}


def _action_groups(action_keys: tuple[str, ...], state_widths: Mapping[str, int]) -> dict[str, int]:
    """Width of each GR00T action group: the state group of the same name
    (``action.single_arm`` -> ``state.single_arm``), which is how GR00T embodiments
    are defined (so100: arm 5, gripper 1); the metadata lists no action widths."""
    groups: dict[str, int] = {}
    for key in action_keys:
        suffix = key.split(".", 1)[1] if "." in key else key
        width = state_widths.get(f"state.{suffix}")
        if width is None:
            raise FormatError(
                f"width of GR00T action group {key!r} is unknown: no state group "
                f"'state.{suffix}' in {list(state_widths)}"
            )
        groups[key] = width
    return groups


class GrootFormat:
    """The GR00T format (see the module docstring)."""

    name = "groot"
    jpeg_allowed = False
    single_array_reply = False
    needs_embodiment = True
    output_fields: tuple[str, ...] = ("topic", "joints", "action_key", "dims")

    # ---------------------------------------------------------------- before a server
    def camera_rules(self, model: ModelSpec) -> tuple[tuple[str, ...] | None, int | None]:
        # The keys depend on the embodiment the server runs: its metadata's video_keys.
        return None, None

    def metadata_defaults(self) -> Mapping[str, Any]:
        return {}

    def check_output_params(
        self, name: str, dims: Sequence[int] | None, key: str | None, where: str
    ) -> None:
        if key is None:
            raise FormatError(
                f"output '{name}' needs parameter 'outputs.{name}.action_key' for {where} "
                "(the action group, e.g. 'action.single_arm')"
            )

    def unsupported_action_space(self) -> str | None:
        return None

    # ---------------------------------------------------------------- the node's side
    def spec_fields(self, metadata: Mapping[str, Any], model: ModelSpec) -> dict[str, Any]:
        video_keys = _key_list("video_keys", metadata.get("video_keys"))
        state_groups = _widths("state_keys", metadata.get("state_keys"))
        action_keys = _key_list("action_keys", metadata.get("action_keys"))
        embodiment = metadata.get("embodiment")
        return {
            "camera_keys": video_keys,
            "max_cameras": len(video_keys),
            "all_cameras_required": True,
            "action_dim": None,
            "state_width": sum(state_groups.values()),
            "state_groups": state_groups,
            "action_groups": _action_groups(action_keys, state_groups),
            "embodiment": None if embodiment is None else str(embodiment),
        }

    def chunk_width(self, spec: SpecView) -> int:
        return sum(spec.action_groups.values())

    def check_cameras(self, keys: Sequence[str], spec: SpecView) -> None:
        allowed = spec.camera_keys
        for key in keys:
            if key not in allowed:
                raise FormatError(f"camera key {key!r} is not one of {list(allowed)}")
        # The embodiment needs every video key (the reference server refuses others).
        absent = [key for key in allowed if key not in keys]
        if absent:
            raise FormatError(
                f"GR00T embodiment {spec.embodiment!r} needs every video key "
                f"{list(allowed)}; no camera for {absent}"
            )

    def check_state_joints(self, joints: Sequence[str], spec: SpecView) -> None:
        if len(joints) != spec.state_width:
            raise FormatError(
                f"state_joints has {len(joints)} joints {list(joints)}; GR00T state_keys "
                f"{dict(spec.state_groups)} need {spec.state_width}"
            )

    def observation(
        self,
        images: Mapping[str, np.ndarray | bytes],
        state: np.ndarray,
        prompt: str,
        spec: SpecView,
    ) -> dict[str, Any]:
        video = {}
        for key, image in images.items():
            if isinstance(image, bytes):
                raise FormatError(
                    f"camera {key!r} is JPEG bytes; GR00T servers take raw arrays only"
                )
            video[key] = image[np.newaxis]
        if state.size != spec.state_width:
            raise FormatError(
                f"state has {state.size} values; GR00T state_keys {dict(spec.state_groups)} "
                f"need {spec.state_width}"
            )
        groups: dict[str, np.ndarray] = {}
        offset = 0
        for key, width in spec.state_groups.items():
            groups[key] = state[offset : offset + width].astype(np.float32).reshape(1, width)
            offset += width
        return {"video": video, "state": groups, "prompt": prompt}

    def check_actions(self, actions: Any) -> str | None:
        if (
            isinstance(actions, dict)
            and actions
            and all(
                isinstance(key, str) and isinstance(value, np.ndarray) and value.dtype.kind == "f"
                for key, value in actions.items()
            )
        ):
            return None
        return "a dict of float arrays, one per action group"

    def reply_to_chunk(self, reply: Any, spec: SpecView) -> np.ndarray:
        if not isinstance(reply, Mapping):
            raise FormatError(
                f"reply is a {type(reply).__name__}; expected an array (π0) or a dict of "
                "action groups (GR00T)"
            )
        order = list(spec.action_groups) or list(reply)
        missing = [k for k in order if k not in reply]
        extra = [k for k in reply if k not in order]
        if missing or extra:
            raise FormatError(
                f"reply action groups {list(reply)} do not match the expected groups {order}"
            )
        horizon = spec.action_horizon
        parts = []
        for key in order:
            part = np.asarray(reply[key])
            if part.ndim == 3 and part.shape[0] == 1:
                part = part[0]
            if part.ndim != 2:
                raise FormatError(
                    f"action group {key!r} has shape {np.shape(reply[key])}; expected (1, H, k)"
                )
            if part.shape[0] != horizon:
                raise FormatError(
                    f"action group {key!r} has {part.shape[0]} steps; metadata action_horizon "
                    f"is {horizon}"
                )
            width = spec.action_groups.get(key)
            if width is not None and part.shape[1] != width:
                raise FormatError(
                    f"action group {key!r} has width {part.shape[1]}; expected {width}"
                )
            parts.append(part)
        return np.concatenate(parts, axis=1).astype(np.float32)

    def observed(self, observation: Mapping[str, Any]) -> tuple[dict[str, Any], list[float]]:
        video = observation.get("video") or {}
        frames = {key: np.asarray(frame)[0] for key, frame in video.items()}
        groups = observation.get("state") or {}
        state = [float(v) for group in groups.values() for v in np.asarray(group).reshape(-1)]
        return frames, state

    def action_parts(self, spec: SpecView) -> tuple[ActionPart, ...]:
        parts, start = [], 0
        for key, width in spec.action_groups.items():
            parts.append(ActionPart(key, start, width, "joint_position"))
            start += width
        return tuple(parts)

    def output_dims(self, name: str, entry: Mapping[str, Any], spec: SpecView) -> list[int]:
        groups: dict[str, tuple[int, int]] = {}
        offset = 0
        for group, group_width in spec.action_groups.items():
            groups[group] = (offset, group_width)
            offset += group_width
        key = entry.get("action_key")
        if key not in groups:
            raise FormatError(f"output {name!r}: action_key {key!r} is not one of {list(groups)}")
        offset, group_width = groups[key]
        local = (
            int_list(name, "dims", entry["dims"]) if "dims" in entry else list(range(group_width))
        )
        for d in local:
            if not 0 <= d < group_width:
                raise FormatError(
                    f"output {name!r}: dim {d} is outside action group {key!r} "
                    f"(width {group_width}, dims 0..{group_width - 1})"
                )
        return [offset + d for d in local]

    # ---------------------------------------------------------------- the server's side
    def metadata_fields(self, model: ModelSpec, embodiment: Embodiment | None) -> dict[str, Any]:
        if embodiment is None:
            raise FormatError(f"model {model.id!r} needs an embodiment; none was given")
        return {
            **model.server_metadata,
            "action_keys": embodiment.action_keys,
            "embodiment": embodiment.name,
            "state_keys": embodiment.state_keys,
            "video_keys": list(embodiment.video_keys),
        }

    def action_width(self, metadata: Mapping[str, Any], embodiment: Embodiment | None) -> int:
        return _need(embodiment).action_dim

    def validator(
        self,
        metadata: Mapping[str, Any],
        *,
        embodiment: Embodiment | None,
        needs_session_id: bool,
        adapters: Sequence[str],
        prefix_horizon: int | None,
    ) -> Validator:
        return functools.partial(
            validate_groot,
            embodiment=_need(embodiment),
            needs_session_id=needs_session_id,
            adapters=tuple(adapters),
            prefix_horizon=prefix_horizon,
        )

    def reply_actions(
        self, flat: np.ndarray, embodiment: Embodiment | None
    ) -> np.ndarray | dict[str, np.ndarray]:
        return split_action_groups(flat, _need(embodiment).action_groups)


def _need(embodiment: Embodiment | None) -> Embodiment:
    if embodiment is None:
        raise FormatError("the GR00T format needs an embodiment; none was given")
    return embodiment


#: The one GR00T format object.
GROOT = GrootFormat()


def validate_groot(
    obs: Mapping[str, Any],
    *,
    embodiment: Embodiment,
    needs_session_id: bool,
    adapters: Sequence[str],
    prefix_horizon: int | None = None,
) -> Request:
    """Check a GR00T observation against ``embodiment``.

    ``prefix_horizon`` as in :func:`relay_ros.formats.pi.validate_pi`; the prefix is
    flat, action groups concatenated in ``action_keys`` order.

    Raises:
        ObservationError: the model cannot run on it (detail for the log).
        PublicRequestError: bad ``sampling_params.lora``.
    """
    lora, scale = check_sampling_params(obs.get("sampling_params"), adapters)
    prompt, session_id, seed = common_fields(obs, needs_session_id)
    video = obs.get("video")
    if not isinstance(video, Mapping):
        raise ObservationError(
            f"video is {type(video).__name__}; expected a map of {list(embodiment.video_keys)!r}"
        )
    if set(video) != set(embodiment.video_keys):
        raise ObservationError(
            f"video keys {shorten(sorted(video, key=str))} differ from the embodiment's "
            f"{list(embodiment.video_keys)!r}"
        )
    for key, frame in video.items():
        if isinstance(frame, (bytes, bytearray, memoryview)):
            raise ObservationError(f"video {key!r} is {len(frame)} bytes; GR00T takes raw arrays")
        if (
            not isinstance(frame, np.ndarray)
            or frame.dtype != np.uint8
            or frame.ndim != 4
            or frame.shape[0] != 1
            or frame.shape[3] != 3
            or 0 in frame.shape
        ):
            desc = (
                f"{frame.dtype} {frame.shape}"
                if isinstance(frame, np.ndarray)
                else type(frame).__name__
            )
            raise ObservationError(f"video {key!r} is {desc}; expected (1, H, W, 3) uint8")
    state = obs.get("state")
    if not isinstance(state, Mapping):
        raise ObservationError(
            f"state is {type(state).__name__}; expected a map of {embodiment.state_keys!r}"
        )
    if set(state) != set(embodiment.state_keys):
        raise ObservationError(
            f"state keys {shorten(sorted(state, key=str))} differ from the embodiment's "
            f"{list(embodiment.state_keys)!r}"
        )
    parts = []
    for key, width in embodiment.state_groups:
        group = finite_array(state[key], f"state {key!r}")
        if group.shape != (1, width):
            raise ObservationError(f"state {key!r} has shape {group.shape}; expected (1, {width})")
        parts.append(group.reshape(-1))
    keys = (
        check_action_prefix(obs, width=embodiment.action_dim, horizon=prefix_horizon)
        if prefix_horizon is not None
        else PrefixKeys()
    )
    return Request(
        np.concatenate(parts), prompt, session_id, seed, lora, scale, video, *prefix_fields(keys)
    )
