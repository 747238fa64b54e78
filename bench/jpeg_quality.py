"""JPEG on the wire: bytes per request against pixel error, per quality.

Usage (from the repository root; a few seconds)::

    .venv/bin/python bench/jpeg_quality.py [--qualities 50,60,70,75,80,85,90,95] [--frames 20]

For three 640x480 camera frames fitted into the π0.5 ``image_size`` 224x224 with
``resize_with_pad`` (as policy_node and ``encode_frame`` do), it encodes each frame
as JPEG (``relay_ros.pipeline.image_encoding.encode_jpeg``) and reports, per scene
and quality:

- **bytes/request**: the msgpack size of a whole π0.5 observation with the three
  frames as JPEG bytes (plus the 32-float state and a prompt), averaged over
  ``--frames`` time steps; the raw row is the same observation with arrays;
- **mean abs error**: mean absolute difference, in grey levels (0..255), between the
  decoded JPEG and the raw 224x224 frame, over the picture (the zero padding bars
  are left out: they are exact and would dilute the error);
- **p99 abs error**: the 99th percentile of the per-pixel absolute difference;
- **encode / decode ms**: per frame, median.

Scenes:

- ``sim``: the simulated robot's cameras (``relay_ros.sim.scene.SceneRenderer``):
  flat shapes on smooth gradients, the easiest case for JPEG;
- ``natural``: a synthetic image with natural-image statistics: a 1/f ("pink")
  noise texture in colour (the power spectrum of photographs), the same shapes with
  soft shadows, and sensor noise (Gaussian, sigma 3 grey levels at 640x480);
- ``noisy``: the sim scene with sigma 4 sensor noise, the 46 kB-per-640x480-JPEG
  case of the pipeline benchmark (noise is what costs bytes).

Issue 11 wants at most 60 kB per request for 3 cameras at 224x224.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from relay_ros.pipeline.image_encoding import (  # noqa: E402
    DEFAULT_JPEG_QUALITY,
    decode_jpeg,
    encode_jpeg,
)
from relay_ros.pipeline.images import resize_with_pad  # noqa: E402
from relay_ros.sim.scene import SceneRenderer  # noqa: E402
from relay_ros.wire.codec import packb  # noqa: E402

CAMERAS = ("base_0_rgb", "left_wrist_0_rgb", "right_wrist_0_rgb")
WIDTH, HEIGHT = 640, 480
SIZE = (224, 224)


def pink_noise(rng: np.random.Generator, height: int, width: int) -> np.ndarray:
    """(H, W) float noise with a 1/f amplitude spectrum, scaled to zero mean, unit std."""
    fy = np.fft.fftfreq(height)[:, None]
    fx = np.fft.rfftfreq(width)[None, :]
    f = np.sqrt(fx * fx + fy * fy)
    f[0, 0] = 1.0
    spectrum = (rng.normal(size=f.shape) + 1j * rng.normal(size=f.shape)) / f
    spectrum[0, 0] = 0.0
    field = np.fft.irfft2(spectrum, s=(height, width))
    return (field - field.mean()) / field.std()


class NaturalScene:
    """The sim scene on a textured, shaded background, with sensor noise."""

    def __init__(self, camera: str, seed: int = 0) -> None:
        self._renderer = SceneRenderer(WIDTH, HEIGHT, seed=seed, camera_name=camera)
        rng = np.random.default_rng(abs(hash(camera)) % 2**32 + seed)
        texture = np.stack([pink_noise(rng, HEIGHT, WIDTH) for _ in range(3)], axis=2)
        luminance = pink_noise(rng, HEIGHT, WIDTH)[:, :, None]
        # Mostly shared luminance structure, some colour variation, as in photographs.
        self._texture = (22.0 * luminance + 8.0 * texture).astype(np.float32)
        yy, xx = np.mgrid[0:HEIGHT, 0:WIDTH].astype(np.float32)
        dx, dy = (xx - WIDTH / 2) / WIDTH, (yy - HEIGHT / 2) / HEIGHT
        vignette = 1.0 - 0.35 * (dx**2 + dy**2)
        self._vignette = vignette[:, :, None]
        self._rng = np.random.default_rng(seed + 1)

    def render(self, t: float) -> np.ndarray:
        base = self._renderer.render(t).astype(np.float32)
        shaded = base * self._vignette + self._texture
        noisy = shaded + self._rng.normal(0.0, 3.0, size=shaded.shape).astype(np.float32)
        return np.clip(noisy, 0, 255).astype(np.uint8)


class NoisyScene:
    def __init__(self, camera: str, seed: int = 0) -> None:
        self._renderer = SceneRenderer(WIDTH, HEIGHT, seed=seed, camera_name=camera)
        self._rng = np.random.default_rng(seed + 2)

    def render(self, t: float) -> np.ndarray:
        base = self._renderer.render(t).astype(np.float32)
        noisy = base + self._rng.normal(0.0, 4.0, size=base.shape).astype(np.float32)
        return np.clip(noisy, 0, 255).astype(np.uint8)


def scenes() -> dict[str, Callable[[str], object]]:
    return {
        "sim": lambda camera: SceneRenderer(WIDTH, HEIGHT, seed=0, camera_name=camera),
        "natural": lambda camera: NaturalScene(camera),
        "noisy": lambda camera: NoisyScene(camera),
    }


def content_mask() -> np.ndarray:
    """True on the picture, False on the zero padding of a 640x480 frame in 224x224."""
    probe = np.full((HEIGHT, WIDTH, 3), 255, np.uint8)
    return resize_with_pad(probe, *SIZE)[:, :, 0] > 0


def observation(images: dict[str, object]) -> dict[str, object]:
    return {
        "images": images,
        "state": np.linspace(-0.5, 0.5, 32, dtype=np.float32),
        "prompt": "pick up the red block and put it in the bowl",
    }


def measure(
    scene_name: str, make: Callable[[str], object], qualities: Sequence[int], frames: int
) -> list[tuple[str, str, float, float, float, float, float]]:
    renderers = {camera: make(camera) for camera in CAMERAS}
    mask = content_mask()
    fitted_steps = []
    for i in range(frames):
        t = 0.37 * i
        fitted_steps.append(
            {c: resize_with_pad(r.render(t), *SIZE) for c, r in renderers.items()}  # type: ignore[attr-defined]
        )
    raw_bytes = statistics.mean(len(packb(observation(dict(step)))) for step in fitted_steps)
    rows = [(scene_name, "raw", raw_bytes, 0.0, 0.0, 0.0, 0.0)]
    for quality in qualities:
        sizes, errors, p99s, enc_ms, dec_ms = [], [], [], [], []
        for step in fitted_steps:
            encoded = {}
            for camera, frame in step.items():
                start = time.perf_counter()
                data = encode_jpeg(frame, quality)
                enc_ms.append((time.perf_counter() - start) * 1e3)
                start = time.perf_counter()
                back = decode_jpeg(data)
                dec_ms.append((time.perf_counter() - start) * 1e3)
                diff = np.abs(back.astype(np.int16) - frame.astype(np.int16))[mask]
                errors.append(float(diff.mean()))
                p99s.append(float(np.percentile(diff, 99)))
                encoded[camera] = data
            sizes.append(len(packb(observation(encoded))))
        rows.append(
            (
                scene_name,
                f"jpeg q{quality}",
                statistics.mean(sizes),
                statistics.mean(errors),
                statistics.mean(p99s),
                statistics.median(enc_ms),
                statistics.median(dec_ms),
            )
        )
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--qualities", default="50,60,70,75,80,85,90,95")
    parser.add_argument("--frames", type=int, default=20, help="time steps per scene")
    parser.add_argument("--scenes", default="sim,natural,noisy")
    args = parser.parse_args(argv)
    qualities = [int(q) for q in args.qualities.split(",")]
    available = scenes()
    print(
        f"3 cameras, {WIDTH}x{HEIGHT} fitted into {SIZE[0]}x{SIZE[1]}, {args.frames} steps; "
        f"default quality {DEFAULT_JPEG_QUALITY}"
    )
    print()
    print(
        "| scene | encoding | bytes/request | mean abs error | p99 abs error "
        "| encode ms/frame | decode ms/frame |"
    )
    print("|---|---|---:|---:|---:|---:|---:|")
    for name in args.scenes.split(","):
        for scene, enc, size, err, p99, ems, dms in measure(
            name, available[name], qualities, args.frames
        ):
            print(
                f"| {scene} | {enc} | {size:,.0f} | {err:.2f} | {p99:.0f} | {ems:.2f} | {dms:.2f} |"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
