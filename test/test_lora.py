"""LoRA adapters from policy_node: the ``lora`` and ``lora_scale`` parameters.

The seeds' server runs an adapter named in ``sampling_params.lora`` (a name, or
``{"name": ..., "scale": ...}``) and lists what it serves in ``lora_adapters``. The
node sends its adapter with every observation, refuses at connect an adapter the
server does not serve (hold, nothing commanded, /diagnostics says which it serves),
and starts a new episode when the adapter changes live. Real reference server on
loopback, real DDS (test/node_rig.py).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from helpers import wait_until
from node_rig import Rig
from test_params_live import Params

from relay_ros.server import ServerOptions, run_server_in_thread

pytestmark = pytest.mark.ros


class Seen:
    """Every observation the reference server accepted: its sampling_params and session."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.params: list[Any] = []
        self.sessions: list[Any] = []

    def hook(self, model: str, obs: dict[str, Any]) -> None:
        with self._lock:
            self.params.append(obs.get("sampling_params"))
            self.sessions.append(obs.get("session_id"))

    def count(self) -> int:
        with self._lock:
            return len(self.params)

    def last(self) -> tuple[Any, Any]:
        with self._lock:
            return self.params[-1], self.sessions[-1]


@contextlib.contextmanager
def server(seen: Seen) -> Iterator[Any]:
    options = ServerOptions(
        models=("pi05",),
        lora_adapters=("so100_towels", "so100_cups"),
        needs_session_id=True,
        observation_hook=seen.hook,
    )
    with run_server_in_thread(options) as handle:
        yield handle


def test_known_adapter_reaches_the_server_and_changes_live_as_a_new_episode(
    ros_context: Any, tmp_path: Any
) -> None:
    seen = Seen()
    with (
        server(seen) as srv,
        Rig(
            ros_context, srv.url_template, overrides={"lora": "so100_towels"}, tmp_path=tmp_path
        ) as rig,
    ):
        wait_until(lambda: rig.snapshot().arm, timeout=15)
        assert seen.last()[0] == {"lora": "so100_towels"}
        status = wait_until(lambda: rig.last_status(), timeout=10)
        assert status["lora"] == "LoRA 'so100_towels'"
        first_session = seen.last()[1]

        params = Params(rig)
        result, _ = params.set(lora_scale=0.5)
        assert result.successful, result.reason
        # From the next observation on, in a new episode (a new session id).
        wait_until(
            lambda: seen.last()[0] == {"lora": {"name": "so100_towels", "scale": 0.5}},
            timeout=10,
        )
        assert seen.last()[1] != first_session
        result, _ = params.set(lora="so100_cups")
        assert result.successful, result.reason
        wait_until(lambda: seen.last()[0] == {"lora": {"name": "so100_cups", "scale": 0.5}})
        # An adapter the server does not serve is refused, with the list; nothing changes.
        result, _ = params.set(lora="kitchen")
        assert not result.successful
        assert "Unknown LoRA adapter 'kitchen'; this server serves" in result.reason
        assert "['so100_towels', 'so100_cups']" in result.reason
        assert params.get("lora") == "so100_cups"
        # Back to the base model: no sampling_params at all.
        assert params.set(lora="")[0].successful
        wait_until(lambda: seen.last()[0] is None, timeout=10)


def test_unknown_adapter_is_refused_at_connect_with_what_the_server_serves(
    ros_context: Any, tmp_path: Any
) -> None:
    seen = Seen()
    with (
        server(seen) as srv,
        Rig(ros_context, srv.url_template, overrides={"lora": "kitchen"}, tmp_path=tmp_path) as rig,
    ):
        expected = (
            "configuration does not fit the server: Unknown LoRA adapter 'kitchen'; "
            "this server serves ['so100_towels', 'so100_cups']"
        )
        status = wait_until(
            lambda: (s := rig.last_status()) is not None and s["message"] == expected and s,
            timeout=15,
        )
        assert status["level"] == 2  # ERROR
        assert status["lora"] == "LoRA 'kitchen'"
        snapshot = rig.snapshot()
        assert seen.count() == 0 and not snapshot.arm and not snapshot.gripper
