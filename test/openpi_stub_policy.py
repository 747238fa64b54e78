"""A stub policy served by openpi's own ``websocket_policy_server`` (the ``openpi-server``
package), for test/test_openpi_interop.py.

Run with the interpreter of ``.venv-openpi`` (openpi pins numpy<2, so it lives in a
venv of its own), never imported by relay_ros::

    .venv-openpi/bin/python test/openpi_stub_policy.py --env droid --port 8765 --record seen.jsonl

The policy implements openpi's ``BasePolicy.infer`` and asserts that each
observation has exactly the keys, shapes and dtypes of openpi's example observation
for the environment (``make_droid_example``, ``make_aloha_example`` in
``src/openpi/policies/*_policy.py``, written out below by hand), then answers
``{"actions": (H, D)}`` as the environment's checkpoints do: DROID 15 x (7
normalised joint velocities + gripper position), ALOHA 50 x 14 joint positions.
Every observation that passed is appended to ``--record`` as one JSON line; one that
fails raises, and openpi's server then sends the traceback and closes the connection.
"""

from __future__ import annotations

import argparse
import json
import logging

import numpy as np
from openpi_client import base_policy
from openpi_server import WebsocketPolicyServer

#: key path -> (shape, dtype) of openpi's example observation (prompt: str).
EXAMPLES = {
    "droid": {
        ("observation/exterior_image_1_left",): ((224, 224, 3), "uint8"),
        ("observation/wrist_image_left",): ((224, 224, 3), "uint8"),
        ("observation/joint_position",): ((7,), "float64"),
        ("observation/gripper_position",): ((1,), "float64"),
    },
    "aloha": {
        ("state",): ((14,), "float64"),
        ("images", "cam_high"): ((3, 224, 224), "uint8"),
        ("images", "cam_low"): ((3, 224, 224), "uint8"),
        ("images", "cam_left_wrist"): ((3, 224, 224), "uint8"),
        ("images", "cam_right_wrist"): ((3, 224, 224), "uint8"),
    },
}
#: What openpi's serve_policy announces for each (the train config's policy_metadata).
METADATA = {"droid": {}, "aloha": {"reset_pose": [0, -1.5, 1.5, 0, 0, 0]}}
#: The arm's joint velocity, normalised (DROID: 0.2 rad per step at 1).
DROID_VELOCITY = 0.05


def _leaves(obs: dict, prefix: tuple = ()) -> dict:
    out = {}
    for key, value in obs.items():
        if isinstance(value, dict):
            out.update(_leaves(value, prefix + (key,)))
        else:
            out[prefix + (key,)] = value
    return out


class StubPolicy(base_policy.BasePolicy):
    def __init__(self, env: str, record: str) -> None:
        self.env = env
        self.record = record

    def infer(self, obs: dict) -> dict:
        leaves = _leaves(obs)
        prompt = leaves.pop(("prompt",))
        assert isinstance(prompt, str), f"prompt is {type(prompt).__name__}"
        expected = EXAMPLES[self.env]
        assert set(leaves) == set(expected), f"keys {sorted(leaves)} != {sorted(expected)}"
        for key, (shape, dtype) in expected.items():
            value = leaves[key]
            assert isinstance(value, np.ndarray), f"{key} is {type(value).__name__}"
            assert value.shape == shape, f"{key} has shape {value.shape}, not {shape}"
            assert value.dtype == np.dtype(dtype), f"{key} is {value.dtype}, not {dtype}"
        with open(self.record, "a", encoding="utf-8") as f:
            f.write(json.dumps({"keys": ["/".join(k) for k in sorted(leaves)], "prompt": prompt}))
            f.write("\n")
        if self.env == "droid":
            actions = np.zeros((15, 8))
            actions[:, :7] = DROID_VELOCITY
            actions[:, 7] = obs["observation/gripper_position"][0]
        else:
            state = obs["state"]
            actions = state[None, :] + 0.001 * np.arange(50)[:, None]
        return {"actions": actions}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", choices=sorted(EXAMPLES), required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--record", required=True)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO)
    server = WebsocketPolicyServer(
        StubPolicy(args.env, args.record),
        host="127.0.0.1",
        port=args.port,
        metadata=METADATA[args.env],
    )
    server.serve_forever()


if __name__ == "__main__":
    main()
