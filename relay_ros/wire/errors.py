"""The exceptions of the wire layer that are not websockets' own.

The client raises websockets' exceptions where websockets defines the case
(``ConnectionClosed``, ``InvalidStatus``, ``InvalidURI``) and ``OSError`` for the
network; these cover the rest.
"""

from __future__ import annotations

__all__ = ["OpenCancelled", "PolicyServerError", "RequestTimeout"]


class PolicyServerError(RuntimeError):
    """The server sent something the protocol does not allow: metadata that is not a
    map, a reply that cannot be decoded, is over the size cap or does not match the
    model family, a text frame that is not UTF-8, or a refused control frame."""


class RequestTimeout(TimeoutError):
    """A request got no reply within its timeout.

    The connection it was sent on is closed: a reply that arrives late would
    otherwise be read as the answer to the next request. A ``TimeoutError``, hence
    an ``OSError``.
    """


class OpenCancelled(Exception):
    """Opening a connection was cancelled through its cancel event."""
