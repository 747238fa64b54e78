"""What the demo starts and with which parameters (also ``launch/demo.launch.py``).

`demo_node_parameters` gives the parameters of the simulated cameras, the simulated
arm and policy_node for a model; `demo_launch_plan` turns the launch file's string
arguments (`DEMO_LAUNCH_ARGUMENTS`) into the server command and those parameters.
Both `run_demo` and the launch file use them, so the two start the same thing; none
of it needs ROS, so it is tested without a ROS install.

On a ROS install colcon puts the console scripts in ``<prefix>/lib/relay_ros/``, which
is not on ``PATH``: `installed_executable` finds them through the ament index
(``ament_index_python``), as ``ros2 run`` does, so the launch file can start the
reference server by its full path.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from relay_ros.demo.errors import DemoArgumentError, DemoError
from relay_ros.demo.models import check_mode, load_model_config
from relay_ros.demo.policy_settings import DEMO_LAYOUTS, DemoPolicy
from relay_ros.demo.server_process import server_command
from relay_ros.models import MODEL_IDS
from relay_ros.node.launch_args import LaunchArgument, lora_argument
from relay_ros.node.param_spec import ParameterError
from relay_ros.paths import config_file
from relay_ros.pipeline.camera_map import load_camera_map
from relay_ros.sim.robot import resting_position

__all__ = [
    "ARM_NODE",
    "CAMERAS_NODE",
    "DEMO_LAUNCH_ARGUMENTS",
    "POLICY_NODE",
    "DemoLaunchPlan",
    "demo_launch_plan",
    "demo_node_parameters",
    "installed_executable",
]

_PACKAGE = "relay_ros"
_SERVER = "relay-policy-server"

# A modest camera size: enough to show real image traffic, cheap on a laptop.
_CAMERA_WIDTH = 320
_CAMERA_HEIGHT = 240
_CAMERA_RATE_HZ = 15.0
# Node names of the demo (policy_node's ~/preview resolves against its name).
POLICY_NODE = "policy_node"
CAMERAS_NODE = "sim_cameras"
ARM_NODE = "sim_arm"


def _controller_name(output_name: str, topic: str) -> str:
    """``/arm_controller/joint_trajectory`` -> ``arm_controller`` (else ``<output>_controller``)."""
    parts = [p for p in topic.split("/") if p]
    if len(parts) >= 2 and parts[-1] == "joint_trajectory":
        return parts[-2]
    return f"{output_name}_controller"


def _camera_name(key: str) -> str:
    """A parameter-safe camera name for a model camera key (``video.front`` -> ``video_front``)."""
    return "".join(c if c.isalnum() or c == "_" else "_" for c in key)


def demo_node_parameters(
    model: str,
    *,
    port: int = 8000,
    request_mode: str = "early",
    host: str = "127.0.0.1",
    policy: DemoPolicy | None = None,
) -> dict[str, list[Any]]:
    """The parameters of the three demo nodes, as launch ``parameters=`` lists.

    The cameras follow ``config/<model>_cameras.yaml`` (topics and raw/compressed
    transport) at 320x240 pixels, 15 Hz; the arm has one simulated controller per
    output of ``config/<model>.yaml`` (its joints and topic), starting at zero or at
    the middle of the joint limits when zero is outside them or within a tenth of
    their range from one; policy_node uses the
    params file with ``policy_url`` pointing at the local server, ``request_mode`` and
    the policy's ``smoothing``; the cameras draw the world of the policy's ``seed``.

    Args:
        model: A model ID of `relay_ros.models`.
        port: TCP port of the reference server.
        request_mode: ``"early"`` or ``"sync"``.
        host: Host of the reference server.
        policy: The demo's policy settings (None = `DemoPolicy` defaults).

    Returns:
        ``{"sim_cameras": [dict], "sim_arm": [dict], "policy_node": [params file, dict]}``.

    Raises:
        DemoArgumentError: unknown model or request mode, or a port outside 1..65535.
        DemoError: a state joint is not commanded by any output (the simulated arm
            would never publish it).
    """
    policy = policy or DemoPolicy()
    config = load_model_config(model, policy.layout)
    check_mode(request_mode)
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise DemoArgumentError(f"port {port!r} is not an integer in [1, 65535]")
    cameras = load_camera_map(config.camera_map, allowed_keys=None, max_cameras=None)
    camera_params: dict[str, Any] = {
        "camera_names": [_camera_name(c.key) for c in cameras],
        "seed": policy.seed,
    }
    for entry in cameras:
        name = _camera_name(entry.key)
        camera_params[f"cameras.{name}.topic"] = entry.topic
        camera_params[f"cameras.{name}.format"] = (
            "compressed" if entry.transport == "compressed" else "raw"
        )
        camera_params[f"cameras.{name}.width"] = _CAMERA_WIDTH
        camera_params[f"cameras.{name}.height"] = _CAMERA_HEIGHT
        camera_params[f"cameras.{name}.rate_hz"] = _CAMERA_RATE_HZ

    simulated = {joint for output in config.outputs for joint in output.joints}
    unserved = [joint for joint in config.state_joints if joint not in simulated]
    if unserved:
        raise DemoError(
            f"state_joints {unserved} of config/{policy.layout or model}.yaml are not commanded "
            "by any output; "
            "the simulated arm only publishes the joints of its controllers"
        )
    controllers = [_controller_name(o.name, o.topic) for o in config.outputs]
    arm_params: dict[str, Any] = {
        "controller_names": controllers,
        "joint_states_topic": config.joint_states_topic,
    }
    for controller, output in zip(controllers, config.outputs):
        initial = []
        for joint in output.joints:
            # Zero unless it is outside or near a limit (DROID's gripper 0..1, the
            # Franka's joint 6), where the synthetic plan's wander would be refused.
            initial.append(resting_position(config.joint_limits[joint]))
        arm_params[f"controllers.{controller}.joints"] = list(output.joints)
        arm_params[f"controllers.{controller}.topic"] = output.topic
        arm_params[f"controllers.{controller}.initial_positions"] = initial

    url_host = f"[{host}]" if ":" in host else host
    policy_overrides = {
        "policy_url": f"ws://{url_host}:{port}/{model}",
        "request_mode": request_mode,
        "smoothing": policy.smoothing,
    }
    if policy.lora:
        policy_overrides["lora"] = policy.lora
    return {
        "sim_cameras": [camera_params],
        "sim_arm": [arm_params],
        "policy_node": [str(config_file(f"{policy.layout or model}.yaml")), policy_overrides],
    }


#: Arguments of ``launch/demo.launch.py`` (launch passes every value as a string).
DEMO_LAUNCH_ARGUMENTS: tuple[LaunchArgument, ...] = (
    LaunchArgument("model", "pi05", f"Policy model: one of {', '.join(MODEL_IDS)}."),
    LaunchArgument("port", "8000", "TCP port of the reference policy server."),
    LaunchArgument("latency_ms", "80", "Simulated inference latency of the server, ms."),
    LaunchArgument("jitter_ms", "20", "Uniform extra latency in [-J, +J] ms."),
    LaunchArgument("request_mode", "early", "policy_node request_mode: early or sync."),
    LaunchArgument(
        "layout",
        "",
        f"An openpi observation layout ({', '.join(DEMO_LAYOUTS)}): the reference server "
        "serves it and policy_node runs config/<layout>.yaml with its cameras. Empty: the "
        "model's own format.",
    ),
    LaunchArgument(
        "lora",
        "",
        "A LoRA adapter name: the reference server serves it and policy_node selects it "
        "(its lora parameter). Empty: the base model.",
    ),
)


@dataclass(frozen=True)
class DemoLaunchPlan:
    """What ``launch/demo.launch.py`` starts.

    Attributes:
        server_cmd: Command line of ``relay-policy-server``.
        node_parameters: ``parameters=`` list per executable (``sim_cameras``,
            ``sim_arm``, ``policy_node``), see `demo_node_parameters`.
    """

    server_cmd: list[str]
    node_parameters: dict[str, list[Any]]


def installed_executable(name: str = _SERVER, *, package: str = _PACKAGE) -> str:
    """Full path of console script ``name`` in ``<prefix>/lib/<package>/`` of a colcon install.

    The prefix comes from the ament index (``AMENT_PREFIX_PATH``, set by sourcing
    ``install/setup.bash``), the same lookup ``ros2 run`` makes.

    Raises:
        DemoError: ament_index_python is not importable, ``package`` is not in the
            ament index, or the file is missing or not executable; each message says
            what to do (source the workspace, rebuild with colcon).
    """
    try:
        from ament_index_python.packages import PackageNotFoundError, get_package_prefix
    except ImportError:
        raise DemoError(
            f"cannot find {name!r}: ament_index_python is not importable; "
            "source your ROS 2 install (source /opt/ros/<distro>/setup.bash)"
        ) from None
    try:
        prefix = get_package_prefix(package)
    except (PackageNotFoundError, OSError) as exc:
        searched = os.environ.get("AMENT_PREFIX_PATH") or "(AMENT_PREFIX_PATH is not set)"
        raise DemoError(
            f"cannot find {name!r}: package {package!r} is not in the ament index ({exc}); "
            f"searched {searched}. Build it with colcon and source install/setup.bash"
        ) from None
    path = Path(prefix) / "lib" / package / name
    if not path.is_file() or not os.access(path, os.X_OK):
        state = "is not executable" if path.is_file() else "does not exist"
        raise DemoError(
            f"{path} {state}; {package} in {prefix} is installed without its console "
            f"scripts. Rebuild it: colcon build --packages-select {package}"
        )
    return str(path)


def demo_launch_plan(
    arguments: Mapping[str, str],
    *,
    server_executable: Sequence[str] = (_SERVER,),
) -> DemoLaunchPlan:
    """Turn the launch arguments (strings, missing = default) into what the launch file starts.

    Args:
        arguments: Launch argument values by name (`DEMO_LAUNCH_ARGUMENTS`).
        server_executable: The reference server program; ``launch/demo.launch.py``
            passes ``[installed_executable()]`` (on a ROS install it is not on ``PATH``).

    Raises:
        DemoArgumentError: an unknown argument, or a value that is not a number where one
            is expected (names the argument and the value), or out of range.
    """
    known = {arg.name: arg.default for arg in DEMO_LAUNCH_ARGUMENTS}
    unknown = sorted(set(arguments) - set(known))
    if unknown:
        raise DemoArgumentError(
            f"unknown demo launch arguments {unknown}; expected some of {sorted(known)}"
        )
    values = {**known, **{k: str(v) for k, v in arguments.items()}}

    def number(name: str, kind: type) -> Any:
        text = values[name].strip()
        try:
            return kind(text)
        except ValueError:
            expected = "an integer" if kind is int else "a number"
            raise DemoArgumentError(
                f"launch argument {name!r} is {values[name]!r}; expected {expected}"
            ) from None

    model = values["model"].strip()
    port = number("port", int)
    if not 1 <= port <= 65535:
        raise DemoArgumentError(f"launch argument 'port' is {port!r}; expected 1..65535")
    latency_ms = number("latency_ms", float)
    jitter_ms = number("jitter_ms", float)
    try:
        lora = lora_argument(values) or None
    except ParameterError as exc:
        raise DemoArgumentError(str(exc)) from None
    layout = values["layout"].strip() or None
    if layout is not None and layout not in DEMO_LAYOUTS:
        raise DemoArgumentError(
            f"launch argument 'layout' is {layout!r}; expected one of {list(DEMO_LAYOUTS)} "
            "or empty (the model's own format)"
        )
    policy = DemoPolicy(layout=layout, lora=lora)
    command = server_command(
        model,
        port=port,
        latency_ms=latency_ms,
        jitter_ms=jitter_ms,
        executable=tuple(server_executable),
        policy=policy,
    )
    parameters = demo_node_parameters(
        model, port=port, request_mode=values["request_mode"].strip(), policy=policy
    )
    return DemoLaunchPlan(server_cmd=command, node_parameters=parameters)
