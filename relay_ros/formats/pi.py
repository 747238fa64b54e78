"""The seeds' π0 / π0.5 wire format (openpi's model inputs, as the seeds' server takes them).

Observation: ``{"images": {key: (H, W, 3) uint8 or JPEG bytes}, "state": float32
(state_width,), "prompt": str, ...}`` with the camera keys ``base_0_rgb``,
``left_wrist_0_rgb``, ``right_wrist_0_rgb`` (at most ``max_cameras``, at least one);
the state is zero-padded to the server's ``action_dim`` (32 on the openpi
checkpoints, assumed when the metadata has none). Reply: one float ``(H,
action_dim)`` array. Output controllers name chunk columns with ``dims``. Every
column is a joint position.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from relay_ros.formats.action_space import ActionPart
from relay_ros.formats.base import FormatError, SpecView, Validator, int_list
from relay_ros.formats.embodiment import Embodiment
from relay_ros.formats.requests import (
    ObservationError,
    PrefixKeys,
    Request,
    check_action_prefix,
    check_frame,
    check_sampling_params,
    common_fields,
    finite_array,
    prefix_fields,
)
from relay_ros.logsafe import shorten
from relay_ros.models import ModelSpec

__all__ = ["DEFAULT_STATE_WIDTH", "PI", "PI_CAMERA_KEYS", "PiFormat", "validate_pi"]

#: Camera keys of the openpi π0/π0.5 checkpoints, base camera first.
PI_CAMERA_KEYS: tuple[str, ...] = ("base_0_rgb", "left_wrist_0_rgb", "right_wrist_0_rgb")

#: State width of the openpi π0 / π0.5 checkpoints (their ``action_dim``), used when
#: the metadata has no ``action_dim`` (an openpi server).
DEFAULT_STATE_WIDTH = 32


def _positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
        raise FormatError(f"server metadata {name} is {value!r}; expected a positive integer")
    return int(value)


class PiFormat:
    """The π0/π0.5 format (see the module docstring)."""

    name = "pi"
    jpeg_allowed = True
    single_array_reply = True
    needs_embodiment = False
    output_fields: tuple[str, ...] = ("topic", "joints", "dims")

    # ---------------------------------------------------------------- before a server
    def camera_rules(self, model: ModelSpec) -> tuple[tuple[str, ...] | None, int | None]:
        keys = model.camera_keys or PI_CAMERA_KEYS
        return keys, model.max_cameras or len(keys)

    def metadata_defaults(self) -> Mapping[str, Any]:
        return {}

    def check_output_params(
        self, name: str, dims: Sequence[int] | None, key: str | None, where: str
    ) -> None:
        if dims is None:
            raise FormatError(
                f"output '{name}' needs parameter 'outputs.{name}.dims' for {where} "
                "(indices into the action vector, one per joint)"
            )

    def unsupported_action_space(self) -> str | None:
        return None

    # ---------------------------------------------------------------- the node's side
    def spec_fields(self, metadata: Mapping[str, Any], model: ModelSpec) -> dict[str, Any]:
        action_dim = metadata.get("action_dim")
        if action_dim is not None:
            action_dim = _positive_int("action_dim", action_dim)
        keys, default_max = self.camera_rules(model)
        max_cameras = metadata.get("max_cameras")
        max_cameras = (
            default_max if max_cameras is None else _positive_int("max_cameras", max_cameras)
        )
        return {
            "camera_keys": keys,
            "max_cameras": max_cameras,
            "all_cameras_required": False,
            "action_dim": action_dim,
            "state_width": action_dim or DEFAULT_STATE_WIDTH,
        }

    def chunk_width(self, spec: SpecView) -> int:
        return spec.action_dim or DEFAULT_STATE_WIDTH

    def check_cameras(self, keys: Sequence[str], spec: SpecView) -> None:
        for key in keys:
            if key not in spec.camera_keys:
                raise FormatError(f"camera key {key!r} is not one of {list(spec.camera_keys)}")
        if len(keys) > spec.max_cameras:
            raise FormatError(
                f"{len(keys)} cameras {list(keys)} exceed max_cameras={spec.max_cameras}"
            )

    def check_state_joints(self, joints: Sequence[str], spec: SpecView) -> None:
        if len(joints) > spec.state_width:
            raise FormatError(
                f"state_joints has {len(joints)} joints; {spec.model} takes at most "
                f"action_dim={spec.state_width}"
            )

    def observation(
        self,
        images: Mapping[str, np.ndarray | bytes],
        state: np.ndarray,
        prompt: str,
        spec: SpecView,
    ) -> dict[str, Any]:
        if state.size > spec.state_width:
            raise FormatError(
                f"state has {state.size} values; {spec.model} takes at most "
                f"action_dim={spec.state_width}"
            )
        padded = np.zeros(spec.state_width, dtype=np.float32)
        padded[: state.size] = state
        return {"images": dict(images), "state": padded, "prompt": prompt}

    def check_actions(self, actions: Any) -> str | None:
        if isinstance(actions, np.ndarray) and actions.ndim == 2 and actions.dtype.kind == "f":
            return None
        return "a 2-D float array (action_horizon, action_dim)"

    def reply_to_chunk(self, reply: Any, spec: SpecView) -> np.ndarray:
        if not isinstance(reply, np.ndarray):
            raise FormatError(
                f"reply is a {type(reply).__name__}; expected an array (π0) or a dict of "
                "action groups (GR00T)"
            )
        if reply.ndim != 2:
            raise FormatError(
                f"actions have shape {reply.shape}; expected (action_horizon, action_dim)"
            )
        horizon, dim = spec.action_horizon, spec.action_dim
        if reply.shape[0] != horizon or (dim is not None and reply.shape[1] != dim):
            raise FormatError(f"actions have shape {reply.shape}; metadata says ({horizon}, {dim})")
        return np.array(reply, dtype=np.float32)

    def action_parts(self, spec: SpecView) -> tuple[ActionPart, ...]:
        return (ActionPart("actions", 0, self.chunk_width(spec), "joint_position"),)

    def observed(self, observation: Mapping[str, Any]) -> tuple[dict[str, Any], list[float]]:
        state = np.asarray(observation.get("state", ()), dtype=np.float64).reshape(-1)
        return dict(observation.get("images") or {}), state.tolist()

    def output_dims(self, name: str, entry: Mapping[str, Any], spec: SpecView) -> list[int]:
        width = self.chunk_width(spec)
        if "dims" not in entry:
            raise FormatError(
                f"output {name!r}: missing dims (indices into the {width} action dims)"
            )
        dims = int_list(name, "dims", entry["dims"])
        for d in dims:
            if not 0 <= d < width:
                raise FormatError(
                    f"output {name!r}: dim {d} is outside 0..{width - 1} (action_dim {width})"
                )
        return dims

    # ---------------------------------------------------------------- the server's side
    def metadata_fields(self, model: ModelSpec, embodiment: Embodiment | None) -> dict[str, Any]:
        return dict(model.server_metadata)

    def action_width(self, metadata: Mapping[str, Any], embodiment: Embodiment | None) -> int:
        return int(metadata["action_dim"])

    def validator(
        self,
        metadata: Mapping[str, Any],
        *,
        embodiment: Embodiment | None,
        needs_session_id: bool,
        adapters: Sequence[str],
        prefix_horizon: int | None,
    ) -> Validator:
        try:
            action_dim, max_cameras = int(metadata["action_dim"]), int(metadata["max_cameras"])
        except (KeyError, TypeError, ValueError):
            problem = (
                f"metadata action_dim {metadata.get('action_dim')!r} / max_cameras "
                f"{metadata.get('max_cameras')!r} are not integers"
            )
            return functools.partial(_unusable, problem)
        return functools.partial(
            validate_pi,
            action_dim=action_dim,
            camera_keys=PI_CAMERA_KEYS,
            max_cameras=max_cameras,
            needs_session_id=needs_session_id,
            adapters=tuple(adapters),
            prefix_horizon=prefix_horizon,
        )

    def reply_actions(
        self, flat: np.ndarray, embodiment: Embodiment | None
    ) -> np.ndarray | dict[str, np.ndarray]:
        return flat


def _unusable(problem: str, obs: Mapping[str, Any]) -> Request:
    """A validator for metadata a custom policy made unusable: every observation fails."""
    raise ObservationError(problem)


#: The one π format object.
PI = PiFormat()


def validate_pi(
    obs: Mapping[str, Any],
    *,
    action_dim: int,
    camera_keys: Sequence[str],
    max_cameras: int,
    needs_session_id: bool,
    adapters: Sequence[str],
    prefix_horizon: int | None = None,
) -> Request:
    """Check a π0/π0.5 observation.

    ``prefix_horizon`` (the action horizon) turns on the ``action_prefix`` checks;
    None (the extension not advertised) ignores those keys.

    Raises:
        ObservationError: the model cannot run on it (detail for the log).
        PublicRequestError: bad ``sampling_params.lora``.
    """
    lora, scale = check_sampling_params(obs.get("sampling_params"), adapters)
    prompt, session_id, seed = common_fields(obs, needs_session_id)
    images = obs.get("images")
    if not isinstance(images, Mapping):
        raise ObservationError(
            f"images is {type(images).__name__}; expected a map of camera key -> frame"
        )
    unknown = [k for k in images if k not in camera_keys]
    if unknown:
        raise ObservationError(
            f"camera key {shorten(unknown[0], 80)} is not one of {list(camera_keys)!r}"
        )
    if not images:
        raise ObservationError(f"no camera frames; expected at least one of {list(camera_keys)!r}")
    if len(images) > max_cameras:
        raise ObservationError(f"{len(images)} cameras; at most {max_cameras} allowed")
    for key, frame in images.items():
        check_frame(key, frame)
    if "state" not in obs:
        raise ObservationError(f"observation has no state; expected float32 ({action_dim},)")
    state = finite_array(obs["state"], "state")
    if state.shape not in ((action_dim,), (1, action_dim)):
        raise ObservationError(
            f"state has shape {state.shape}; expected ({action_dim},) or (1, {action_dim})"
        )
    keys = (
        check_action_prefix(obs, width=action_dim, horizon=prefix_horizon)
        if prefix_horizon is not None
        else PrefixKeys()
    )
    return Request(
        state.reshape(-1), prompt, session_id, seed, lora, scale, images, *prefix_fields(keys)
    )
