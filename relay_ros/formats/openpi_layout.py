"""The openpi key-layout wire format: a stock openpi server's observation, from a :class:`Layout`.

openpi's ``serve_policy`` takes the observation of its environment as the layout
describes it (:mod:`relay_ros.formats.layout`) and answers ``{"actions": (H, D)}``
with the environment's action width (DROID 8, ALOHA 14). What the node sends:

- each camera's fitted frame under its key path, channel-first when the layout says
  ``CHW``, ``float32`` in [0, 1] when it says so, JPEG bytes only where allowed;
- the node's flat state vector split into the layout's parts, each a ``(width,)``
  array of the part's dtype (no padding: openpi's input transforms pad);
- ``prompt``, and the common optional keys the caller adds.

The reply's columns follow the layout's action parts; velocity parts are integrated
into positions by the node (:mod:`relay_ros.formats.action_space`). The reference
server (``relay-policy-server --layout NAME``) announces the layout's horizon, rate,
image size, action width and name, and checks every key, shape and dtype.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from relay_ros.formats.action_space import ActionPart, check_action_space, differentiate_positions
from relay_ros.formats.base import FormatError, SpecView, Validator, int_list
from relay_ros.formats.embodiment import Embodiment
from relay_ros.formats.layout import KeyPath, Layout
from relay_ros.formats.requests import (
    JPEG_MAGIC,
    ObservationError,
    PrefixKeys,
    Request,
    check_action_prefix,
    check_sampling_params,
    common_fields,
    finite_array,
    prefix_fields,
)
from relay_ros.models import ModelSpec

__all__ = ["LayoutFormat", "key_text", "validate_layout"]


def key_text(path: KeyPath) -> str:
    """A key path for messages: ``'observation/joint_position'``, ``images.cam_high``."""
    return repr(path[0]) if len(path) == 1 else ".".join(path)


def _put(obs: dict[str, Any], path: KeyPath, value: Any) -> None:
    node = obs
    for part in path[:-1]:
        node = node.setdefault(part, {})
    node[path[-1]] = value


def _find(obs: Mapping[str, Any], path: KeyPath) -> Any:
    node: Any = obs
    for part in path:
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


class LayoutFormat:
    """The format of one openpi layout (see the module docstring)."""

    single_array_reply = True
    needs_embodiment = False
    output_fields: tuple[str, ...] = ("topic", "joints", "dims")

    def __init__(self, layout: Layout) -> None:
        self.layout = layout

    @property
    def name(self) -> str:
        return f"layout {self.layout.name!r}"

    @property
    def jpeg_allowed(self) -> bool:
        return self.layout.jpeg

    # ---------------------------------------------------------------- before a server
    def camera_rules(self, model: ModelSpec) -> tuple[tuple[str, ...] | None, int | None]:
        return self.layout.camera_names, len(self.layout.cameras)

    def metadata_defaults(self) -> Mapping[str, Any]:
        layout = self.layout
        return {
            "action_horizon": layout.action_horizon,
            "control_hz": layout.control_hz,
            "image_size": list(layout.image_size),
        }

    def check_output_params(
        self, name: str, dims: Sequence[int] | None, key: str | None, where: str
    ) -> None:
        if dims is None:
            raise FormatError(
                f"output '{name}' needs parameter 'outputs.{name}.dims' for {where} "
                "(indices into the action vector, one per joint)"
            )

    def unsupported_action_space(self) -> str | None:
        for part in self.layout.actions:
            problem = check_action_space(part.space, f"{self.name} action part {part.name!r}")
            if problem is not None:
                return problem
        for state in self.layout.state:
            if state.space != "joint_position":
                return (
                    f"{self.name} state {key_text(state.key)} is {state.space!r}, not joint "
                    "positions: the node sends the joint states it reads, so it cannot fill it"
                )
        return None

    # ---------------------------------------------------------------- the node's side
    def spec_fields(self, metadata: Mapping[str, Any], model: ModelSpec) -> dict[str, Any]:
        layout = self.layout
        served = metadata.get("layout")
        if served is not None and served != layout.name:
            raise FormatError(f"server serves layout {served!r}, node is set to {layout.name!r}")
        action_dim = metadata.get("action_dim", layout.action_width)
        if action_dim != layout.action_width:
            raise FormatError(
                f"server metadata action_dim is {action_dim!r}; {self.name} has "
                f"{layout.action_width} action values"
            )
        return {
            "camera_keys": layout.camera_names,
            "max_cameras": len(layout.cameras),
            "all_cameras_required": False,
            "action_dim": layout.action_width,
            "state_width": layout.state_width,
        }

    def chunk_width(self, spec: SpecView) -> int:
        return self.layout.action_width

    def check_cameras(self, keys: Sequence[str], spec: SpecView) -> None:
        names = self.layout.camera_names
        for key in keys:
            if key not in names:
                raise FormatError(f"camera key {key!r} is not one of {list(names)}")
        absent = [c.name for c in self.layout.cameras if c.required and c.name not in keys]
        if absent:
            raise FormatError(
                f"{self.name} needs cameras {absent}; the camera map has {list(keys)}"
            )

    def check_state_joints(self, joints: Sequence[str], spec: SpecView) -> None:
        width = self.layout.state_width
        if len(joints) != width:
            parts = [f"{key_text(p.key)}: {p.width}" for p in self.layout.state]
            raise FormatError(
                f"state_joints has {len(joints)} joints {list(joints)}; {self.name} takes "
                f"{width} ({', '.join(parts)})"
            )
        offset = 0
        for part in self.layout.state:
            given = tuple(joints[offset : offset + part.width])
            if part.joints is not None and given != part.joints:
                raise FormatError(
                    f"{self.name} state {key_text(part.key)} is joints {list(part.joints)}; "
                    f"state_joints gives {list(given)} there"
                )
            offset += part.width

    def observation(
        self,
        images: Mapping[str, np.ndarray | bytes],
        state: np.ndarray,
        prompt: str,
        spec: SpecView,
    ) -> dict[str, Any]:
        layout = self.layout
        obs: dict[str, Any] = {}
        slots = {camera.name: camera for camera in layout.cameras}
        for name, image in images.items():
            if isinstance(image, bytes):
                if not layout.jpeg:
                    raise FormatError(f"camera {name!r} is JPEG bytes; {self.name} takes arrays")
                _put(obs, slots[name].key, image)
                continue
            if layout.image_layout == "CHW":
                image = np.ascontiguousarray(image.transpose(2, 0, 1))
            if layout.image_dtype == "float32":
                image = image.astype(np.float32) / np.float32(255.0)
            _put(obs, slots[name].key, image)
        if state.size != layout.state_width:
            raise FormatError(
                f"state has {state.size} values; {self.name} takes {layout.state_width}"
            )
        offset = 0
        for part in layout.state:
            _put(obs, part.key, state[offset : offset + part.width].astype(part.dtype))
            offset += part.width
        obs["prompt"] = prompt
        return obs

    def check_actions(self, actions: Any) -> str | None:
        if isinstance(actions, np.ndarray) and actions.ndim == 2 and actions.dtype.kind == "f":
            return None
        return "a 2-D float array (action_horizon, action_dim)"

    def reply_to_chunk(self, reply: Any, spec: SpecView) -> np.ndarray:
        if not isinstance(reply, np.ndarray) or reply.ndim != 2:
            shape = reply.shape if isinstance(reply, np.ndarray) else type(reply).__name__
            raise FormatError(
                f"actions are {shape}; {self.name} expects an (action_horizon, "
                f"{self.layout.action_width}) array"
            )
        expected = (spec.action_horizon, self.layout.action_width)
        if reply.shape != expected:
            raise FormatError(
                f"actions have shape {reply.shape}; {self.name} expects {expected} "
                "(action_horizon from the server's metadata, else the layout's)"
            )
        return np.array(reply, dtype=np.float32)

    def action_parts(self, spec: SpecView) -> tuple[ActionPart, ...]:
        return self.layout.actions

    def observed(self, observation: Mapping[str, Any]) -> tuple[dict[str, Any], list[float]]:
        frames: dict[str, Any] = {}
        for camera in self.layout.cameras:
            image = _find(observation, camera.key)
            if image is None:
                continue
            chw = self.layout.image_layout == "CHW" and isinstance(image, np.ndarray)
            frames[camera.name] = image.transpose(1, 2, 0) if chw else image
        state: list[float] = []
        for part in self.layout.state:
            value = _find(observation, part.key)
            if value is not None:
                state += np.asarray(value, dtype=np.float64).reshape(-1).tolist()
        return frames, state

    def output_dims(self, name: str, entry: Mapping[str, Any], spec: SpecView) -> list[int]:
        width = self.layout.action_width
        if "dims" not in entry:
            raise FormatError(
                f"output {name!r}: missing dims (indices into the {width} action dims)"
            )
        dims = int_list(name, "dims", entry["dims"])
        parts = ", ".join(
            f"{p.name} {p.start}..{p.start + p.width - 1}" for p in self.layout.actions
        )
        for d in dims:
            if not 0 <= d < width:
                raise FormatError(
                    f"output {name!r}: dim {d} is outside 0..{width - 1} ({self.name}: {parts})"
                )
        return dims

    # ---------------------------------------------------------------- the server's side
    def metadata_fields(self, model: ModelSpec, embodiment: Embodiment | None) -> dict[str, Any]:
        return {
            **self.metadata_defaults(),
            "action_dim": self.layout.action_width,
            "layout": self.layout.name,
        }

    def action_width(self, metadata: Mapping[str, Any], embodiment: Embodiment | None) -> int:
        return self.layout.action_width

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
            validate_layout,
            layout=self.layout,
            needs_session_id=needs_session_id,
            adapters=tuple(adapters),
            prefix_horizon=prefix_horizon,
        )

    def reply_actions(
        self, flat: np.ndarray, embodiment: Embodiment | None
    ) -> np.ndarray | dict[str, np.ndarray]:
        """The reference policy plans positions; velocity parts get their rates, so the
        node's integration from the same start gives the plan back."""
        return differentiate_positions(flat, self.layout.actions, 1.0 / self.layout.control_hz)


