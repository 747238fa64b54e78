"""The server's metadata, parsed once into what the node needs to know.

A policy server announces its model on connect (``PolicyClient.get_server_metadata()``,
the metadata table of docs/protocol.md). :meth:`ServerSpec.from_metadata` reads that
map once, checks it against the model the node is set to, fills in what an openpi
server leaves out, and refuses a map it cannot use with a sentence naming the field,
its value and what was expected. Observation assembly, reply conversion, the output
controllers and the chunk scheduler read the typed fields, never the dict.

Defaults for an openpi server, which sends less than the reference server:
``image_size`` [224, 224]; π0 family state padded to 32 (the openpi checkpoints'
``action_dim``), ``max_cameras`` from the model registry. ``action_dim`` stays None
when not announced, so a reply of any width is accepted and the output dims decide.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np

from relay_ros.models import Family, UnknownModelError, get_model
from relay_ros.pipeline.images import parse_image_size

__all__ = [
    "DEFAULT_IMAGE_SIZE",
    "DEFAULT_STATE_WIDTH",
    "ServerSpec",
    "ServerSpecError",
]

#: ``image_size`` used when the metadata has none (an openpi server), [height, width].
DEFAULT_IMAGE_SIZE: tuple[int, int] = (224, 224)

#: State width of the openpi π0 / π0.5 checkpoints (their ``action_dim``), used when
#: the metadata has no ``action_dim`` (an openpi server).
DEFAULT_STATE_WIDTH = 32


class ServerSpecError(ValueError):
    """The server metadata does not fit the node's model or misses a needed field."""


def _positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
        raise ServerSpecError(f"server metadata {name} is {value!r}; expected a positive integer")
    return int(value)


def _image_size(value: Any) -> tuple[int, int]:
    if value is None:
        return DEFAULT_IMAGE_SIZE
    try:
        return parse_image_size(value)
    except ValueError as exc:
        raise ServerSpecError(f"server metadata {exc}") from None


def _key_list(name: str, value: Any) -> tuple[str, ...]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence) or not value:
        raise ServerSpecError(
            f"GR00T server metadata {name} is {value!r}; expected a non-empty list"
        )
    return tuple(str(key) for key in value)


