"""Metadata the reference server sends on connect, per model (protocol version 1).

The keys are exactly those of the protocol's metadata table; the per-model values
come from the model's wire format (:mod:`relay_ros.formats`: the registry's values
for π0/π0.5, the embodiment's groups for GR00T, a layout's horizon, rate and width)
and mirror the public checkpoints (see docs/protocol.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from relay_ros.formats import format_for
from relay_ros.formats.embodiment import Embodiment
from relay_ros.models import MODEL_IDS, get_model

__all__ = [
    "PROTOCOL_VERSION",
    "build_metadata",
]

PROTOCOL_VERSION = 1


def build_metadata(
    model: str,
    *,
    lora_adapters: Sequence[str] = (),
    needs_session_id: bool = False,
    direct_url: str | None = None,
    embodiment: Embodiment | None = None,
    overrides: Mapping[str, Any] | None = None,
    action_prefix: bool = False,
    layout: str | None = None,
) -> dict[str, Any]:
    """The metadata map for ``model`` (served in ``layout``'s format when given).

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
        layout: an openpi layout (a shipped name or a YAML path): its fields instead
            of the model's format's, plus ``layout`` with its name.

    Raises:
        ValueError: unknown model or layout, or GR00T without an embodiment.
    """
    if model not in MODEL_IDS:
        raise ValueError(f"model {model!r} is not one of {list(MODEL_IDS)!r}")
    meta: dict[str, Any] = {"protocol": PROTOCOL_VERSION, "model": model}
    meta.update(format_for(model, layout).metadata_fields(get_model(model), embodiment))
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
