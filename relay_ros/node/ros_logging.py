"""Python ``logging`` records routed to a ROS node's logger.

The client and the connection (``relay_ros.wire``) log through the standard
``logging`` API (``%``-style arguments, ``exc_info``), because they run without
ROS. Inside ``policy_node`` their messages belong with the node's: in the node's
log, on ``/rosout``, and filtered by ``--ros-args --log-level``. :func:`node_logger`
returns a ``logging.Logger`` whose records go to the rclpy logger at the same
severity, with the same level threshold. :func:`route_library_logs` does the same
for the records of the ROS-free core (``relay_ros.pipeline``: e.g. the warning that a
camera sends mono8 frames), which would otherwise reach only Python's last-resort
stderr printer, never ``/rosout``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

__all__ = ["RosLogHandler", "node_logger", "route_library_logs"]

# rcutils severities (rclpy.logging.LoggingSeverity) are Python's level numbers.
_SEVERITIES = (
    (logging.CRITICAL, 50),
    (logging.ERROR, 40),
    (logging.WARNING, 30),
    (logging.INFO, 20),
    (logging.DEBUG, 10),
)


def _severity(levelno: int) -> int:
    for threshold, severity in _SEVERITIES:
        if levelno >= threshold:
            return severity
    return 10


class RosLogHandler(logging.Handler):
    """Emits each record (message, then the traceback if any) through an rclpy logger.

    The rclpy logger is asked at each record whether the severity is enabled, so
    a level set later (``ros2 service call .../set_logger_levels``) applies too.
    """

    def __init__(self, ros_logger: Any) -> None:
        super().__init__()
        self._ros = ros_logger
        self.setFormatter(logging.Formatter("%(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        try:
            severity = _severity(record.levelno)
            if not self._ros.is_enabled_for(severity):
                return
            text = self.format(record)
            # One call site per severity: rclpy keys its per-call context by the
            # caller's line and refuses a different severity from the same line.
            if severity >= 50:
                self._ros.fatal(text)
            elif severity >= 40:
                self._ros.error(text)
            elif severity >= 30:
                self._ros.warning(text)
            elif severity >= 20:
                self._ros.info(text)
            else:
                self._ros.debug(text)
        except Exception:  # a log call must never break the caller
            self.handleError(record)


def node_logger(ros_logger: Any, name: str) -> logging.Logger:
    """A ``logging.Logger`` named ``name`` whose records go only to ``ros_logger``.

    Its level follows the rclpy logger's effective level when created (so records
    below it are not even formatted); the handler checks again per record.
    """
    logger = logging.getLogger(name)
    logger.handlers = [RosLogHandler(ros_logger)]
    logger.propagate = False
    logger.setLevel(int(ros_logger.get_effective_level()))
    return logger


class _LibraryRoute(RosLogHandler):
    """The handler :func:`route_library_logs` installs (one per logger at a time)."""


def route_library_logs(ros_logger: Any, name: str = "relay_ros.pipeline") -> Callable[[], None]:
    """Send the records of logger ``name`` (and its children) to ``ros_logger`` too.

    Records still propagate (a test's ``caplog``, an application's handlers see them);
    the logger's level is left alone (warnings pass by default). One node at a time:
    the newest call replaces an earlier one, so a record is logged once, by the node
    created last. Returns the function that removes the route (the node calls it when
    destroyed; it does nothing if another node has taken the route since).
    """
    logger = logging.getLogger(name)
    for handler in list(logger.handlers):
        if isinstance(handler, _LibraryRoute):
            logger.removeHandler(handler)
    route = _LibraryRoute(ros_logger)
    logger.addHandler(route)

    def remove() -> None:
        logger.removeHandler(route)

    return remove
