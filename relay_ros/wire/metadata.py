"""The metadata frame a server sends on open: read under bounds, checked at once.

The client relies on three metadata fields itself: ``model`` (which server it
reached), ``protocol`` (whether control frames such as reset exist) and
``direct_url`` (the route it may follow). Metadata that cannot be decoded, is not a
map, or has one of those fields wrong fails the open right away with
:class:`~relay_ros.wire.errors.PolicyServerError` naming the field, its value and
what was expected; the other fields are the caller's to check (the node's
``pipeline/server_spec.py``). An openpi server sends none of the three: accepted.
"""

from __future__ import annotations

import dataclasses
import threading
from typing import TYPE_CHECKING, Any

from relay_ros.logsafe import shorten
from relay_ros.models import UnknownModelError, get_model
from relay_ros.wire.codec import REPLY_LIMITS, CodecError, unpackb
from relay_ros.wire.errors import PolicyServerError

if TYPE_CHECKING:
    from relay_ros.wire.deadline import Deadline
    from relay_ros.wire.transport import Transport

__all__ = ["MAX_METADATA_BYTES", "check_metadata", "read_metadata"]

#: Largest metadata frame, bytes (the reference server's is well under 1 kB).
MAX_METADATA_BYTES = 2**20


def read_metadata(
    transport: Transport, deadline: Deadline, cancel: threading.Event | None, model: str
) -> dict[str, Any]:
    """Wait for the metadata frame (bounded by ``deadline`` only) and check it.

    Raises:
        PolicyServerError: a text frame, undecodable, not a map, or a field the client
            relies on is wrong (see :func:`check_metadata`).
        TimeoutError, OpenCancelled, ConnectionClosed: as ``Transport.recv``.
    """
    # No keepalive here: a server (or its proxy) that is loading its model may not
    # answer pings, and the wait for metadata has no limit unless open_timeout.
    message = transport.recv(deadline, cancel, keepalive=False)
    source = transport.display_url
    if isinstance(message, str):
        raise PolicyServerError(
            f"{source} sent a text frame as metadata ({shorten(message, 80)}); "
            "expected a binary msgpack map"
        )
    try:
        metadata = unpackb(message, dataclasses.replace(REPLY_LIMITS, max_bytes=MAX_METADATA_BYTES))
    except CodecError as exc:
        raise PolicyServerError(f"{source} sent undecodable metadata: {exc}") from exc
    if not isinstance(metadata, dict):
        raise PolicyServerError(
            f"{source} sent metadata of type {type(metadata).__name__}; expected a map"
        )
    check_metadata(metadata, model, source)
    return metadata


def check_metadata(metadata: dict[str, Any], model: str, source: str = "server") -> None:
    """Check the fields the client relies on, when present.

    - ``model`` must be the model asked for: a server for another model (or family)
      answers with actions the client would refuse on every request.
    - ``protocol`` must be an int >= 0.
    - ``direct_url`` must be a str.

    Raises:
        PolicyServerError: naming the field, its value and what was expected.
    """
    if "model" in metadata:
        served = metadata["model"]
        if served != model:
            raise PolicyServerError(
                f"{source} serves model {_quote(served)}{_family(served)}; this client "
                f"is for {model!r}{_family(model)}: check the model ID and the URL"
            )
    if "protocol" in metadata:
        protocol = metadata["protocol"]
        if isinstance(protocol, bool) or not isinstance(protocol, int) or protocol < 0:
            raise PolicyServerError(
                f"{source} sent metadata protocol {_quote(protocol)}; expected an int >= 0"
            )
    if "direct_url" in metadata and not isinstance(metadata["direct_url"], str):
        raise PolicyServerError(
            f"{source} sent metadata direct_url {_quote(metadata['direct_url'])}; "
            "expected a ws:// or wss:// URL string"
        )


def _family(model: Any) -> str:
    """`` (family pi)`` for a registered model ID, else nothing."""
    try:
        return f" (family {get_model(model).family})" if isinstance(model, str) else ""
    except UnknownModelError:
        return ""


def _quote(value: Any) -> str:
    """A received value as Python writes it (strs quoted), cut to 80 characters."""
    return shorten(repr(value) if isinstance(value, str) else value, 80)
