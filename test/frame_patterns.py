"""Camera frames that say which frame they are, through resizing and video coding.

:func:`pattern` draws frame ``n`` as 8 black or white stripes (the bits of ``n`` mod
256) with a red corner; :func:`pattern_index` reads ``n`` back from the frame after
policy_node's fit into the model's image size (openpi's resize with padding), a JPEG
round trip and AV1 or H.264 coding. test_recording.py checks it on every frame it
records.
"""

from __future__ import annotations

import numpy as np


def pattern(n: int, width: int = 64, height: int = 48) -> np.ndarray:
    """Frame ``n``: 8 stripes, black or white per bit of n (mod 256), a red corner."""
    img = np.zeros((height, width, 3), np.uint8)
    stripe = width // 8
    for bit in range(8):
        if (n >> bit) & 1:
            img[:, bit * stripe : (bit + 1) * stripe] = 255
    img[: height // 4, : width // 8] = (220, 20, 20)
    return img


def pattern_index(fitted: np.ndarray, width: int = 64, height: int = 48) -> int:
    """The ``n`` of a :func:`pattern` frame after the node's fit (and codec loss)."""
    h, w = fitted.shape[:2]
    scale = min(h / height, w / width)
    top = (h - round(height * scale)) // 2
    left = (w - round(width * scale)) // 2
    stripe = width // 8 * scale
    n = 0
    for bit in range(8):
        x0 = int(left + bit * stripe + stripe * 0.3)
        x1 = int(left + (bit + 1) * stripe - stripe * 0.3)
        y0 = int(top + height * scale * 0.4)
        y1 = int(top + height * scale * 0.9)
        if fitted[y0:y1, x0:x1].mean() > 128:
            n |= 1 << bit
    return n
