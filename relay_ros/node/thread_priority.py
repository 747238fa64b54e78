"""Real-time priority for policy_node's process: ``thread_priority``.

On a robot computer the camera drivers, the controllers and everything else share a
few cores with policy_node. Under Linux's normal time-sharing scheduler a thread that
wakes to send an observation may wait a scheduler slice for a core that another
process holds, more than once per request, which adds milliseconds to the path from
image to wire (``bench/pipeline.py``). A ``SCHED_FIFO`` thread runs as soon as it is
ready, ahead of every
time-sharing thread; ros2_control's controller_manager gives its update loop one for
the same reason (its ``thread_priority`` parameter, default 50).

The whole process is raised, not only the executor thread and the connection worker
that do the node's work: they take frames out of DDS under locks that DDS's receive
threads hold while they copy a new 900 KiB frame in, and they wait for the GIL that
any Python thread may hold. A raised thread that waits for a lock held by a
normally scheduled one waits as long as that one waits for a core (a priority
inversion), so raising only those two leaves most of the waits (docs/benchmarks.md,
"Pipeline: real-time priority").
No thread of policy_node spins: they block in a wait set, a socket or an event between
short pieces of work, so the rest of the machine keeps its CPU.

Raising a thread needs permission: ``CAP_SYS_NICE`` (root, or
``docker run --cap-add SYS_NICE``) or an ``RLIMIT_RTPRIO`` of at least the priority
(``ulimit -r``; ``@realtime - rtprio 98`` in ``/etc/security/limits.conf`` and the user
in group ``realtime``, as ros2_control's documentation sets up). Without it the
request is refused: :class:`ProcessPriority` logs one warning that says so and how
to allow it, keeps the normal scheduler, and reports the refusal in :attr:`status`
(policy_node shows it on ``/diagnostics``). Plain Python, no rclpy.
"""

from __future__ import annotations

import contextlib
import os
import threading
from typing import Any

__all__ = [
    "MAX_PRIORITY",
    "ProcessPriority",
    "ThreadPriorityError",
    "raise_process_threads",
    "rtprio_limit",
    "set_thread_priority",
]

#: Highest ``SCHED_FIFO`` priority on Linux (``sched_get_priority_max``).
MAX_PRIORITY = 99

_TASKS = "/proc/self/task"


class ThreadPriorityError(RuntimeError):
    """A thread's scheduling could not be changed; the message says why."""


def rtprio_limit() -> int | None:
    """The soft ``RLIMIT_RTPRIO`` (``ulimit -r``): the highest real-time priority an
    unprivileged process may take, or None where there is no such limit."""
    try:
        import resource
    except ImportError:  # not a Unix
        return None
    limit = getattr(resource, "RLIMIT_RTPRIO", None)
    if limit is None:
        return None
    soft, _hard = resource.getrlimit(limit)
    return None if soft == resource.RLIM_INFINITY else int(soft)


def _check_priority(priority: Any) -> int:
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise ValueError(f"thread priority {priority!r} is not an integer; expected 0..99")
    if not 0 <= priority <= MAX_PRIORITY:
        raise ValueError(
            f"thread priority {priority} is out of range; expected 0..99 (0: normal "
            f"scheduling, 1..{MAX_PRIORITY}: SCHED_FIFO)"
        )
    return priority


def set_thread_priority(priority: int, thread_id: int = 0) -> None:
    """Schedule one thread with ``SCHED_FIFO`` at ``priority`` (1..99), or with the
    normal time-sharing scheduler for 0. Other threads keep theirs.

    Args:
        priority: 0..99.
        thread_id: The thread's native id (``threading.get_native_id()``, a Linux
            TID); 0: the calling thread.

    Raises:
        ValueError: ``priority`` is not an integer from 0 to 99.
        ProcessLookupError: no thread ``thread_id`` (it ended).
        ThreadPriorityError: the platform has no real-time scheduling, or the process
            may not use this priority (the message names the limit and how to raise it).
    """
    _check_priority(priority)
    setscheduler = getattr(os, "sched_setscheduler", None)
    if setscheduler is None:
        raise ThreadPriorityError(
            "this platform has no os.sched_setscheduler (real-time priorities need Linux)"
        )
    policy = os.SCHED_FIFO if priority else os.SCHED_OTHER
    try:
        # On Linux a pid names one thread (0: the caller), not the whole process.
        setscheduler(thread_id, policy, os.sched_param(priority))
    except PermissionError as exc:
        limit = rtprio_limit()
        have = "unlimited" if limit is None else str(limit)
        raise ThreadPriorityError(
            f"SCHED_FIFO priority {priority} is not permitted ({exc.strerror}): the "
            f"real-time priority limit (ulimit -r) is {have}. Allow it with "
            "'@realtime - rtprio 98' in /etc/security/limits.conf and the user in group "
            "'realtime' (log in again), or CAP_SYS_NICE (docker run --cap-add SYS_NICE "
            "--ulimit rtprio=98); in a container without a real-time budget even root is "
            "refused"
        ) from None
    except ProcessLookupError:
        raise
    except OSError as exc:
        raise ThreadPriorityError(
            f"cannot set SCHED_FIFO priority {priority}: {exc.strerror or exc}"
        ) from None


