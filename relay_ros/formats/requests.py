"""The request checks every wire format's server side shares (the reference server's).

Each format (:mod:`relay_ros.formats`) checks its own observation layout with these
pieces: the common keys (``prompt``, ``session_id``, ``seed``), ``sampling_params``
(the LoRA adapter), the ``action_prefix`` extension, finite arrays and π-style
frames (HxWx3 arrays or JPEG bytes). Pure functions over decoded frames. Two kinds
of failure:

- :class:`ObservationError` carries an *internal* detail ("state has shape (31,) ...")
  that the server logs; the client only ever receives ``Internal inference error``,
  because details of a model's inputs may be security-sensitive.
- :class:`PublicRequestError` carries a message fixed by the protocol that is sent
  verbatim (the LoRA errors).

A frame that is not a msgpack map is not handled here: the app answers
``Invalid request payload`` before calling these checks.

Messages quote client values through :func:`relay_ros.logsafe.shorten`, so a
huge value never makes a huge log line. JPEG frames are measured from their header
(:func:`relay_ros.image_size.jpeg_size`) before they are decoded: a few hundred bytes can declare a
16000 x 16000 image, and frames over :data:`MAX_JPEG_PIXELS` are refused undecoded.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from relay_ros.image_size import MAX_FRAME_PIXELS, jpeg_size
from relay_ros.logsafe import shorten

__all__ = [
    "INTERNAL_ERROR",
    "INVALID_PAYLOAD",
    "JPEG_MAGIC",
    "MAX_JPEG_PIXELS",
    "MAX_SESSION_ID_CHARS",
    "ObservationError",
    "PublicRequestError",
    "Request",
    "PREFIX_KEYS",
    "PrefixKeys",
    "check_action_prefix",
    "check_frame",
    "check_sampling_params",
    "common_fields",
    "finite_array",
    "jpeg_size",
    "prefix_fields",
]

INTERNAL_ERROR = "Internal inference error"
INVALID_PAYLOAD = "Invalid request payload"
# Every JPEG (JFIF, EXIF, raw) starts with SOI + a marker byte.
JPEG_MAGIC = b"\xff\xd8\xff"
#: Largest JPEG frame decoded, in pixels: the node's cameras' hard cap too.
MAX_JPEG_PIXELS = MAX_FRAME_PIXELS
#: Longest ``session_id`` accepted (a UUID has 36): the server keeps each session's id,
#: so its memory per connection is bounded by this times ``max_sessions``.
MAX_SESSION_ID_CHARS = 256


class ObservationError(ValueError):
    """The model cannot run on this observation; the message is for the server log only."""


class PublicRequestError(ValueError):
    """A request option is invalid; the message is sent to the client as is."""


@dataclass(frozen=True)
class Request:
    """A validated observation, reduced to what the built-in policy needs.

    Attributes:
        state: float32 1-D joint vector (π0/π0.5: ``action_dim`` values; GR00T: the state
            groups concatenated in embodiment order).
        prompt: task text ("" when absent).
        session_id: the observation's ``session_id``; ``None`` selects the default session.
        seed: sampling seed; ``None`` means random.
        lora: adapter name, or ``None`` for the base model.
        lora_scale: adapter strength (1.0 when not given).
        images: the camera frames by key (π0/π0.5 ``images``, GR00T ``video``), as sent.
        action_prefix: float32 (P, action width) committed actions, when the server
            advertises ``action_prefix`` and the observation carries one; else None.
        committed_steps: how many rows of ``action_prefix`` execute before the new
            chunk takes over (0 without a prefix).
        inference_delay: how many of them the robot runs while the server infers
            (the client's estimate), or None when not sent.
        execute_horizon: how many rows of the new chunk after the committed ones run
            before the next chunk takes over (where the soft region must end), or
            None when not sent.
    """

    state: np.ndarray
    prompt: str
    session_id: str | None
    seed: int | None
    lora: str | None
    lora_scale: float
    images: Mapping[str, Any] | None = None
    action_prefix: np.ndarray | None = None
    committed_steps: int = 0
    inference_delay: int | None = None
    execute_horizon: int | None = None


def check_sampling_params(params: Any, adapters: Sequence[str]) -> tuple[str | None, float]:
    """Validate ``sampling_params`` and return ``(adapter name or None, scale)``.

    ``lora`` may be absent, ``None``, ``False``, a name, or ``{"name": str, "scale": number}``
    (``scale`` defaults to 1.0).

    Raises:
        PublicRequestError: unknown adapter, or a scale that is not a finite number.
        ObservationError: ``sampling_params`` is not a map.
    """
    if params is None:
        return None, 1.0
    if not isinstance(params, Mapping):
        raise ObservationError(
            f"sampling_params is {type(params).__name__}; expected a map such as {{'lora': 'name'}}"
        )
    lora = params.get("lora")
    if lora is None or lora is False:
        return None, 1.0
    scale: Any = 1.0
    name: Any = lora
    if isinstance(lora, Mapping):
        name = lora.get("name")
        scale = lora.get("scale", 1.0)
    if not isinstance(name, str) or name not in adapters:
        raise PublicRequestError(
            f"Unknown LoRA adapter {name!r}; this server serves {list(adapters)!r}"
        )
    if (
        isinstance(scale, (bool, np.bool_))
        or not isinstance(scale, (int, float, np.integer, np.floating))
        or not math.isfinite(float(scale))
    ):
        raise PublicRequestError("lora scale must be a number")
    return name, float(scale)


@dataclass(frozen=True)
class PrefixKeys:
    """The ``action_prefix`` keys of one observation, checked (see `check_action_prefix`)."""

    action_prefix: np.ndarray | None = None
    committed_steps: int = 0
    inference_delay: int | None = None
    execute_horizon: int | None = None


#: The observation keys of the ``action_prefix`` extension besides ``action_prefix``.
PREFIX_KEYS = ("committed_steps", "inference_delay", "execute_horizon")


def _count(obs: Mapping[str, Any], key: str, low: int, high: int, what: str) -> int | None:
    """``obs[key]`` as an int in ``[low, high]`` (``what`` names the upper bound), or None."""
    if key not in obs:
        return None
    value = obs[key]
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise ObservationError(f"{key} is {value!r}; expected an integer")
    if not low <= int(value) <= high:
        raise ObservationError(f"{key} {int(value)} is not in [{low}, {high}] ({what})")
    return int(value)


def check_action_prefix(obs: Mapping[str, Any], *, width: int, horizon: int) -> PrefixKeys:
    """The ``action_prefix`` keys of ``obs``, checked; all defaults when absent.

    ``action_prefix`` must be a finite numeric (P, width) array with 1 <= P <= horizon;
    ``committed_steps`` an integer in [0, P] (default P); ``inference_delay`` an
    integer in [0, committed_steps]; ``execute_horizon`` an integer in [1, horizon].
    The other keys are refused without ``action_prefix``.

    Raises:
        ObservationError: a key is malformed or out of range (detail for the log).
    """
    if "action_prefix" not in obs:
        given = [key for key in PREFIX_KEYS if key in obs]
        if given:
            raise ObservationError(f"{given} without action_prefix")
        return PrefixKeys()
    prefix = finite_array(obs["action_prefix"], "action_prefix")
    if prefix.ndim != 2 or prefix.shape[1] != width or not 1 <= prefix.shape[0] <= horizon:
        raise ObservationError(
            f"action_prefix has shape {prefix.shape}; "
            f"expected (P, {width}) with 1 <= P <= {horizon}"
        )
    rows = prefix.shape[0]
    steps = _count(obs, "committed_steps", 0, rows, "the prefix's rows")
    steps = rows if steps is None else steps
    delay = _count(obs, "inference_delay", 0, steps, "committed_steps")
    execute = _count(obs, "execute_horizon", 1, horizon, "the action horizon")
    return PrefixKeys(prefix, steps, delay, execute)


def prefix_fields(keys: PrefixKeys) -> tuple[Any, ...]:
    """The :class:`Request` fields of the prefix keys, in field order."""
    return (keys.action_prefix, keys.committed_steps, keys.inference_delay, keys.execute_horizon)


def common_fields(
    obs: Mapping[str, Any], needs_session_id: bool
) -> tuple[str, str | None, int | None]:
    """``prompt``, ``session_id`` and ``seed`` of ``obs``, checked.

    Raises:
        ObservationError: a value of the wrong type, a session id too long, or none
            where the server needs one.
    """
    prompt = obs.get("prompt", "")
    if not isinstance(prompt, str):
        raise ObservationError(f"prompt is {type(prompt).__name__}; expected str")
    session_id = obs.get("session_id")
    if session_id is not None and not isinstance(session_id, str):
        raise ObservationError(f"session_id is {type(session_id).__name__}; expected str")
    if session_id is not None and len(session_id) > MAX_SESSION_ID_CHARS:
        raise ObservationError(
            f"session_id has {len(session_id)} characters; expected at most {MAX_SESSION_ID_CHARS}"
        )
    if session_id is None and needs_session_id:
        raise ObservationError("observation has no session_id; this server needs_session_id")
    seed = obs.get("seed")
    if seed is not None:
        if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)):
            raise ObservationError(f"seed is {shorten(seed)}; expected an integer")
        seed = int(seed)
    return prompt, session_id, seed


# NumPy < 1.24 only warns about ragged nested sequences (and builds an object array)
# where newer NumPy raises ValueError; there the warning is turned into the error.
_RAGGED_WARNING: type[Warning] | None = (
    getattr(np, "VisibleDeprecationWarning", None)
    if tuple(int(part) for part in np.__version__.split(".")[:2]) < (1, 24)
    else None
)


def _as_array(value: Any) -> np.ndarray:
    """``np.asarray(value)``, raising ValueError for ragged sequences on every NumPy."""
    if _RAGGED_WARNING is None:
        return np.asarray(value)
    with warnings.catch_warnings():
        warnings.simplefilter("error", _RAGGED_WARNING)
        try:
            return np.asarray(value)
        except _RAGGED_WARNING as exc:
            raise ValueError(str(exc)) from exc


def finite_array(value: Any, what: str) -> np.ndarray:
    try:
        arr = _as_array(value)
    except (ValueError, TypeError) as exc:
        raise ObservationError(f"{what} cannot be read as an array: {exc}") from exc
    if arr.dtype.kind not in "fiu":
        raise ObservationError(f"{what} has dtype {arr.dtype}; expected float32")
    arr = arr.astype(np.float32, copy=False)
    if not np.isfinite(arr).all():
        raise ObservationError(f"{what} contains NaN or Inf")
    return arr


def check_frame(key: str, frame: Any) -> None:
    """A π0/π0.5 frame: HxWx3 uint8, HxWx3 float in [0, 1], or JPEG bytes."""
    if isinstance(frame, (bytes, bytearray, memoryview)):
        data = bytes(frame)
        if not data.startswith(JPEG_MAGIC):
            raise ObservationError(
                f"camera {key!r}: {len(data)} bytes that are not JPEG (no FF D8 FF header)"
            )
        declared = jpeg_size(data)
        if declared is None or 0 in declared:
            raise ObservationError(f"camera {shorten(key, 80)}: JPEG has no readable frame header")
        if declared[0] * declared[1] > MAX_JPEG_PIXELS:
            raise ObservationError(
                f"camera {shorten(key, 80)}: JPEG declares {declared[1]}x{declared[0]} pixels; "
                f"at most {MAX_JPEG_PIXELS} pixels are decoded"
            )
        import cv2  # OpenCV only where a JPEG is decoded: the client never needs it

        decoded = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_UNCHANGED)
        if decoded is None:
            raise ObservationError(f"camera {key!r}: JPEG bytes could not be decoded")
        if decoded.ndim != 3 or decoded.shape[2] != 3:
            raise ObservationError(
                f"camera {key!r}: JPEG decodes to shape {decoded.shape}; expected HxWx3 color"
            )
        return
    if not isinstance(frame, np.ndarray):
        raise ObservationError(
            f"camera {key!r} is {type(frame).__name__}; expected an HxWx3 array or JPEG bytes"
        )
    if frame.ndim != 3 or frame.shape[2] != 3 or frame.shape[0] < 1 or frame.shape[1] < 1:
        raise ObservationError(
            f"camera {key!r} has shape {frame.shape}; expected (H, W, 3) "
            "(channel-first and grayscale frames are refused)"
        )
    if frame.dtype == np.uint8:
        return
    if frame.dtype.kind != "f":
        raise ObservationError(
            f"camera {key!r} has dtype {frame.dtype}; expected uint8 or float in [0, 1]"
        )
    # min and max propagate NaN and reach +-Inf, so two reductions also cover the
    # finiteness check without a pass that allocates a full boolean image.
    low, high = float(frame.min()), float(frame.max())
    if not (math.isfinite(low) and math.isfinite(high)):
        raise ObservationError(f"camera {key!r} contains NaN or Inf")
    if low < 0.0 or high > 1.0:
        raise ObservationError(
            f"camera {key!r} float values span [{low}, {high}]; expected [0, 1] "
            "(divide uint8 pixels by 255 or send uint8)"
        )