def _widths(name: str, value: Any) -> dict[str, int]:
    if not isinstance(value, Mapping) or not value:
        raise ServerSpecError(
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
            raise ServerSpecError(
                f"width of GR00T action group {key!r} is unknown: no state group "
                f"'state.{suffix}' in {list(state_widths)}"
            )
        groups[key] = width
    return groups


@dataclass(frozen=True)
class ServerSpec:
    """What a server announced, typed and checked (see the module docstring).

    Attributes:
        model: The model ID served (= the node's model).
        family: ``"pi"`` or ``"groot"``.
        action_horizon: Actions per chunk H.
        control_hz: Rate the actions are meant for, or None when not announced.
        image_size: Frames are resized to (height, width).
        needs_session_id: Observations must carry ``session_id``.
        needs_observation_time: Observations must carry ``observation_time`` (the
            recorded policy of ``relay-ros replay``, :mod:`relay_ros.server.recorded`).
        camera_keys: The camera keys the server accepts.
        max_cameras: Most cameras per observation.
        all_cameras_required: GR00T: every key of ``camera_keys`` needs a camera.
        action_dim: π0 family: the announced reply width, or None (openpi).
        state_width: π0 family: length the state is zero-padded to; GR00T: the
            sum of the state group widths.
        state_groups: GR00T: state key -> width, in metadata order (empty for π0).
        action_groups: GR00T: action key -> width, in metadata order (empty for π0).
        embodiment: GR00T: the embodiment name, if announced.
        action_prefix: The server takes ``action_prefix`` / ``committed_steps``
            (metadata ``"action_prefix": true``; docs/protocol.md, "Action prefix").
        metadata: The map as received, read-only.
    """

    model: str
    family: Family
    action_horizon: int
    control_hz: float | None
    image_size: tuple[int, int]
    needs_session_id: bool
    camera_keys: tuple[str, ...]
    max_cameras: int
    all_cameras_required: bool
    action_dim: int | None
    state_width: int
    state_groups: Mapping[str, int] = field(default_factory=dict)
    action_groups: Mapping[str, int] = field(default_factory=dict)
    embodiment: str | None = None
    action_prefix: bool = False
    needs_observation_time: bool = False
    metadata: Mapping[str, Any] = field(default_factory=dict)

    @property
    def chunk_width(self) -> int:
        """Width D of the flat chunk: ``action_dim`` (π0 family, default 32) or the
        sum of the GR00T action group widths."""
        if self.family == "groot":
            return sum(self.action_groups.values())
        return self.action_dim or DEFAULT_STATE_WIDTH

    @classmethod
    def from_metadata(cls, metadata: Mapping[str, Any], *, model: str) -> ServerSpec:
        """Parse and check ``metadata`` for a node set to ``model``.

        Raises:
            ServerSpecError: metadata that is not a map, a server serving another
                model, an unknown model, or a missing or malformed field (the
                message names the field, its value and what was expected).
        """
        if not isinstance(metadata, Mapping):
            raise ServerSpecError(
                f"server metadata is a {type(metadata).__name__}; expected a map (docs/protocol.md)"
            )
        try:
            info = get_model(model)
        except UnknownModelError as exc:
            raise ServerSpecError(str(exc)) from None
        served = metadata.get("model", model)
        if served != model:
            raise ServerSpecError(f"server serves model {served!r}, node is set to {model!r}")
        horizon = _positive_int("action_horizon", metadata.get("action_horizon"))
        control_hz = metadata.get("control_hz")
        if control_hz is not None:
            if isinstance(control_hz, bool) or not isinstance(
                control_hz, (int, float, np.integer, np.floating)
            ):
                raise ServerSpecError(
                    f"server metadata control_hz is {control_hz!r}; expected a number of Hz"
                )
            control_hz = float(control_hz) if control_hz > 0 else None
        common: dict[str, Any] = {
            "model": model,
            "family": info.family,
            "action_horizon": horizon,
            "control_hz": control_hz,
            "image_size": _image_size(metadata.get("image_size")),
            "needs_session_id": bool(metadata.get("needs_session_id", False)),
            "action_prefix": metadata.get("action_prefix") is True,
            "needs_observation_time": bool(metadata.get("needs_observation_time", False)),
            "metadata": MappingProxyType(dict(metadata)),
        }
        if info.family == "groot":
            video_keys = _key_list("video_keys", metadata.get("video_keys"))
            state_groups = _widths("state_keys", metadata.get("state_keys"))
            action_keys = _key_list("action_keys", metadata.get("action_keys"))
            embodiment = metadata.get("embodiment")
            return cls(
                **common,
                camera_keys=video_keys,
                max_cameras=len(video_keys),
                all_cameras_required=True,
                action_dim=None,
                state_width=sum(state_groups.values()),
                state_groups=MappingProxyType(state_groups),
                action_groups=MappingProxyType(_action_groups(action_keys, state_groups)),
                embodiment=None if embodiment is None else str(embodiment),
            )
        action_dim = metadata.get("action_dim")
        if action_dim is not None:
            action_dim = _positive_int("action_dim", action_dim)
        max_cameras = metadata.get("max_cameras")
        max_cameras = (
            info.max_cameras if max_cameras is None else _positive_int("max_cameras", max_cameras)
        )
        assert max_cameras is not None  # a pi-family registry entry always has one
        return cls(
            **common,
            camera_keys=info.camera_keys,
            max_cameras=max_cameras,
            all_cameras_required=False,
            action_dim=action_dim,
            state_width=action_dim or DEFAULT_STATE_WIDTH,
        )
