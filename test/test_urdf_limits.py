"""Joint limits from real URDFs, and the limits each commanded joint runs under.

The fixtures in test/urdf/ are xacro expansions of the robots' own description
packages (source and commit in each file's first comment): a Universal Robots
UR5e, a Franka FR3 with its hand (a mimic finger) and a Kinova Gen3 7-DOF with a
Robotiq 2F-85 (continuous joints, mimic joints with multiplier -1).
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from relay_ros.pipeline.joint_limits import (
    JointLimitsError,
    LimitParams,
    resolve_joint_limits,
)
from relay_ros.pipeline.urdf_limits import UrdfError, load_urdf_file, parse_urdf

URDF = Path(__file__).parent / "urdf"
UR_JOINTS = [
    "shoulder_pan_joint",
    "shoulder_lift_joint",
    "elbow_joint",
    "wrist_1_joint",
    "wrist_2_joint",
    "wrist_3_joint",
]


def test_ur5e_joints_and_limits() -> None:
    robot = load_urdf_file(URDF / "ur5e.urdf")
    assert robot.name == "ur5e"
    assert [j.name for j in robot.joints.values() if j.type == "revolute"] == UR_JOINTS
    elbow = robot.joints["elbow_joint"]
    assert (elbow.lower, elbow.upper) == (-math.pi, math.pi)
    assert elbow.velocity == math.pi
    limits = resolve_joint_limits(UR_JOINTS, {}, robot)
    assert limits["shoulder_pan_joint"].min_position == -2 * math.pi
    assert all(limit.max_velocity == math.pi for limit in limits.values())
    assert not limits["elbow_joint"].has_acceleration_limits
    assert (
        limits["elbow_joint"].source
        == f"position and velocity from URDF file '{URDF / 'ur5e.urdf'}'"
    )


def test_fr3_soft_limits_and_mimic_finger() -> None:
    robot = load_urdf_file(URDF / "fr3.urdf")
    joint4 = robot.joints["fr3_joint4"]
    assert (joint4.lower, joint4.upper, joint4.velocity) == (-3.0421, -0.1518, 2.62)
    finger2 = robot.joints["fr3_finger_joint2"]
    assert finger2.type == "prismatic" and finger2.mimic is not None
    assert (finger2.mimic.joint, finger2.mimic.multiplier, finger2.mimic.offset) == (
        "fr3_finger_joint1",
        1.0,
        0.0,
    )
    assert robot.leader_of("fr3_finger_joint2") == "fr3_finger_joint1"
    limits = resolve_joint_limits(["fr3_joint6", "fr3_finger_joint1"], {}, robot)
    assert (limits["fr3_joint6"].min_position, limits["fr3_joint6"].max_position) == (
        0.5445,
        4.5169,
    )
    # The follower has the same range and speed: nothing to narrow.
    assert (limits["fr3_finger_joint1"].max_position, limits["fr3_finger_joint1"].max_velocity) == (
        0.04,
        0.2,
    )
    with pytest.raises(JointLimitsError) as info:
        resolve_joint_limits(["fr3_finger_joint2", "fr3_hand_joint"], {}, robot)
    source = f"URDF file '{URDF / 'fr3.urdf'}'"
    assert str(info.value) == (
        f"joint 'fr3_finger_joint2' mimics 'fr3_finger_joint1' in {source} (multiplier 1, "
        "offset 0): it follows 'fr3_finger_joint1' and is never commanded itself; command "
        "'fr3_finger_joint1' and remove 'fr3_finger_joint2' from the outputs' joints; "
        f"joint 'fr3_hand_joint' is a fixed joint in {source}; only revolute, continuous, "
        "prismatic joints can be commanded"
    )


def test_gen3_continuous_joints_have_no_position_range_but_a_velocity_limit() -> None:
    robot = load_urdf_file(URDF / "gen3.urdf")
    # The <ros2_control> block's <joint> elements are not URDF joints.
    assert robot.joints["joint_1"].type == "continuous"
    joints = [f"joint_{i}" for i in range(1, 8)] + ["robotiq_85_left_knuckle_joint"]
    limits = resolve_joint_limits(joints, {}, robot)
    assert not limits["joint_1"].has_position_limits
    assert limits["joint_1"].min_position == -math.inf
    assert limits["joint_1"].max_velocity == 1.3963
    assert limits["joint_2"].has_position_limits and limits["joint_2"].max_position == 2.24
    assert limits["joint_7"].max_velocity == 1.2218
    assert limits["joint_1"].source.startswith("no position limits (a continuous joint in URDF")
    # Five knuckle and finger joints mimic the left knuckle, some with multiplier -1.
    followers = {j.name: (m, o) for j, m, o in robot.followers("robotiq_85_left_knuckle_joint")}
    assert followers["robotiq_85_right_knuckle_joint"] == (-1.0, 0.0)
    assert len(followers) == 5
    knuckle = limits["robotiq_85_left_knuckle_joint"]
    assert (knuckle.min_position, knuckle.max_position, knuckle.max_velocity) == (0.0, 0.8, 0.5)


def test_a_mimic_follower_narrows_its_leader() -> None:
    urdf = """<robot name="g">
      <joint name="lead" type="revolute"><limit lower="-1" upper="1" velocity="2"/></joint>
      <joint name="follow" type="revolute">
        <mimic joint="lead" multiplier="-2" offset="0.5"/>
        <limit lower="-0.5" upper="1.5" velocity="1"/>
      </joint>
      <joint name="chain" type="revolute">
        <mimic joint="follow" multiplier="1"/><limit lower="-10" upper="10" velocity="0.4"/>
      </joint>
    </robot>"""
    robot = parse_urdf(urdf, "g.urdf")
    # follow = -2 lead + 0.5 in [-0.5, 1.5]  ->  lead in [-0.5, 0.5]; speed 1 / 2 = 0.5;
    # chain = follow: speed 0.4 / 2 = 0.2.
    limit = resolve_joint_limits(["lead"], {}, robot)["lead"]
    assert (limit.min_position, limit.max_position) == (-0.5, 0.5)
    assert limit.max_velocity == pytest.approx(0.2)
    assert "narrowed to keep mimic joints ['follow', 'chain'] inside their limits" in limit.source


def test_parameters_override_the_urdf_per_joint() -> None:
    robot = load_urdf_file(URDF / "ur5e.urdf")
    params = {
        "elbow_joint": LimitParams(
            has_position_limits=True,
            min_position=-1.0,
            max_position=2.0,
            has_acceleration_limits=True,
            max_acceleration=8.0,
        ),
        "wrist_3_joint": LimitParams(
            has_position_limits=False, has_velocity_limits=True, max_velocity=1.0
        ),
    }
    limits = resolve_joint_limits(UR_JOINTS, params, robot)
    elbow = limits["elbow_joint"]
    assert (elbow.min_position, elbow.max_position, elbow.max_velocity) == (-1.0, 2.0, math.pi)
    assert elbow.max_acceleration == 8.0
    assert elbow.source.startswith("position from parameters, velocity from URDF file")
    assert elbow.source.endswith(", acceleration from parameters")
    wrist = limits["wrist_3_joint"]
    assert not wrist.has_position_limits and wrist.max_velocity == 1.0
    assert limits["wrist_1_joint"].max_position == 2 * math.pi  # untouched


def test_joints_without_limits_are_refused_naming_each_fix() -> None:
    robot = load_urdf_file(URDF / "ur5e.urdf")
    with pytest.raises(JointLimitsError) as info:
        resolve_joint_limits(
            ["elbow_joint", "gripper", "lift"],
            {
                "elbow_joint": LimitParams(has_velocity_limits=False),
                "lift": LimitParams(has_position_limits=True, min_position=0.0, max_position=1.0),
            },
            robot,
        )
    source = f"URDF file '{URDF / 'ur5e.urdf'}'"
    assert str(info.value) == (
        "joint 'elbow_joint' has no velocity limit: joint_limits.elbow_joint.has_velocity_limits "
        "is false; policy_node commands a joint only within a velocity limit (set "
        "has_velocity_limits: true and max_velocity); "
        f"joint 'gripper' has no position limit: {source} has no such joint and no parameter "
        "sets one; give joint_limits.gripper.has_position_limits: true with "
        "joint_limits.gripper.min_position and joint_limits.gripper.max_position; "
        f"joints ['gripper', 'lift'] have no velocity limit: {source} has no such joint and no "
        "parameter sets one; give joint_limits.<joint>.has_velocity_limits: true with "
        "joint_limits.<joint>.max_velocity for each"
    )


def test_a_value_without_its_flag_is_refused() -> None:
    with pytest.raises(JointLimitsError, match="joint_limits.j.max_velocity is given but "):
        resolve_joint_limits(
            ["j"],
            {
                "j": LimitParams(
                    has_position_limits=True, min_position=0.0, max_position=1.0, max_velocity=1.0
                )
            },
            None,
        )


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "g.urdf is empty; expected a URDF <robot> document"),
        ("<robot><joint", "g.urdf is not valid XML: unclosed token"),
        ("<sdf/>", "g.urdf: the document element is <sdf>, expected <robot>"),
        (
            '<robot xmlns:xacro="http://www.ros.org/wiki/xacro">'
            '<xacro:include filename="a"/></robot>',
            "g.urdf is a xacro file, not a URDF; expand it first",
        ),
        ('<robot><joint type="revolute"/></robot>', "g.urdf: a <joint> has no name attribute"),
        (
            '<robot><joint name="a" type="hinge"/></robot>',
            "g.urdf, joint 'a': type 'hinge' is not one of ['revolute', 'continuous',",
        ),
        (
            '<robot><joint name="a" type="revolute"/></robot>',
            "g.urdf, joint 'a': a revolute joint needs a <limit lower=... upper=... velocity=...>",
        ),
        (
            '<robot><joint name="a" type="revolute">'
            '<limit upper="1" velocity="fast"/></joint></robot>',
            "g.urdf, joint 'a': <limit velocity='fast'> is not a number",
        ),
        (
            '<robot><joint name="a" type="prismatic">'
            '<limit lower="1" upper="0" velocity="1"/></joint></robot>',
            "g.urdf, joint 'a': <limit lower=1.0> is above upper=0.0",
        ),
        (
            '<robot><joint name="a" type="continuous"><mimic joint="b"/></joint></robot>',
            "g.urdf, joint 'a': <mimic joint='b'> names no joint of this robot",
        ),
        (
            '<robot><joint name="a" type="continuous"><mimic joint="b"/></joint>'
            '<joint name="b" type="continuous"><mimic joint="a"/></joint></robot>',
            "g.urdf: mimic joints form a cycle: a -> b",
        ),
        (
            '<robot><joint name="a" type="fixed"/><joint name="a" type="fixed"/></robot>',
            "g.urdf: joint 'a' is defined twice",
        ),
    ],
)
def test_bad_urdfs_are_refused_naming_the_joint_and_attribute(text: str, message: str) -> None:
    with pytest.raises(UrdfError) as info:
        parse_urdf(text, "g.urdf")
    assert str(info.value).startswith(message), str(info.value)


def test_files_that_are_not_urdfs(tmp_path: Path) -> None:
    with pytest.raises(
        UrdfError,
        match=r"is a xacro file, not a URDF; expand it first, e.g. 'xacro ur.urdf.xacro > ur.urdf'",
    ):
        load_urdf_file(tmp_path / "ur.urdf.xacro")
    with pytest.raises(UrdfError, match=r"URDF file '.*missing.urdf' cannot be read: No such file"):
        load_urdf_file(tmp_path / "missing.urdf")
    latin = tmp_path / "latin.urdf"
    latin.write_bytes('<robot name="caf\xe9"/>'.encode("latin-1"))
    with pytest.raises(UrdfError, match="latin.urdf' is not valid XML: not well-formed"):
        load_urdf_file(latin)


def test_a_joint_narrowed_by_its_safety_controller() -> None:
    urdf = """<robot name="r"><joint name="a" type="revolute">
      <limit lower="-2" upper="2" velocity="1"/>
      <safety_controller soft_lower_limit="-1.5" soft_upper_limit="2.5" k_position="10"/>
    </joint></robot>"""
    joint = parse_urdf(urdf, "r.urdf").joints["a"]
    assert (joint.lower, joint.upper, joint.soft_limited) == (-1.5, 2.0, True)
