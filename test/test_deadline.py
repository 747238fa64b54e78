"""``wait_slice``: the one step of every wait under a deadline and a cancel event
(socket readiness, name resolution, a reply). Pure, no sockets."""

from __future__ import annotations

import errno
import threading

import pytest

from relay_ros.wire.deadline import CANCEL_POLL_S, Deadline, wait_slice
from relay_ros.wire.errors import OpenCancelled


def test_no_deadline_and_no_cancel_blocks_without_bound() -> None:
    assert wait_slice(None, None, "x") is None
    assert wait_slice(Deadline(None), None, "x") is None


def test_the_time_left_bounds_the_wait() -> None:
    timeout = wait_slice(Deadline(30.0), None, "x")
    assert timeout is not None and 29.0 < timeout <= 30.0


def test_a_cancel_event_cuts_the_wait_into_short_slices() -> None:
    cancel = threading.Event()
    assert wait_slice(None, cancel, "x") == CANCEL_POLL_S
    assert wait_slice(Deadline(30.0), cancel, "x") == CANCEL_POLL_S


def test_the_next_event_shortens_the_wait_only_when_it_comes_first() -> None:
    assert wait_slice(None, None, "x", lambda: 2.0) == 2.0
    assert wait_slice(Deadline(30.0), None, "x", lambda: 2.0) == 2.0
    assert wait_slice(None, threading.Event(), "x", lambda: 2.0) == CANCEL_POLL_S
    assert wait_slice(None, None, "x", lambda: None) is None


def test_a_set_cancel_event_ends_the_wait_before_anything_else() -> None:
    cancel = threading.Event()
    cancel.set()
    asked: list[bool] = []
    with pytest.raises(OpenCancelled) as info:
        wait_slice(Deadline(0.0), cancel, "ws://host/pi05", lambda: asked.append(True))
    assert str(info.value) == "ws://host/pi05"
    assert not asked


def test_a_passed_deadline_raises_timeout_error_naming_what_was_awaited() -> None:
    with pytest.raises(TimeoutError) as info:
        wait_slice(Deadline(0.0), None, "ws://host/pi05")
    assert info.value.errno == errno.ETIMEDOUT
    assert info.value.strerror == "timed out after 0.0 s waiting for ws://host/pi05"
