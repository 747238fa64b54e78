"""Whether this process may use SCHED_FIFO, asked on a thread that then ends.

A thread's scheduling policy ends with the thread, so probing on a throwaway
thread leaves the pytest process as it was.
"""

from __future__ import annotations

import threading
from typing import Any

from relay_ros.node.thread_priority import ThreadPriorityError, set_thread_priority


def run_in_thread(function: Any) -> Any:
    """Run ``function`` on a new thread (which ends, taking its scheduling with it);
    its return value, or its exception raised here."""
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["value"] = function()
        except BaseException as exc:  # handed to the calling thread
            out["error"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(10)
    if "error" in out:
        raise out["error"]
    return out.get("value")


def fifo_refusal(priority: int = 5) -> str | None:
    """Why this process may not use SCHED_FIFO ``priority``, or None if it may."""
    try:
        run_in_thread(lambda: set_thread_priority(priority))
    except ThreadPriorityError as exc:
        return str(exc)
    return None
