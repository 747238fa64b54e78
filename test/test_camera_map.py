"""Camera map loading and validation: shipped configs, defaults, every error message."""

from __future__ import annotations

from pathlib import Path

import pytest

from relay_ros.models import get_model
from relay_ros.pipeline.camera_map import (
    CameraEntry,
    CameraMapError,
    camera_constraints,
    load_camera_map,
    load_model_camera_map,
)
from relay_ros.pipeline.observation import ObservationBuilder, ObservationError
from relay_ros.pipeline.server_spec import ServerSpec

CONFIG = Path(__file__).resolve().parent.parent / "config"
PI_KEYS = get_model("pi05").camera_keys
ALLOWED = "(allowed camera keys: ['base_0_rgb', 'left_wrist_0_rgb', 'right_wrist_0_rgb'])"
GROOT_METADATA = {
    "model": "groot",
    "action_horizon": 16,
    "video_keys": ["video.front", "video.wrist"],
    "state_keys": {"state.single_arm": 5, "state.gripper": 1},
    "action_keys": ["action.single_arm", "action.gripper"],
}


def load(mapping, max_cameras=3):
    return load_camera_map(mapping, allowed_keys=PI_KEYS, max_cameras=max_cameras)


@pytest.mark.parametrize("name", ["pi05_cameras.yaml", "pi0_cameras.yaml"])
def test_shipped_pi_maps(name):
    entries = load_model_camera_map(CONFIG / name, name.split("_")[0])
    assert entries == [
        CameraEntry("base_0_rgb", "camera/base/image_raw", "raw", "sensor_data"),
        CameraEntry(
            "left_wrist_0_rgb", "camera/wrist/image_raw/compressed", "compressed", "sensor_data"
        ),
    ]


def test_shipped_groot_map_fits_the_servers_video_keys():
    # GR00T keys come with the server's metadata: read once, checked on connect.
    assert camera_constraints("groot") == (None, None)
    entries = load_model_camera_map(CONFIG / "groot_cameras.yaml", "groot")
    assert [(e.key, e.transport) for e in entries] == [
        ("video.front", "raw"),
        ("video.wrist", "compressed"),
    ]
    server = ServerSpec.from_metadata(GROOT_METADATA, model="groot")
    builder = ObservationBuilder(server, camera_keys=[e.key for e in entries])
    assert builder.camera_keys == ("video.front", "video.wrist")


def test_defaults_and_shorthand():
    entries = load(
        {
            "base_0_rgb": "/cam/a/image_raw",
            "left_wrist_0_rgb": {"topic": "/cam/b/compressed", "qos": "reliable"},
            "right_wrist_0_rgb": {"topic": "/cam/c/compressed", "transport": "raw"},
        }
    )
    assert entries == [
        CameraEntry("base_0_rgb", "/cam/a/image_raw", "raw", "sensor_data"),
        CameraEntry("left_wrist_0_rgb", "/cam/b/compressed", "compressed", "reliable"),
        CameraEntry("right_wrist_0_rgb", "/cam/c/compressed", "raw", "sensor_data"),
    ]
    # A frozen record: the node can keep it in sets and dicts.
    with pytest.raises(AttributeError):
        entries[0].topic = "/x"  # type: ignore[misc]


def test_constraints_from_the_model_registry():
    assert camera_constraints("pi0") == (PI_KEYS, 3)
    with pytest.raises(CameraMapError, match=r"^model 'pi1' is not one of"):
        camera_constraints("pi1")


@pytest.mark.parametrize(
    ("mapping", "message"),
    [
        (
            {"base": {"topic": "/a"}},
            "camera map: entry 'base': camera key 'base' is not one of "
            f"['base_0_rgb', 'left_wrist_0_rgb', 'right_wrist_0_rgb'] {ALLOWED}",
        ),
        ({"base_0_rgb": {}}, f"camera map: entry 'base_0_rgb': missing topic {ALLOWED}"),
        ({"base_0_rgb": None}, f"camera map: entry 'base_0_rgb': missing topic {ALLOWED}"),
        (
            {"base_0_rgb": {"topic": ""}},
            f"camera map: entry 'base_0_rgb': topic must be a non-empty string, got '' {ALLOWED}",
        ),
        (
            {"base_0_rgb": {"topic": "/cam x"}},
            f"camera map: entry 'base_0_rgb': topic '/cam x' contains whitespace {ALLOWED}",
        ),
        (
            {"base_0_rgb": "/cam", "left_wrist_0_rgb": {"topic": "/cam"}},
            "camera map: entry 'left_wrist_0_rgb': duplicate topic '/cam' "
            f"(also used by 'base_0_rgb') {ALLOWED}",
        ),
        (
            {"base_0_rgb": {"topic": "/a", "encoding": "rgb8"}},
            "camera map: entry 'base_0_rgb': unknown field 'encoding'; "
            f"expected fields: ['topic', 'transport', 'qos'] {ALLOWED}",
        ),
        (
            {"base_0_rgb": {"topic": "/a", "transport": "theora"}},
            "camera map: entry 'base_0_rgb': transport 'theora' is not one of "
            f"['raw', 'compressed'] {ALLOWED}",
        ),
        (
            {"base_0_rgb": {"topic": "/a", "qos": "best_effort"}},
            "camera map: entry 'base_0_rgb': qos 'best_effort' is not one of "
            f"['sensor_data', 'reliable'] {ALLOWED}",
        ),
        (
            {"base_0_rgb": 3},
            "camera map: entry 'base_0_rgb': expected a topic string or a mapping with "
            f"'topic', got 3 {ALLOWED}",
        ),
        (
            {},
            f"camera map is empty; expected at least one camera key -> {{topic: ...}} {ALLOWED}",
        ),
    ],
)
def test_bad_entries(mapping, message):
    with pytest.raises(CameraMapError) as info:
        load(mapping)
    assert str(info.value) == message


