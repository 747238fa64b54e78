"""Metadata the reference server sends on connect, per model (protocol version 1).

The keys are exactly those of the protocol's metadata table; the per-model values
come from the model registry (:mod:`relay_ros.models`) and mirror the public π0/π0.5
and GR00T checkpoints (see docs/protocol.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from relay_ros.models import MODEL_IDS, family_of, get_model
from relay_ros.server.embodiment import Embodiment

__all__ = [
    "PI_CAMERA_KEYS",
    "PROTOCOL_VERSION",
    "build_metadata",
]

PROTOCOL_VERSION = 1
# Camera keys π0/π0.5 accept, in openpi's order (base camera first).
PI_CAMERA_KEYS = get_model("pi05").camera_keys


def build_metadata(
    model: str,
    *,
    lora_adapters: Sequence[str] = (),
    needs_session_id: bool = False,
    direct_url: str | None = None,
    embodiment: Embodiment | None = None,
    overrides: Mapping[str, Any] | None = None,
    action_prefix: bool = False,
) -> dict[str, Any]:
    """The metadata map for ``model``.

    Args:
        model: ``"pi05"``, ``"pi0"`` or ``"groot"``.
        lora_adapters: adapter names served (``[]`` = base model only).
        needs_session_id: whether observations must carry ``session_id``.
        direct_url: direct route to advertise, if any.
        embodiment: required for ``"groot"``.
        overrides: model-specific values from a custom policy's ``metadata`` (e.g. its
            ``action_horizon``); ``protocol``, ``model``, ``needs_session_id``,
            ``lora_adapters`` and ``direct_url`` always come from the server.
        action_prefix: advertise the ``action_prefix`` extension (``"action_prefix":
            true``): observations may carry the committed actions, and the chunk
            starts with them (docs/protocol.md, "Action prefix").

    Raises:
        ValueError: unknown model, or GR00T without an embodiment.
    """
    if model not in MODEL_IDS:
        raise ValueError(f"model {model!r} is not one of {list(MODEL_IDS)!r}")
    meta: dict[str, Any] = {"protocol": PROTOCOL_VERSION, "model": model}
    meta.update(get_model(model).server_metadata)
    if family_of(model) == "groot":
        if embodiment is None:
            raise ValueError("model 'groot' needs an embodiment; none was given")
        meta.update(
            action_keys=embodiment.action_keys,
            embodiment=embodiment.name,
            state_keys=embodiment.state_keys,
            video_keys=list(embodiment.video_keys),
        )
    if overrides:
        meta.update(overrides)
    meta.update(
        protocol=PROTOCOL_VERSION,
        model=model,
        needs_session_id=bool(needs_session_id),
        lora_adapters=list(lora_adapters),
    )
    if action_prefix:
        meta["action_prefix"] = True
    meta.pop("direct_url", None)
    if direct_url:
        meta["direct_url"] = direct_url
    return meta
