"""``Reply``: one request's result, and :func:`decode_reply`, which checks a reply
against the model's wire format (:mod:`relay_ros.formats`) before the client hands it out.

A reply is a msgpack map with ``actions`` (π0/π0.5: a 2-D float array; GR00T: a dict
of float arrays, one per action group) or the protocol's error map; a text frame (an
openpi server's traceback) is taken as an error. Anything else is the server breaking
the protocol and raises :class:`~relay_ros.wire.errors.PolicyServerError`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from relay_ros.formats import format_for
from relay_ros.logsafe import shorten
from relay_ros.wire.codec import REPLY_LIMITS, CodecError, DecodeLimits, unpackb
from relay_ros.wire.errors import PolicyServerError
from relay_ros.wire.request_timing import RequestTiming

__all__ = ["Reply", "decode_reply"]


@dataclasses.dataclass(frozen=True)
class Reply:
    """The result of one request: exactly one of ``actions`` and ``error`` is set.

    Attributes:
        actions: π0/π0.5 a 2-D float array, GR00T a dict of float arrays.
        error: the server's error map ``{"type": "error", "message": ...}`` (a text
            frame, as openpi sends its traceback, becomes one too).
        server_timing: the reply's ``server_timing`` map, if any.
        timing: when the request went out and its reply came back, and the bytes
            each way (set by the client that made the request; None from
            :func:`decode_reply` alone).
    """

    actions: Any = None
    error: dict[str, Any] | None = None
    server_timing: dict[str, Any] | None = None
    timing: RequestTiming | None = None

    @property
    def sent_at(self) -> float | None:
        """``time.perf_counter()`` when the request was fully written to the socket."""
        return None if self.timing is None else self.timing.send_done

    @property
    def roundtrip_s(self) -> float | None:
        """Seconds from encoding the request to the complete reply."""
        return None if self.timing is None else self.timing.total_s

    def result(self) -> np.ndarray | dict[str, np.ndarray] | dict[str, Any]:
        """What ``PolicyClient.infer`` returns: the actions, or the error map."""
        return self.error if self.error is not None else self.actions


def decode_reply(
    model: str, message: bytes | str, limits: DecodeLimits = REPLY_LIMITS, source: str = "server"
) -> Reply:
    """Decode one reply to an observation and check it against the model's wire format.

    Args:
        model: the model ID the client asked for (its format fixes the action type).
        message: the received message.
        limits: decode bounds (size cap, objects, nesting, lengths).
        source: who sent it, for error texts (a redacted URL).

    Raises:
        PolicyServerError: not decodable within ``limits``, not a map with
            ``actions`` nor an error map, or actions of the wrong type.
    """
    if isinstance(message, str):
        return Reply(error={"type": "error", "message": message})
    try:
        reply = unpackb(message, limits)
    except CodecError as exc:
        raise PolicyServerError(f"{source} sent an undecodable reply: {exc}") from exc
    if not isinstance(reply, dict):
        raise PolicyServerError(
            f"{source} sent {type(reply).__name__} {shorten(reply, 80)} as a reply; "
            "expected a map with 'actions' or an error map"
        )
    timing = reply.get("server_timing")
    timing = timing if isinstance(timing, dict) else None
    if reply.get("type") == "error":
        message_text = reply.get("message")
        if not isinstance(message_text, str):
            raise PolicyServerError(
                f"{source} sent an error map whose message is {shorten(message_text, 80)}; "
                "expected a str"
            )
        return Reply(error=reply, server_timing=timing)
    if "actions" not in reply:
        raise PolicyServerError(
            f"{source} sent a map with keys {shorten(list(reply), 80)} as a reply; "
            "expected 'actions' or an error map"
        )
    _check_actions(model, reply["actions"], source)
    return Reply(actions=reply["actions"], server_timing=timing)


def _check_actions(model: str, actions: Any, url: str) -> None:
    """Raise PolicyServerError unless ``actions`` has the type of the model's wire
    format: π0/π0.5 a 2-D float array, GR00T a non-empty dict of float arrays."""
    expected = format_for(model).check_actions(actions)
    if expected is None:
        return
    if isinstance(actions, np.ndarray):
        got = f"an array of shape {actions.shape} and dtype {actions.dtype}"
    else:
        got = f"{type(actions).__name__} {shorten(actions, 80)}"
    raise PolicyServerError(f"{url} sent {got} as {model} actions; expected {expected}")
