"""``shorten``: quote a value a client or server sent, at a bounded length.

Every log message and exception text that quotes a value from the other side of
the wire goes through this, so a 10 MiB prompt or seed becomes a 200-character
excerpt instead of a 10 MiB log line per request.
"""

from __future__ import annotations

__all__ = ["DEFAULT_QUOTE_CHARS", "shorten"]

#: Characters kept by default.
DEFAULT_QUOTE_CHARS = 200


def shorten(value: object, limit: int = DEFAULT_QUOTE_CHARS) -> str:
    """``str(value)`` (``repr`` for anything but str) cut to ``limit`` characters.

    A cut text ends with ``... (N chars)`` giving the full length, so the log still
    tells how large the value was. Only the first ``4 * limit`` characters of a long
    str are ever copied.
    """
    if isinstance(value, str):
        text = value if len(value) <= limit else value[: 4 * limit]
        full = len(value)
    else:
        if isinstance(value, (bytes, bytearray, memoryview)):
            data = bytes(value[: 4 * limit])
            full_text = repr(data)
            full = len(value) if not isinstance(value, memoryview) else value.nbytes
            if full <= 4 * limit and len(full_text) <= limit:
                return full_text
            return f"{full_text[:limit]}... ({full} bytes)"
        text = repr(value)
        full = len(text)
    if full <= limit:
        return text
    return f"{text[:limit]}... ({full} chars)"
