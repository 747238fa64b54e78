"""The models relay_ros knows: one registry entry per model ID.

A model ID (``pi05``, ``pi0``, ``groot``) names a checkpoint served on ``/{model}``.
Everything that differs between models and is known before a server answers lives
in its :class:`ModelSpec`: its family (the name of the wire format it speaks, an
object of :mod:`relay_ros.formats`), the camera keys a π0-family server accepts, and
the metadata the reference server announces for it.
Whatever a server announces itself (horizon, image size, GR00T groups) is read from
its metadata (:class:`relay_ros.pipeline.server_spec.ServerSpec`).

Adding a member of an existing family, e.g. ``pi05_droid``, is one entry in
``_BUILTIN`` below plus its ``config/<id>.yaml`` (node parameters) and
``config/<id>_cameras.yaml`` (camera map). The environment (``WALLE_URL``), the
reference server, the node, the demo and ``relay-ros replay`` all read the IDs here.

:data:`MODEL_IDS` is a live view: a model added with :func:`register_model` (a
plug-in, a test) is accepted everywhere at once.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, overload

__all__ = [
    "MODEL_IDS",
    "ModelSpec",
    "UnknownModelError",
    "get_model",
    "register_model",
    "unregister_model",
]

#: Camera keys of the openpi π0/π0.5 checkpoints, base camera first.
_PI_CAMERA_KEYS = ("base_0_rgb", "left_wrist_0_rgb", "right_wrist_0_rgb")


class UnknownModelError(ValueError):
    """A model ID that is not in the registry."""


@dataclass(frozen=True)
class ModelSpec:
    """One model ID and what is known about it before a server answers.

    Attributes:
        id: The model ID, the ``{model}`` of ``WALLE_URL`` and the server path.
        family: The name of its wire format in ``relay_ros.formats.FORMATS``
            (``"pi"``, ``"groot"``); an unknown name is refused where the format is
            looked up.
        description: One line for help texts.
        camera_keys: π0 family: the camera keys the server accepts (empty: the
            openpi three). GR00T: empty, the keys are the embodiment's
            ``video_keys`` from the metadata.
        max_cameras: π0 family: most cameras per observation before the metadata
            says otherwise (None: one per camera key). GR00T: None (every video key).
        server_metadata: What the reference server announces for this model
            besides the protocol fields (GR00T adds its embodiment's groups).
    """

    id: str
    family: str
    description: str
    camera_keys: tuple[str, ...] = ()
    max_cameras: int | None = None
    server_metadata: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id or "/" in self.id:
            raise ValueError(f"model id {self.id!r} must be a non-empty string without '/'")
        if not isinstance(self.family, str) or not self.family:
            raise ValueError(f"model {self.id!r}: family {self.family!r} must name a wire format")
        object.__setattr__(self, "camera_keys", tuple(self.camera_keys))
        object.__setattr__(self, "server_metadata", MappingProxyType(dict(self.server_metadata)))


_PI_SERVER_METADATA: dict[str, Any] = {
    "action_horizon": 50,
    "image_size": [224, 224],
    "control_hz": 50.0,
    "action_dim": 32,
    "max_cameras": 3,
    "action_space": "joint_position",
}

_BUILTIN: tuple[ModelSpec, ...] = (
    ModelSpec(
        "pi05",
        "pi",
        "openpi π0.5",
        camera_keys=_PI_CAMERA_KEYS,
        max_cameras=3,
        server_metadata=_PI_SERVER_METADATA,
    ),
    ModelSpec(
        "pi0",
        "pi",
        "openpi π0",
        camera_keys=_PI_CAMERA_KEYS,
        max_cameras=3,
        server_metadata=_PI_SERVER_METADATA,
    ),
    ModelSpec(
        "groot",
        "groot",
        "NVIDIA GR00T N1.5",
        server_metadata={"action_horizon": 16, "image_size": [224, 224], "control_hz": 30.0},
    ),
)

_REGISTRY: dict[str, ModelSpec] = {spec.id: spec for spec in _BUILTIN}


class _ModelIds(Sequence[str]):
    """The registered model IDs in registration order, read at each use."""

    @overload
    def __getitem__(self, index: int) -> str: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[str]: ...
    def __getitem__(self, index: int | slice) -> str | Sequence[str]:
        return tuple(_REGISTRY)[index]

    def __len__(self) -> int:
        return len(_REGISTRY)

    def __iter__(self) -> Iterator[str]:
        return iter(tuple(_REGISTRY))

    def __contains__(self, value: object) -> bool:
        return isinstance(value, str) and value in _REGISTRY

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (_ModelIds, tuple, list)):
            return tuple(_REGISTRY) == tuple(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(_REGISTRY))

    def __repr__(self) -> str:
        return repr(tuple(_REGISTRY))


#: Every registered model ID (``pi05``, ``pi0``, ``groot`` and any registered later).
MODEL_IDS: Sequence[str] = _ModelIds()


def get_model(model_id: str) -> ModelSpec:
    """The registry entry of ``model_id``.

    Raises:
        UnknownModelError: not a registered ID (the message lists the known ones).
    """
    try:
        return _REGISTRY[model_id]
    except (KeyError, TypeError):
        raise UnknownModelError(f"model {model_id!r} is not one of {list(_REGISTRY)}") from None


def register_model(spec: ModelSpec) -> None:
    """Add a model at run time (a plug-in or a test); its ID must be new.

    Raises:
        ValueError: the ID is registered already.
    """
    if spec.id in _REGISTRY:
        raise ValueError(f"model {spec.id!r} is registered already")
    _REGISTRY[spec.id] = spec


def unregister_model(model_id: str) -> None:
    """Remove a model added with :func:`register_model`; built-in models stay.

    Raises:
        ValueError: ``model_id`` is built in or not registered.
    """
    if any(spec.id == model_id for spec in _BUILTIN):
        raise ValueError(f"model {model_id!r} is built in and cannot be removed")
    if _REGISTRY.pop(model_id, None) is None:
        raise UnknownModelError(f"model {model_id!r} is not registered")
