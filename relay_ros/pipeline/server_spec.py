"""The server's metadata, parsed once into what the node needs to know.

A policy server announces its model on connect (``PolicyClient.get_server_metadata()``,
the metadata table of docs/protocol.md). :meth:`ServerSpec.from_metadata` reads that
map once, checks it against the model the node is set to, fills in what an openpi
server leaves out, and refuses a map it cannot use with a sentence naming the field,
its value and what was expected. Observation assembly, reply conversion, the output
controllers and the chunk scheduler read the typed fields, never the dict.

What differs per wire format (camera keys, state and action widths, GR00T groups)
is read by the format object (:mod:`relay_ros.formats`), which the spec keeps as
``format``. Defaults for an openpi server, which sends less than the reference
server: ``image_size`` [224, 224]; π0 family state padded to 32 (the openpi
checkpoints' ``action_dim``), ``max_cameras`` from the model registry; with a layout,
its horizon, rate and image size. ``action_dim`` stays None when a π server does not
announce it, so a reply of any width is accepted and the output dims decide.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np

from relay_ros.formats import FormatError, WireFormat, format_for
from relay_ros.formats.pi import DEFAULT_STATE_WIDTH
from relay_ros.models import get_model
from relay_ros.pipeline.images import parse_image_size

__all__ = [
    "DEFAULT_IMAGE_SIZE",
    "DEFAULT_STATE_WIDTH",
    "ServerSpec",
    "ServerSpecError",
]

#: ``image_size`` used when the metadata has none (an openpi server), [height, width].
DEFAULT_IMAGE_SIZE: tuple[int, int] = (224, 224)


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


def _adapters(value: Any) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise ServerSpecError(
            f"server metadata lora_adapters is {value!r}; expected a list of adapter names"
        )
    return tuple(str(name) for name in value)


@dataclass(frozen=True)
class ServerSpec:
    """What a server announced, typed and checked (see the module docstring).

    Attributes:
        model: The model ID served (= the node's model).
        format: The wire format spoken (:func:`relay_ros.formats.format_for`): it
            builds observations, reads replies and maps outputs for this server.
        action_horizon: Actions per chunk H.
        control_hz: Rate the actions are meant for, or None when not announced.
        image_size: Frames are resized to (height, width).
        needs_session_id: Observations must carry ``session_id``.
        needs_observation_time: Observations must carry ``observation_time`` (the
            recorded policy of ``relay-ros replay``, :mod:`relay_ros.server.recorded`).
        camera_keys: The camera keys the server accepts.
        max_cameras: Most cameras per observation.
        all_cameras_required: Every key of ``camera_keys`` needs a camera (GR00T).
        action_dim: The announced reply width, or None (an openpi π server).
        state_width: π0 family: length the state is zero-padded to; GR00T: the
            sum of the state group widths; a layout: its state values.
        state_groups: GR00T: state key -> width, in metadata order (else empty).
        action_groups: GR00T: action key -> width, in metadata order (else empty).
        embodiment: GR00T: the embodiment name, if announced.
        action_prefix: The server takes ``action_prefix`` / ``committed_steps``
            (metadata ``"action_prefix": true``; docs/protocol.md, "Action prefix").
        lora_adapters: The adapter names the server serves (``lora_adapters``), or
            None when it does not say (an openpi server, which takes none).
        metadata: The map as received, read-only.
    """

    model: str
    format: WireFormat
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
    lora_adapters: tuple[str, ...] | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)

    @property
    def chunk_width(self) -> int:
        """Width D of the flat chunk (π0 family: ``action_dim``, default 32; GR00T: the
        sum of the action group widths; a layout: its action values)."""
        return self.format.chunk_width(self)

    @classmethod
    def from_metadata(
        cls,
        metadata: Mapping[str, Any],
        *,
        model: str,
        layout: str | os.PathLike[str] | None = None,
    ) -> ServerSpec:
        """Parse and check ``metadata`` for a node set to ``model`` (and ``layout``:
        the observation layout of a stock openpi server, when not empty).

        Raises:
            ServerSpecError: metadata that is not a map, a server serving another
                model, an unknown model or layout, or a missing or malformed field
                (the message names the field, its value and what was expected).
        """
        if not isinstance(metadata, Mapping):
            raise ServerSpecError(
                f"server metadata is a {type(metadata).__name__}; expected a map (docs/protocol.md)"
            )
        try:
            fmt = format_for(model, layout)
            info = get_model(model)
        except (FormatError, ValueError) as exc:
            raise ServerSpecError(str(exc)) from None
        served = metadata.get("model", model)
        if served != model:
            raise ServerSpecError(f"server serves model {served!r}, node is set to {model!r}")
        given = metadata
        metadata = {**fmt.metadata_defaults(), **metadata}
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
        try:
            fields = fmt.spec_fields(metadata, info)
        except FormatError as exc:
            raise ServerSpecError(str(exc)) from None
        for name in ("state_groups", "action_groups"):
            if name in fields:
                fields[name] = MappingProxyType(dict(fields[name]))
        return cls(
            model=model,
            format=fmt,
            action_horizon=horizon,
            control_hz=control_hz,
            image_size=_image_size(metadata.get("image_size")),
            needs_session_id=bool(metadata.get("needs_session_id", False)),
            action_prefix=metadata.get("action_prefix") is True,
            needs_observation_time=bool(metadata.get("needs_observation_time", False)),
            lora_adapters=_adapters(metadata.get("lora_adapters")),
            metadata=MappingProxyType(dict(given)),
            **fields,
        )
