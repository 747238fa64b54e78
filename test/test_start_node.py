"""A start without jumps, end to end: policy_node on real rclpy and DDS, the reference
server over a real WebSocket (80 ms and 200 ms of inference, and through the link
emulator's ``lte`` profile), with and without the action_prefix extension.

``max_joint_step`` is 0.05 rad here: the reference flow policy moves about 0.45 rad/s
from the state, so skipping the actions the still arm never ran (5-20 of them, for
the reply's latency) would put the first point 0.05-0.2 rad away and the first
chunk would be refused. The first chunk the controller gets must be the reply to the
first observation (no refusal, no retry before it) and start at the measured state.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

import numpy as np
import pytest
from helpers import wait_until
from node_rig import Rig, t_obs_of
from sensor_msgs.msg import JointState

from relay_ros.server import ServerOptions, run_server_in_thread
from relay_ros.sim.link import LinkThread


@contextlib.contextmanager
def policy_url(latency_ms: float, link: str | None, prefix: bool) -> Iterator[str]:
    options = ServerOptions(models=("pi05",), latency_ms=latency_ms, action_prefix=prefix, seed=0)
    with run_server_in_thread(options) as server:
        if link is None:
            yield server.url_template
            return
        with LinkThread(link, ("127.0.0.1", server.port), lifetime_s=120.0, seed=0) as proxy:
            yield proxy.proxied_url(server.url_template)


@pytest.mark.parametrize(
    ("latency_ms", "link", "prefix"),
    [
        (80, None, False),
        (200, None, False),
        (200, None, True),
        (80, "lte", False),
        (80, "lte", True),
    ],
    ids=["80ms", "200ms", "200ms-prefix", "lte", "lte-prefix"],
)
def test_the_first_chunk_is_the_first_reply_and_joins_the_measured_state(
    ros_context, tmp_path, latency_ms: float, link: str | None, prefix: bool
) -> None:
    with policy_url(latency_ms, link, prefix) as url:
        # A still arm (follow=False): the first chunk is compared with where it stands.
        rig = Rig(
            ros_context, url, overrides={"max_joint_step": 0.05}, follow=False, tmp_path=tmp_path
        )
        # Each observation the node sends, by its time (the node's debug topic).
        topic = f"/{rig.node_name}/observation/state"
        lock = threading.Lock()
        observed: list[float] = []

        def record(msg: JointState) -> None:
            with lock:
                observed.append(msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9)

        rig.feeder.create_subscription(JointState, topic, record, 10)
        rig.cameras_on = False  # no observation before the debug topic is matched
        with rig:
            wait_until(lambda: rig.node.count_subscribers(topic) > 0)
            rig.cameras_on = True
            wait_until(lambda: rig.snapshot().arm, timeout=30)
            first = rig.snapshot().arm[0]
            wait_until(lambda: observed)
            with lock:
                first_observation = observed[0]
    assert t_obs_of(first) == pytest.approx(first_observation, abs=1e-6)
    positions = np.array([p.positions for p in first.points])
    np.testing.assert_allclose(positions[0], rig.state[:6], atol=2e-3)
    assert np.abs(np.diff(positions, axis=0)).max() < 0.05
