"""What every wire format provides, and the pieces the formats share.

A *wire format* is everything that differs between the servers relay_ros talks to:
how an observation is laid out (keys, nesting, image layout, state packing), what a
reply holds and how it becomes one flat ``(H, D)`` chunk, which metadata fields the
server announces, how the node's output controllers address the chunk's columns,
and how the reference server checks an observation. :class:`WireFormat` is that
interface; each variant is one module of this package (:mod:`~relay_ros.formats.pi`,
:mod:`~relay_ros.formats.groot`, :mod:`~relay_ros.formats.openpi_layout`), found
through :func:`relay_ros.formats.format_for`.

The node-side methods take a :class:`SpecView`: the server as the node parsed it
(:class:`relay_ros.pipeline.server_spec.ServerSpec` has these fields). Errors are
:class:`FormatError` with a sentence naming the bad value and what was expected;
the caller turns it into its own error type, message unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from relay_ros.formats.action_space import ActionPart
from relay_ros.formats.embodiment import Embodiment
from relay_ros.formats.requests import Request
from relay_ros.models import ModelSpec

__all__ = [
    "FormatError",
    "SpecView",
    "Validator",
    "WireFormat",
    "int_list",
]

#: A reference-server check of one decoded observation (raises the errors of
#: :mod:`relay_ros.formats.requests`).
Validator = Callable[[Mapping[str, Any]], Request]


class FormatError(ValueError):
    """An observation, reply, metadata or configuration does not fit the wire format."""


class SpecView(Protocol):
    """The fields of a parsed server a format reads (``ServerSpec`` has them)."""

    @property
    def model(self) -> str: ...
    @property
    def action_horizon(self) -> int: ...
    @property
    def image_size(self) -> tuple[int, int]: ...
    @property
    def camera_keys(self) -> tuple[str, ...]: ...
    @property
    def max_cameras(self) -> int: ...
    @property
    def action_dim(self) -> int | None: ...
    @property
    def state_width(self) -> int: ...
    @property
    def state_groups(self) -> Mapping[str, int]: ...
    @property
    def action_groups(self) -> Mapping[str, int]: ...
    @property
    def embodiment(self) -> str | None: ...


class WireFormat(Protocol):
    """One wire format: the node's side (observation, reply, outputs) and the
    reference server's side (metadata, validation, reply). See the module docstring."""

    @property
    def name(self) -> str:
        """For messages: ``"pi"``, ``"groot"``, ``"layout 'droid'"``."""
        ...

    @property
    def jpeg_allowed(self) -> bool:
        """Whether frames may travel as JPEG bytes."""
        ...

    @property
    def single_array_reply(self) -> bool:
        """Whether the reply's actions are one ``(H, D)`` array (else a dict of groups)."""
        ...

    @property
    def needs_embodiment(self) -> bool:
        """Whether the reference server needs a GR00T embodiment for it."""
        ...

    @property
    def output_fields(self) -> tuple[str, ...]:
        """The fields of one ``outputs.<name>`` entry."""
        ...

    # ---------------------------------------------------------------- before a server
    def camera_rules(self, model: ModelSpec) -> tuple[tuple[str, ...] | None, int | None]:
        """``(allowed camera keys, maximum)`` known before a server answers (None: from
        its metadata)."""
        ...

    def metadata_defaults(self) -> Mapping[str, Any]:
        """Values assumed when a server's metadata leaves them out."""
        ...

    def check_output_params(
        self, name: str, dims: Sequence[int] | None, key: str | None, where: str
    ) -> None:
        """Refuse an output whose parameters cannot address this format's chunk
        (``where``: ``"model pi05"``, for the message)."""
        ...

    def unsupported_action_space(self) -> str | None:
        """Why joint trajectory controllers cannot execute the actions, or None."""
        ...

    # ---------------------------------------------------------------- the node's side
    def spec_fields(self, metadata: Mapping[str, Any], model: ModelSpec) -> dict[str, Any]:
        """The format's fields of a parsed server (camera keys, state and action
        widths, groups) from its metadata."""
        ...

    def chunk_width(self, spec: SpecView) -> int:
        """Width ``D`` of the flat chunk."""
        ...

    def check_cameras(self, keys: Sequence[str], spec: SpecView) -> None:
        """Refuse camera keys the server does not take (unknown, too many, missing)."""
        ...

    def check_state_joints(self, joints: Sequence[str], spec: SpecView) -> None:
        """Refuse a state vector of ``len(joints)`` values the server cannot take."""
        ...

    def observation(
        self,
        images: Mapping[str, np.ndarray | bytes],
        state: np.ndarray,
        prompt: str,
        spec: SpecView,
    ) -> dict[str, Any]:
        """The observation map of fitted HWC uint8 frames (or JPEG bytes), the flat
        finite state vector and the prompt; the optional keys are added by the caller."""
        ...

    def check_actions(self, actions: Any) -> str | None:
        """None when a reply's ``actions`` have this format's type, else what was expected."""
        ...

    def reply_to_chunk(self, reply: Any, spec: SpecView) -> np.ndarray:
        """A successful reply's actions as one new float32 ``(H, D)`` chunk."""
        ...

    def observed(self, observation: Mapping[str, Any]) -> tuple[dict[str, Any], list[float]]:
        """What one of its observations shows the model: camera key -> frame ((H, W, 3)
        array or JPEG bytes) and the state values, flat, in order (for the debug topics
        and ``--save-observations``)."""
        ...

    def action_parts(self, spec: SpecView) -> tuple[ActionPart, ...]:
        """The chunk's columns in runs of one action space each."""
        ...

    def output_dims(self, name: str, entry: Mapping[str, Any], spec: SpecView) -> list[int]:
        """The flat chunk columns one output entry drives."""
        ...

    # ---------------------------------------------------------------- the server's side
    def metadata_fields(self, model: ModelSpec, embodiment: Embodiment | None) -> dict[str, Any]:
        """What the reference server announces for ``model`` besides the protocol fields."""
        ...

    def action_width(self, metadata: Mapping[str, Any], embodiment: Embodiment | None) -> int:
        """Width of the flat chunk the reference server's policy makes."""
        ...

    def validator(
        self,
        metadata: Mapping[str, Any],
        *,
        embodiment: Embodiment | None,
        needs_session_id: bool,
        adapters: Sequence[str],
        prefix_horizon: int | None,
    ) -> Validator:
        """The reference server's check of one observation for a server announcing
        ``metadata``."""
        ...

    def reply_actions(
        self, flat: np.ndarray, embodiment: Embodiment | None
    ) -> np.ndarray | dict[str, np.ndarray]:
        """The reply's ``actions`` for the reference server's flat ``(H, D)`` chunk."""
        ...


def int_list(name: str, field: str, value: Any) -> list[int]:
    """``value`` as a list of ints, for output ``name``'s ``field``.

    Raises:
        FormatError: not a list, or an item that is not an integer.
    """
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise FormatError(f"output {name!r}: {field} must be a list of integers, got {value!r}")
    out = []
    for item in value:
        if isinstance(item, bool) or not isinstance(item, (int, np.integer)):
            raise FormatError(f"output {name!r}: {field} has {item!r}; expected integers")
        out.append(int(item))
    return out