def raise_process_threads(priority: int) -> int:
    """Give every thread of this process ``priority`` (see :func:`set_thread_priority`).

    Threads started later inherit the priority of the thread that starts them (POSIX
    threads and Python's ``threading`` do), so after this call the whole process runs
    at ``priority``. All or nothing: the calling thread goes first, and when the
    system refuses a thread, those already raised go back to normal scheduling.

    Returns:
        How many threads were raised (threads that ended meanwhile are not counted).

    Raises:
        ValueError, ThreadPriorityError: as :func:`set_thread_priority`; also when
            the process's threads cannot be listed (``/proc/self/task``).
    """
    _check_priority(priority)
    try:
        tids = sorted(int(name) for name in os.listdir(_TASKS))
    except OSError as exc:
        raise ThreadPriorityError(
            f"cannot list this process's threads in {_TASKS}: {exc.strerror or exc}"
        ) from None
    me = threading.get_native_id()
    set_thread_priority(priority)
    raised = [0]  # 0: the calling thread
    try:
        for tid in tids:
            if tid == me:
                continue
            try:
                set_thread_priority(priority, tid)
            except ProcessLookupError:
                continue  # it ended
            raised.append(tid)
    except ThreadPriorityError:
        for tid in raised:
            with contextlib.suppress(OSError, ThreadPriorityError):
                set_thread_priority(0, tid)
        raise
    return len(raised)


class ProcessPriority:
    """policy_node's ``thread_priority``: the process raised once, from the first tick.

    The node calls :meth:`apply` on every tick; the first call (on whichever thread
    the executor runs it) raises every thread of the process, the later ones return
    at once. Thread-safe.

    Args:
        priority: 0 (keep the normal scheduler: :meth:`apply` does nothing) or a
            ``SCHED_FIFO`` priority 1..99.
        log: A ROS or ``logging`` logger, for one line when the process is raised or
            one warning when the system refuses.

    Raises:
        ValueError: ``priority`` is not 0..99.
    """

    def __init__(self, priority: int, log: Any) -> None:
        self._priority = _check_priority(priority)
        self._log = log
        self._lock = threading.Lock()
        self._applied = priority == 0
        self._threads = 0
        self._refusal: str | None = None

    @property
    def refusal(self) -> str | None:
        """Why the system refused the priority, or None."""
        return self._refusal

    def apply(self) -> None:
        """Raise the process's threads, the first time only."""
        if self._applied:
            return
        with self._lock:
            if self._applied:
                return
            self._applied = True
            try:
                self._threads = raise_process_threads(self._priority)
            except ThreadPriorityError as exc:
                self._refusal = str(exc)
                self._log.warning(
                    f"thread_priority {self._priority} refused; the node runs with the "
                    f"normal scheduler: {exc}"
                )
                return
        self._log.info(
            f"thread_priority: the node's {self._threads} threads run at SCHED_FIFO "
            f"priority {self._priority} (and the threads they start)"
        )

    @property
    def status(self) -> str:
        """One line for ``/diagnostics``: off, raised, or why it was refused."""
        if not self._priority:
            return "normal scheduling (thread_priority 0)"
        if self._refusal is not None:
            return f"SCHED_FIFO {self._priority} refused: {self._refusal}"
        if not self._threads:
            return f"SCHED_FIFO {self._priority} requested; the node has not ticked yet"
        return f"SCHED_FIFO {self._priority}: every thread of the process"