def _check_image(name: str, image: Any, layout: Layout) -> None:
    height, width = layout.image_size
    shape = (3, height, width) if layout.image_layout == "CHW" else (height, width, 3)
    if isinstance(image, (bytes, bytearray, memoryview)):
        if not layout.jpeg:
            raise ObservationError(
                f"camera {name!r} is {len(image)} bytes; the layout takes arrays"
            )
        if not bytes(image[:3]) == JPEG_MAGIC:
            raise ObservationError(f"camera {name!r}: bytes that are not JPEG")
        return
    if not isinstance(image, np.ndarray):
        raise ObservationError(f"camera {name!r} is {type(image).__name__}; expected an array")
    if image.shape != shape or image.dtype != np.dtype(layout.image_dtype):
        raise ObservationError(
            f"camera {name!r} is {image.dtype} {image.shape}; expected {layout.image_dtype} "
            f"{shape} ({layout.image_layout})"
        )
    if image.dtype.kind == "f":
        low, high = float(image.min()), float(image.max())
        if not (np.isfinite(low) and np.isfinite(high) and 0.0 <= low and high <= 1.0):
            raise ObservationError(f"camera {name!r} values span [{low}, {high}]; expected [0, 1]")


def validate_layout(
    obs: Mapping[str, Any],
    *,
    layout: Layout,
    needs_session_id: bool,
    adapters: Sequence[str],
    prefix_horizon: int | None = None,
) -> Request:
    """Check an observation in ``layout``: every camera key path (required ones
    present), every state part's shape and dtype, the common keys. The request's
    images are keyed by the layout's camera names, channel-last.

    Raises:
        ObservationError: the model cannot run on it (detail for the log).
        PublicRequestError: bad ``sampling_params.lora``.
    """
    lora, scale = check_sampling_params(obs.get("sampling_params"), adapters)
    prompt, session_id, seed = common_fields(obs, needs_session_id)
    images: dict[str, Any] = {}
    for camera in layout.cameras:
        image = _find(obs, camera.key)
        if image is None:
            if camera.required:
                raise ObservationError(
                    f"no frame at {key_text(camera.key)} (camera {camera.name!r})"
                )
            continue
        _check_image(camera.name, image, layout)
        # The policy sees every layout's frames as (H, W, 3).
        chw = layout.image_layout == "CHW" and isinstance(image, np.ndarray)
        images[camera.name] = image.transpose(1, 2, 0) if chw else image
    parts = []
    for part in layout.state:
        value = _find(obs, part.key)
        if value is None:
            raise ObservationError(f"no state at {key_text(part.key)}")
        if not isinstance(value, np.ndarray) or value.dtype != np.dtype(part.dtype):
            got = value.dtype if isinstance(value, np.ndarray) else type(value).__name__
            raise ObservationError(f"state {key_text(part.key)} is {got}; expected {part.dtype}")
        array = finite_array(value, f"state {key_text(part.key)}")
        if array.shape != (part.width,):
            raise ObservationError(
                f"state {key_text(part.key)} has shape {array.shape}; expected ({part.width},)"
            )
        parts.append(array)
    keys = (
        check_action_prefix(obs, width=layout.action_width, horizon=prefix_horizon)
        if prefix_horizon is not None
        else PrefixKeys()
    )
    state = np.concatenate(parts).astype(np.float32)
    return Request(state, prompt, session_id, seed, lora, scale, images, *prefix_fields(keys))
