"""The two exception types of the demo, shared by all of its modules.

Kept apart so that every part of ``relay_ros.demo`` (arguments, server, run, report)
raises the same types without importing each other.
"""

from __future__ import annotations

__all__ = ["DemoArgumentError", "DemoError"]


class DemoError(RuntimeError):
    """The demo could not start or stopped abnormally (server, nodes or first chunk)."""


class DemoArgumentError(ValueError):
    """An argument of `run_demo` or a helper is out of range (names the value)."""