def test_more_cameras_than_max():
    mapping = {"base_0_rgb": "/a", "left_wrist_0_rgb": "/b", "right_wrist_0_rgb": "/c"}
    assert len(load(mapping, max_cameras=3)) == 3
    with pytest.raises(CameraMapError) as info:
        load(mapping, max_cameras=2)
    assert str(info.value) == (
        "camera map: entry 'right_wrist_0_rgb': 3 cameras configured "
        "(['base_0_rgb', 'left_wrist_0_rgb', 'right_wrist_0_rgb']), more than max_cameras=2 "
        f"{ALLOWED}"
    )


def test_groot_keys_checked_against_metadata(tmp_path):
    path = tmp_path / "cams.yaml"
    path.write_text("base_0_rgb: /camera/base/image_raw\n")
    entries = load_model_camera_map(path, "groot")
    server = ServerSpec.from_metadata(GROOT_METADATA, model="groot")
    with pytest.raises(ObservationError) as info:
        ObservationBuilder(server, camera_keys=[e.key for e in entries])
    assert str(info.value) == (
        "camera key 'base_0_rgb' is not one of ['video.front', 'video.wrist']"
    )


def test_file_errors_name_the_file(tmp_path):
    missing = tmp_path / "nope.yaml"
    with pytest.raises(CameraMapError, match=rf"^camera map {str(missing)!r} cannot be read: "):
        load(missing)

    invalid = tmp_path / "invalid.yaml"
    invalid.write_text("base_0_rgb: {topic: /a\n")
    with pytest.raises(CameraMapError, match=rf"^camera map {str(invalid)!r} is not valid YAML"):
        load(invalid)

    latin1 = tmp_path / "latin1.yaml"
    latin1.write_bytes(b"base_0_rgb:\n  topic: /camera/caf\xe9\n")
    with pytest.raises(CameraMapError) as info:
        load(latin1)
    assert str(info.value) == (
        f"camera map {str(latin1)!r} is not UTF-8 text: byte 0xe9 at line 2, column 21 "
        "(invalid continuation byte); save it as UTF-8"
    )
    control = tmp_path / "control.yaml"
    control.write_text("base_0_rgb: /camera/\x01base\n")
    with pytest.raises(CameraMapError) as info:
        load(control)
    assert str(info.value) == (
        f"camera map {str(control)!r} has the control character U+0001 at line 1, column 21, "
        "which YAML does not allow"
    )

    duplicate = tmp_path / "duplicate.yaml"
    duplicate.write_text("base_0_rgb: /a\nbase_0_rgb: /b\n")
    with pytest.raises(CameraMapError) as info:
        load(duplicate)
    assert str(info.value).startswith(f"camera map {str(duplicate)!r} is not valid YAML: ")
    assert str(info.value).endswith("line 2, column 1: duplicate key 'base_0_rgb'")

    empty = tmp_path / "empty.yaml"
    empty.write_text("# only a comment\n")
    with pytest.raises(CameraMapError) as info:
        load(empty)
    assert str(info.value) == (
        f"camera map {str(empty)!r} is empty; expected at least one camera key -> "
        f"{{topic: ...}} {ALLOWED}"
    )

    listing = tmp_path / "list.yaml"
    listing.write_text("- /a\n- /b\n")
    with pytest.raises(CameraMapError) as info:
        load(listing)
    assert str(info.value) == (
        f"camera map {str(listing)!r} must be a mapping of camera key -> {{topic: ...}}, got list"
    )
