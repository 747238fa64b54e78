"""SceneRenderer frames and JPEG encoding."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from relay_ros.sim.scene import SceneError, SceneRenderer, encode_jpeg


def test_frames_have_the_requested_shape_and_dtype() -> None:
    frame = SceneRenderer(640, 480, seed=0, camera_name="base").render(0.0)
    assert frame.shape == (480, 640, 3)
    assert frame.dtype == np.uint8
    assert frame.flags.c_contiguous


def test_frames_differ_over_time() -> None:
    renderer = SceneRenderer(320, 240, seed=1, camera_name="base")
    frames = [renderer.render(t) for t in (0.0, 1 / 30, 0.5, 2.0)]
    for a, b in zip(frames, frames[1:]):
        assert np.count_nonzero(np.any(a != b, axis=2)) > 100


def test_frames_are_a_pure_function_of_seed_camera_and_time() -> None:
    a = SceneRenderer(160, 120, seed=7, camera_name="wrist").render(1.25)
    b = SceneRenderer(160, 120, seed=7, camera_name="wrist").render(1.25)
    np.testing.assert_array_equal(a, b)
    other_camera = SceneRenderer(160, 120, seed=7, camera_name="base").render(1.25)
    other_seed = SceneRenderer(160, 120, seed=8, camera_name="wrist").render(1.25)
    assert not np.array_equal(a, other_camera)
    assert not np.array_equal(a, other_seed)


def test_render_does_not_modify_earlier_frames() -> None:
    renderer = SceneRenderer(64, 48, seed=0, camera_name="base")
    first = renderer.render(0.0)
    copy = first.copy()
    renderer.render(0.7)
    np.testing.assert_array_equal(first, copy)


def test_encode_jpeg_decodes_to_the_same_size_and_colours() -> None:
    frame = np.zeros((48, 64, 3), dtype=np.uint8)
    frame[..., 0] = 200  # pure red in RGB
    data = encode_jpeg(frame, quality=95)
    assert data[:2] == b"\xff\xd8"  # JPEG start-of-image marker
    decoded = cv2.cvtColor(
        cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB
    )
    assert decoded.shape == (48, 64, 3)
    assert abs(int(decoded[..., 0].mean()) - 200) <= 3  # red stays in channel 0
    assert int(decoded[..., 2].mean()) <= 3


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"width": 8, "height": 48},
            "scene width 8 is not an integer number of pixels in [16, 8192]",
        ),
        (
            {"width": 64, "height": 48.0},
            "scene height 48.0 is not an integer number of pixels in [16, 8192]",
        ),
        ({"width": 64, "height": 48, "shapes": 0}, "shapes 0 is not an integer in [1, 32]"),
    ],
)
def test_renderer_rejects_bad_sizes(kwargs: dict, message: str) -> None:
    with pytest.raises(SceneError) as info:
        SceneRenderer(**kwargs)
    assert str(info.value) == message


def test_encode_jpeg_rejects_bad_frames() -> None:
    with pytest.raises(SceneError) as info:
        encode_jpeg(np.zeros((4, 4), dtype=np.uint8))
    assert str(info.value) == "frame shape (4, 4) is not (height, width, 3)"
    with pytest.raises(SceneError) as info:
        encode_jpeg(np.zeros((4, 4, 3), dtype=np.float32))
    assert str(info.value) == "frame dtype float32 is not uint8"
    with pytest.raises(SceneError) as info:
        encode_jpeg(np.zeros((4, 4, 3), dtype=np.uint8), quality=0)
    assert str(info.value) == "JPEG quality 0 is not an integer in [1, 100]"
