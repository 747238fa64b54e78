"""thread_priority: SCHED_FIFO for policy_node's process, or a refusal that says why.

Raising every thread of a process is tested in child processes (it would raise this
pytest process's threads too): one with permission (skipped where even root may not
use SCHED_FIFO, e.g. a container without a real-time budget), one that first gives
up that permission, as a robot user without an rtprio limit has none. One thread's
priority is tested on short-lived threads of this process (the policy ends with
the thread).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from fifo_probe import fifo_refusal, run_in_thread

from relay_ros.node.thread_priority import ProcessPriority, set_thread_priority

pytestmark = pytest.mark.skipif(
    not hasattr(os, "sched_setscheduler"), reason="real-time scheduling needs Linux"
)

ROOT = Path(__file__).resolve().parents[1]


def _policy(tid: int = 0) -> tuple[int, int]:
    return os.sched_getscheduler(tid), os.sched_getparam(tid).sched_priority


def _run_child(code: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


class _Log:
    def __init__(self) -> None:
        self.warnings: list[str] = []
        self.infos: list[str] = []

    def warning(self, text: str) -> None:
        self.warnings.append(text)

    def info(self, text: str) -> None:
        self.infos.append(text)


@pytest.mark.parametrize("bad", [-1, 100, 2.5, True, "10"])
def test_a_priority_outside_0_to_99_is_refused_naming_it(bad: Any) -> None:
    shown = repr(bad) if isinstance(bad, str) else str(bad)
    with pytest.raises(ValueError, match=re.escape(shown)):
        set_thread_priority(bad)
    with pytest.raises(ValueError, match=r"expected 0\.\.99"):
        ProcessPriority(bad, _Log())


def test_one_thread_is_raised_and_lowered_and_the_others_keep_theirs() -> None:
    if fifo_refusal():
        pytest.skip("this process may not use SCHED_FIFO (no CAP_SYS_NICE, ulimit -r 0)")
    before = _policy()

    def raise_then_lower() -> tuple[tuple[int, int], tuple[int, int]]:
        set_thread_priority(9)
        raised = _policy()
        set_thread_priority(0)
        return raised, _policy()

    raised, lowered = run_in_thread(raise_then_lower)
    assert raised == (os.SCHED_FIFO, 9)
    assert lowered == (os.SCHED_OTHER, 0)
    assert _policy() == before


def test_priority_zero_changes_nothing() -> None:
    log = _Log()
    priority = ProcessPriority(0, log)
    before = _policy()
    priority.apply()
    assert _policy() == before
    assert priority.status == "normal scheduling (thread_priority 0)"
    assert log.warnings == log.infos == []


# A process like policy_node's: a few threads started before the first tick (the
# connection worker, DDS's), then the tick on the main thread, then a thread started
# after it.
_RAISED_CHILD = r"""
import json, os, threading
from relay_ros.node.thread_priority import ProcessPriority

class Log:
    infos, warnings = [], []
    def info(self, text): self.infos.append(text)
    def warning(self, text): self.warnings.append(text)

def policy(tid=0):
    return [os.sched_getscheduler(tid), os.sched_getparam(tid).sched_priority]

def tasks():
    # A joined thread's task can linger in /proc a moment and be gone when asked.
    out = set()
    for tid in os.listdir("/proc/self/task"):
        try:
            out.add(tuple(policy(int(tid))))
        except ProcessLookupError:
            pass
    return sorted(out)

stop = threading.Event()
# Daemons: a failing child exits with its traceback instead of waiting for stop.
early = [threading.Thread(target=stop.wait, daemon=True) for _ in range(3)]
for thread in early:
    thread.start()
log = Log()
priority = ProcessPriority(7, log)
before = priority.status
for _ in range(3):  # every tick calls it; only the first does anything
    priority.apply()
