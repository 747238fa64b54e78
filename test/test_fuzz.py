"""Property-based fuzzing (hypothesis) of the two decoders that face the network:
the server's frame decoder + validator and the client's reply decoder.

Properties: they never raise anything but their documented error, whatever the
bytes; the bounded decode agrees with msgpack on every frame within the limits;
a valid observation mutated anywhere gets a protocol answer. Runs are
deterministic (``derandomize``) and bounded (a few hundred examples each, a few
seconds in all), so they belong in ``make test``.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import msgpack
import numpy as np
import pytest

pytest.importorskip("hypothesis")  # requirements/test.txt; absent in minimal venvs

from helpers import pi_observation
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from relay_ros.formats.requests import INTERNAL_ERROR, INVALID_PAYLOAD
from relay_ros.server import PolicyServer, ServerOptions
from relay_ros.wire.codec import OBSERVATION_LIMITS, REPLY_LIMITS, CodecError, packb, unpackb
from relay_ros.wire.errors import PolicyServerError
from relay_ros.wire.reply import Reply, decode_reply

FUZZ = settings(
    max_examples=200,
    deadline=timedelta(seconds=5),  # generous: the machine is shared
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
# Structured values cost more to generate: fewer of them.
FUZZ_STRUCTURES = settings(FUZZ, max_examples=50)

PUBLIC_MESSAGES = (INTERNAL_ERROR, INVALID_PAYLOAD)


def _array(dtype: str, shape: tuple[int, ...], fill: float) -> np.ndarray:
    with np.errstate(all="ignore"):  # NaN/Inf/overflow casts are wanted here
        return np.full(shape, fill).astype(dtype)


arrays = st.builds(
    _array,
    st.sampled_from(["<f4", "<f8", "|u1", "<i8", "|b1", ">f4", "<f2"]),
    st.lists(st.integers(0, 5), max_size=4).map(tuple),
    st.floats(allow_nan=True, allow_infinity=True, width=32) | st.integers(0, 255),
)
scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats()
    | st.text(max_size=20)
    | st.binary(max_size=40)
)
values = st.recursive(
    scalars | arrays,
    lambda inner: (
        st.lists(inner, max_size=5)
        | st.dictionaries(st.text(max_size=10) | st.binary(max_size=5), inner, max_size=5)
    ),
    max_leaves=20,
)


@pytest.fixture(scope="module")
def server() -> PolicyServer:
    return PolicyServer(ServerOptions(models=("pi05", "groot"), lora_adapters=("towels",)))


def _check_verdict(verdict: Any) -> None:
    name = type(verdict).__name__
    assert name in {"_Refusal", "_Control", "_Accepted"}, verdict
    if name == "_Refusal":
        assert verdict.message in PUBLIC_MESSAGES or verdict.message.startswith(
            ("Unknown LoRA adapter", "lora scale")
        )


@FUZZ
@given(frame=st.binary(max_size=300))
def test_server_decoder_never_raises_on_any_bytes(server: PolicyServer, frame: bytes) -> None:
    for model in ("pi05", "groot"):
        _check_verdict(server.inspect_frame(model, frame))


@FUZZ_STRUCTURES
@given(value=values)
def test_server_decoder_never_raises_on_any_structure(server: PolicyServer, value: Any) -> None:
    frame = packb(value)
    for model in ("pi05", "groot"):
        _check_verdict(server.inspect_frame(model, frame))


@FUZZ_STRUCTURES
@given(
    key=st.sampled_from(["images", "state", "prompt", "seed", "session_id", "sampling_params"]),
    value=values,
    inner=st.booleans(),
)
def test_mutated_observations_get_a_protocol_answer(
    server: PolicyServer, key: str, value: Any, inner: bool
) -> None:
    obs = pi_observation(image_size=(8, 8))
    if inner and isinstance(obs.get(key), dict):
        obs[key]["base_0_rgb"] = value
    else:
        obs[key] = value
    _check_verdict(server.inspect_frame("pi05", packb(obs)))


@FUZZ
@given(frame=st.binary(max_size=300), model=st.sampled_from(["pi05", "groot"]))
def test_reply_decoder_raises_only_policy_server_error_on_any_bytes(
    frame: bytes, model: str
) -> None:
    try:
        reply = decode_reply(model, frame)
    except PolicyServerError:
        return
    assert isinstance(reply, Reply)
    assert (reply.actions is None) != (reply.error is None)


@FUZZ_STRUCTURES
@given(value=values, model=st.sampled_from(["pi05", "groot"]), wrap=st.booleans())
def test_reply_decoder_raises_only_policy_server_error_on_any_structure(
    value: Any, model: str, wrap: bool
) -> None:
    frame = packb({"actions": value} if wrap else value)
    try:
        reply = decode_reply(model, frame)
    except PolicyServerError:
        return
    if model == "groot":
        assert isinstance(reply.actions, dict) or reply.error is not None
    else:
        assert reply.error is not None or reply.actions.ndim == 2


@FUZZ_STRUCTURES
@given(value=values)
def test_bounded_decode_agrees_with_msgpack(value: Any) -> None:
    frame = packb(value)
    for limits in (REPLY_LIMITS, OBSERVATION_LIMITS):
        bounded = unpackb(frame, limits)
        plain = unpackb(frame)
        assert packb(bounded) == packb(plain)


@FUZZ
@given(frame=st.binary(max_size=200))
def test_bounded_decode_refuses_exactly_what_msgpack_refuses_on_small_frames(frame: bytes) -> None:
    try:
        msgpack.unpackb(frame, strict_map_key=False)
        valid = True
    except Exception:
        valid = False
    try:
        unpackb(frame, REPLY_LIMITS)
        decoded = True
    except CodecError:
        decoded = False
    if decoded:
        assert valid
