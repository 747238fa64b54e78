"""Shrinking camera frames to the server's image size: time, and closeness to openpi's.

Usage (from the repository root; about 20 s)::

    .venv/bin/python bench/resize_filter.py [--repeats 200]

openpi resizes every camera frame with PIL's antialiased bilinear filter
(``openpi_client.image_tools.resize_with_pad``); the model saw frames resized that
way in training, so a robot-side resize should come close to it, and it is on the
node's image->wire path, so it should be fast. For camera frames of several sizes
fitted into 224x224, this prints, per filter:

- **mean abs diff**: mean absolute difference, in grey levels (0..255), from openpi's
  PIL resize of the same frame, over the picture (the zero padding is exact in all);
- **p50 ms**: median time of one resize, in this process.

Filters:

- ``relay_ros``: :func:`relay_ros.pipeline.images.resize_with_pad` as it is: exact
  2x2 averages while at least twice the target, then a Gaussian blur (sigma
  ``sqrt(r**2 - 1) / 2`` for the remaining factor ``r``) and ``INTER_LINEAR``;
- ``halve + area``: the same halvings, then ``cv2.INTER_AREA`` (the node's filter
  before; OpenCV's area filter is slow for non-integer factors);
- ``area``: one ``cv2.INTER_AREA`` resize;
- ``halve + linear``: the halvings, then ``INTER_LINEAR`` without the blur (aliasing).

Frames: the simulated robot's scene (``sim``: flat shapes on smooth gradients) and the
same scene on a 1/f ("pink noise") texture with sensor noise (``natural``, with
bench/jpeg_quality.py's ``pink_noise``), rendered at each size.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import cv2
import numpy as np
from PIL import Image as PILImage

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from jpeg_quality import pink_noise  # noqa: E402  (bench/ is sys.path[0] when run)

from relay_ros.pipeline.images import resize_with_pad  # noqa: E402
from relay_ros.sim.scene import SceneRenderer  # noqa: E402

TARGET = (224, 224)
SIZES = ((320, 240), (300, 300), (424, 240), (640, 480), (848, 480), (1280, 720), (1920, 1080))


def openpi_resize_with_pad(image: np.ndarray, height: int, width: int) -> np.ndarray:
    """openpi_client.image_tools.resize_with_pad's PIL path, the reference."""
    pil = PILImage.fromarray(image)
    cur_width, cur_height = pil.size
    ratio = max(cur_width / width, cur_height / height)
    resized_height, resized_width = int(cur_height / ratio), int(cur_width / ratio)
    resized = pil.resize((resized_width, resized_height), resample=PILImage.BILINEAR)
    canvas = PILImage.new(resized.mode, (width, height), 0)
    canvas.paste(resized, (int((width - resized_width) / 2), int((height - resized_height) / 2)))
    return np.asarray(canvas)


def _halvings(img: np.ndarray, height: int, width: int) -> tuple[np.ndarray, int, int]:
    ratio = max(img.shape[1] / width, img.shape[0] / height)
    new_h = max(1, min(height, int(img.shape[0] / ratio)))
    new_w = max(1, min(width, int(img.shape[1] / ratio)))
    while img.shape[0] >= 2 * new_h and img.shape[1] >= 2 * new_w:
        img = cv2.resize(img, (img.shape[1] // 2, img.shape[0] // 2), interpolation=cv2.INTER_AREA)
    return img, new_h, new_w


def _pad(resized: np.ndarray, height: int, width: int) -> np.ndarray:
    out = np.zeros((height, width, 3), np.uint8)
    top, left = (height - resized.shape[0]) // 2, (width - resized.shape[1]) // 2
    out[top : top + resized.shape[0], left : left + resized.shape[1]] = resized
    return out


def halve_then(interpolation: int) -> Callable[[np.ndarray, int, int], np.ndarray]:
    def resize(img: np.ndarray, height: int, width: int) -> np.ndarray:
        src, new_h, new_w = _halvings(img, height, width)
        return _pad(cv2.resize(src, (new_w, new_h), interpolation=interpolation), height, width)

    return resize


def direct_area(img: np.ndarray, height: int, width: int) -> np.ndarray:
    ratio = max(img.shape[1] / width, img.shape[0] / height)
    new_h = max(1, min(height, int(img.shape[0] / ratio)))
    new_w = max(1, min(width, int(img.shape[1] / ratio)))
    return _pad(cv2.resize(img, (new_w, new_h), interpolation=cv2.INTER_AREA), height, width)


FILTERS: dict[str, Callable[[np.ndarray, int, int], np.ndarray]] = {
    "relay_ros": resize_with_pad,
    "halve + area": halve_then(cv2.INTER_AREA),
    "area": direct_area,
    "halve + linear": halve_then(cv2.INTER_LINEAR),
}


def frame(scene: str, width: int, height: int, seed: int = 0) -> np.ndarray:
    """A camera frame of ``scene`` (``sim`` or ``natural``) at width x height."""
    base = SceneRenderer(width, height, seed=seed, camera_name="base_0_rgb").render(0.3)
    if scene == "sim":
        return base
    rng = np.random.default_rng(seed)
    texture = 22.0 * pink_noise(rng, height, width)[:, :, None] + 8.0 * np.stack(
        [pink_noise(rng, height, width) for _ in range(3)], axis=2
    )
    noisy = base.astype(np.float32) + texture + rng.normal(0.0, 3.0, size=base.shape)
    return np.clip(noisy, 0, 255).astype(np.uint8)


def mean_abs_diff(ours: np.ndarray, reference: np.ndarray) -> float:
    """Mean |ours - reference| over the picture (the padding is zero in both)."""
    content = reference.any(axis=2) | ours.any(axis=2)
    diff = np.abs(ours.astype(np.int16) - reference.astype(np.int16))
    return float(diff[content].mean())


def median_ms(fn: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times)) * 1000.0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=200, help="timed resizes per cell")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error(f"--repeats must be at least 1, got {args.repeats}")
    height, width = TARGET
    names = list(FILTERS)
    print(
        f"resize to {width}x{height} with padding; mean abs diff from openpi's PIL "
        f"resize (grey levels) and p50 ms of {args.repeats} resizes; OpenCV "
        f"{cv2.__version__} with {cv2.getNumThreads()} threads, {cv2.getNumberOfCPUs()} CPUs\n"
    )
    header = " | ".join(f"{n} diff / ms" for n in names)
    print(f"| camera | scene | {header} |")
    print("|---|---|" + "---:|" * len(names))
    for w, h in SIZES:
        print(f"[{w}x{h}]", file=sys.stderr, flush=True)
        for scene in ("sim", "natural"):
            img = frame(scene, w, h)
            reference = openpi_resize_with_pad(img, height, width)
            cells = []
            for name in names:
                resize = FILTERS[name]
                diff = mean_abs_diff(resize(img, height, width), reference)
                ms = median_ms(lambda f=resize, i=img: f(i, height, width), args.repeats)
                cells.append(f"{diff:.2f} / {ms:.2f}")
            print(f"| {w}x{h} | {scene} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