later = []
late = threading.Thread(target=lambda: later.append(policy()))
late.start(); late.join()
out = {
    "before": before,
    "status": priority.status,
    "main": policy(),
    "early": [policy(t.native_id) for t in early],
    "late": later[0],
    "every_task": tasks(),
    "infos": log.infos,
    "warnings": log.warnings,
}
stop.set()
print(json.dumps(out))
"""


def test_the_first_apply_raises_every_thread_and_later_threads_inherit_it() -> None:
    if fifo_refusal(7):
        pytest.skip("this process may not use SCHED_FIFO (no CAP_SYS_NICE, ulimit -r 0)")
    out = _run_child(_RAISED_CHILD)
    fifo_7 = [os.SCHED_FIFO, 7]
    assert out["before"] == "SCHED_FIFO 7 requested; the node has not ticked yet"
    assert out["status"] == "SCHED_FIFO 7: every thread of the process"
    assert out["main"] == fifo_7
    assert out["early"] == [fifo_7] * 3
    assert out["late"] == fifo_7  # inherited from the thread that started it
    assert out["every_task"] == [fifo_7]
    assert out["warnings"] == []
    assert len(out["infos"]) == 1 and "SCHED_FIFO priority 7" in out["infos"][0]


# The child gives up what lets it raise a thread's priority, then asks as the node does.
_REFUSED_CHILD = r"""
import json, os, resource
from relay_ros.node.thread_priority import ProcessPriority
resource.setrlimit(resource.RLIMIT_RTPRIO, (0, 0))
if os.geteuid() == 0:
    os.setgid(65534)
    os.setuid(65534)  # every uid non-zero: the capabilities (CAP_SYS_NICE) are gone

class Log:
    infos, warnings = [], []
    def info(self, text): self.infos.append(text)
    def warning(self, text): self.warnings.append(text)

log = Log()
priority = ProcessPriority(20, log)
priority.apply()
priority.apply()
print(json.dumps({
    "status": priority.status,
    "refusal": priority.refusal,
    "warnings": log.warnings,
    "policy": os.sched_getscheduler(0),
}))
"""


def test_without_permission_the_priority_is_refused_once_saying_how_to_allow_it() -> None:
    out = _run_child(_REFUSED_CHILD)
    assert out["policy"] == os.SCHED_OTHER  # the node keeps the normal scheduler
    assert out["status"] == f"SCHED_FIFO 20 refused: {out['refusal']}"
    assert out["refusal"].startswith("SCHED_FIFO priority 20 is not permitted")
    assert "(ulimit -r) is 0" in out["refusal"]
    assert "rtprio 98" in out["refusal"] and "CAP_SYS_NICE" in out["refusal"]
    assert len(out["warnings"]) == 1  # once, not per tick
    assert out["warnings"][0].startswith(
        "thread_priority 20 refused; the node runs with the normal scheduler: SCHED_FIFO"
    )


# One thread of the child runs as another user (a raw setresuid changes only the
# calling thread; glibc's would change them all). The main thread takes SCHED_FIFO
# 20 while it is root, then becomes an unprivileged user of its own: it may still
# set its own priority 20 (it has it) but not touch the other user's thread.
_PARTLY_REFUSED_CHILD = r"""
import ctypes, json, os, threading
from relay_ros.node.thread_priority import ThreadPriorityError, raise_process_threads
SETRESUID = {"x86_64": 117, "aarch64": 147}[os.uname().machine]
libc = ctypes.CDLL(None, use_errno=True)

def setresuid_this_thread(uid):
    if libc.syscall(SETRESUID, uid, uid, uid) != 0:
        raise OSError(ctypes.get_errno(), "setresuid")

ready, stop = threading.Event(), threading.Event()
def other_user():
    setresuid_this_thread(65533)
    ready.set()
    stop.wait()
thread = threading.Thread(target=other_user)
thread.start()
ready.wait()
os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(20))
setresuid_this_thread(65534)
try:
    raise_process_threads(20)
    error = None
except ThreadPriorityError as exc:
    error = str(exc)
out = {
    "error": error,
    "main": os.sched_getscheduler(0),
    "other": os.sched_getscheduler(thread.native_id),
}
stop.set()
thread.join()
print(json.dumps(out))
"""


def test_when_one_thread_is_refused_the_raised_ones_go_back_to_normal_scheduling() -> None:
    if os.geteuid() != 0 or os.uname().machine not in ("x86_64", "aarch64"):
        pytest.skip("needs root (to give one thread another user) on x86_64 or aarch64")
    if fifo_refusal(20):
        pytest.skip("this process may not use SCHED_FIFO")
    out = _run_child(_PARTLY_REFUSED_CHILD)
    assert out["error"] is not None and "not permitted" in out["error"]
    assert out["main"] == os.SCHED_OTHER  # raised first, then put back
    assert out["other"] == os.SCHED_OTHER
