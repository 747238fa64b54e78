"""Feature statistics as LeRobot computes them (meta/stats.json, ``stats/...`` columns).

Transcribed from ``src/lerobot/datasets/compute_stats.py`` (huggingface/lerobot at
commit 7427f31801f944f5ec9ce53cda02862ce7d1638b) so that a dataset written here
normalizes exactly as one LeRobot wrote:

- :class:`RunningQuantileStats`: min, max, mean, std (from the running mean of
  squares), ``count`` and the quantiles q01, q10, q50, q90, q99 from a 5000-bin
  histogram per dimension that is re-binned when the range grows;
- :func:`feature_stats`: a numeric column's statistics over an episode (``axis=0``;
  a scalar feature keeps shape (1,)); fewer than two rows: the quantiles are the mean;
- :class:`PixelStats`: per channel over every pixel of every frame (downsampled
  above 300 px as ``auto_downsample_height_width``), divided by 255, shape (3, 1, 1),
  as LeRobot's streaming video encoder computes them while it encodes;
- :func:`aggregate_stats`: episodes merged into the dataset's statistics (weighted
  mean and variance, min of the lower and max of the upper quantiles).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

__all__ = [
    "QUANTILES",
    "RunningQuantileStats",
    "aggregate_stats",
    "PixelStats",
    "auto_downsample",
    "feature_stats",
]

#: ``DEFAULT_QUANTILES``.
QUANTILES: tuple[float, ...] = (0.01, 0.10, 0.50, 0.90, 0.99)
_QUANTILE_KEYS = tuple(f"q{int(q * 100):02d}" for q in QUANTILES)
_BINS = 5000

Stats = dict[str, np.ndarray]


class RunningQuantileStats:
    """Per-dimension statistics of the vectors seen so far (LeRobot's class of the
    same name): :meth:`update` with (N, D) batches, then :meth:`statistics`."""

    def __init__(self) -> None:
        self._count = 0
        self._mean: np.ndarray | None = None
        self._mean_of_squares: np.ndarray | None = None
        self._min: np.ndarray | None = None
        self._max: np.ndarray | None = None
        self._histograms: list[np.ndarray] = []
        self._edges: list[np.ndarray] = []

    @property
    def count(self) -> int:
        """Vectors seen so far."""
        return self._count

    def update(self, batch: np.ndarray) -> None:
        """Add a batch of vectors (every axis but the last is a batch axis)."""
        batch = np.asarray(batch)
        batch = batch.reshape(-1, batch.shape[-1])
        batch = batch.astype(np.result_type(batch.dtype, np.float32), copy=False)
        n, width = batch.shape
        if self._count == 0:
            self._mean = np.mean(batch, axis=0)
            self._mean_of_squares = np.mean(batch**2, axis=0)
            self._min = np.min(batch, axis=0)
            self._max = np.max(batch, axis=0)
            self._histograms = [np.zeros(_BINS) for _ in range(width)]
            self._edges = [
                np.linspace(self._min[i] - 1e-10, self._max[i] + 1e-10, _BINS + 1)
                for i in range(width)
            ]
        else:
            assert self._mean is not None and self._min is not None and self._max is not None
            if width != self._mean.size:
                raise ValueError(
                    f"vectors of width {width} after vectors of width {self._mean.size}"
                )
            new_max = np.max(batch, axis=0)
            new_min = np.min(batch, axis=0)
            grew = bool(np.any(new_max > self._max) or np.any(new_min < self._min))
            self._max = np.maximum(self._max, new_max)
            self._min = np.minimum(self._min, new_min)
            if grew:
                self._rebin()
        self._count += n
        assert self._mean is not None and self._mean_of_squares is not None
        self._mean += (np.mean(batch, axis=0) - self._mean) * (n / self._count)
        self._mean_of_squares += (np.mean(batch**2, axis=0) - self._mean_of_squares) * (
            n / self._count
        )
        for i in range(width):
            self._histograms[i] += np.histogram(batch[:, i], bins=self._edges[i])[0]

    def _rebin(self) -> None:
        """The range grew: each old bin's count moves to the new bin of its centre."""
        assert self._min is not None and self._max is not None
        for i, (edges, hist) in enumerate(zip(self._edges, self._histograms)):
            padding = (self._max[i] - self._min[i]) * 1e-10
            new_edges = np.linspace(self._min[i] - padding, self._max[i] + padding, _BINS + 1)
            centres = (edges[:-1] + edges[1:]) / 2
            full = hist > 0
            bins = np.clip(np.searchsorted(new_edges, centres[full]) - 1, 0, _BINS - 1)
            new_hist = np.zeros(_BINS)
            np.add.at(new_hist, bins, hist[full])
            self._histograms[i] = new_hist
            self._edges[i] = new_edges

    def statistics(self) -> Stats:
        """min, max, mean, std, count and the quantiles.

        Raises:
            ValueError: fewer than two vectors seen.
        """
        if self._count < 2:
            raise ValueError("cannot compute statistics for less than 2 vectors")
        assert self._mean is not None and self._mean_of_squares is not None
        assert self._min is not None and self._max is not None
        std = np.sqrt(np.maximum(0, self._mean_of_squares - self._mean**2))
        stats: Stats = {
            "min": self._min.copy(),
            "max": self._max.copy(),
            "mean": self._mean.copy(),
            "std": std,
            "count": np.array([self._count]),
        }
        for key, q in zip(_QUANTILE_KEYS, QUANTILES):
            stats[key] = np.array(
                [_quantile(h, e, q * self._count) for h, e in zip(self._histograms, self._edges)]
            )
        return stats


def _quantile(hist: np.ndarray, edges: np.ndarray, target: float) -> float:
    """One quantile from a histogram, linear within its bin (``_compute_single_quantile``)."""
    cumsum = np.cumsum(hist)
    idx = int(np.searchsorted(cumsum, target))
    if idx == 0:
        return float(edges[0])
    if idx >= len(cumsum):
        return float(edges[-1])
    before = cumsum[idx - 1]
    inside = cumsum[idx] - before
    if inside == 0:
        return float(edges[idx])
    return float(edges[idx] + (target - before) / inside * (edges[idx + 1] - edges[idx]))


def feature_stats(column: np.ndarray) -> Stats:
    """Statistics of one episode's numeric column (rows = frames), as
    ``get_feature_stats(axis=0, keepdims=column.ndim == 1)``: a scalar feature's
    statistics have shape (1,), a vector's (D,); ``count`` is the row count."""
    column = np.asarray(column)
    rows = column.reshape(-1, 1) if column.ndim == 1 else column
    if rows.shape[0] < 2:
        stats: Stats = {
            "min": np.min(rows, axis=0),
            "max": np.max(rows, axis=0),
            "mean": np.mean(rows, axis=0),
            "std": np.std(rows, axis=0),
            "count": np.array([column.shape[0]]),
        }
        for key in _QUANTILE_KEYS:
            stats[key] = stats["mean"].copy()
    else:
        running = RunningQuantileStats()
        running.update(rows)
        stats = running.statistics()
        stats["count"] = np.array([column.shape[0]])
    if column.ndim == 1:
        stats = {k: v if k == "count" else np.asarray(v).reshape(1) for k, v in stats.items()}
    return stats


def auto_downsample(image_chw: np.ndarray, target: int = 150, threshold: int = 300) -> np.ndarray:
    """``auto_downsample_height_width``: every k-th pixel of a (C, H, W) image whose
    larger side is at least ``threshold``, k = that side // ``target``."""
    _, height, width = image_chw.shape
    if max(height, width) < threshold:
        return image_chw
    factor = int(width / target) if width > height else int(height / target)
    return image_chw[:, ::factor, ::factor]


class PixelStats:
    """One camera's pixel statistics over an episode (RGB, 0..255).

    LeRobot's streaming encoder feeds every pixel of every (downsampled) frame to a
    :class:`RunningQuantileStats`; counting each channel's 256 levels instead is
    exact and a twentieth of the work (a 224x224 frame: 0.3 ms instead of 6 ms on
    the recorder thread). :meth:`statistics` gives what one running update with all
    those pixels gives: min, max, mean and std of the levels, the quantiles from the
    5000-bin histogram over [min, max], ``count`` the number of pixels (as
    LeRobot's streaming encoder leaves it), every value but ``count`` divided by
    255 and of shape (3, 1, 1).
    """

    def __init__(self) -> None:
        self._counts = np.zeros((3, 256), dtype=np.int64)

    @property
    def pixels(self) -> int:
        """Pixels counted so far (per channel)."""
        return int(self._counts[0].sum())

    def update(self, rgb: np.ndarray) -> None:
        """Count one (H, W, 3) uint8 frame, downsampled as LeRobot does."""
        small = auto_downsample(rgb.transpose(2, 0, 1))
        for c in range(3):
            self._counts[c] += np.bincount(small[c].ravel(), minlength=256)

    def statistics(self) -> Stats:
        """The statistics (see the class docstring).

        Raises:
            ValueError: fewer than two pixels counted.
        """
        n = self.pixels
        if n < 2:
            raise ValueError("cannot compute statistics for less than 2 pixels")
        levels = np.arange(256, dtype=np.float64)
        per_channel: dict[str, list[float]] = {key: [] for key in ("min", "max", "mean", "std")}
        quantiles: dict[str, list[float]] = {key: [] for key in _QUANTILE_KEYS}
        for counts in self._counts:
            present = np.nonzero(counts)[0]
            lo, hi = float(present[0]), float(present[-1])
            mean = float((levels * counts).sum() / n)
            mean_of_squares = float((levels**2 * counts).sum() / n)
            per_channel["min"].append(lo)
            per_channel["max"].append(hi)
            per_channel["mean"].append(mean)
            per_channel["std"].append(float(np.sqrt(max(0.0, mean_of_squares - mean**2))))
            edges = np.linspace(lo - 1e-10, hi + 1e-10, _BINS + 1)
            hist = np.histogram(levels, bins=edges, weights=counts.astype(np.float64))[0]
            for key, q in zip(_QUANTILE_KEYS, QUANTILES):
                quantiles[key].append(_quantile(hist, edges, q * n))
        stats: Stats = {
            key: (np.array(values) / 255.0).reshape(3, 1, 1) for key, values in per_channel.items()
        }
        stats["count"] = np.array([n])
        for key, values in quantiles.items():
            stats[key] = (np.array(values) / 255.0).reshape(3, 1, 1)
        return stats


def _aggregate_feature(stats: Sequence[Mapping[str, np.ndarray]]) -> Stats:
    means = np.stack([s["mean"] for s in stats])
    variances = np.stack([np.asarray(s["std"]) ** 2 for s in stats])
    counts = np.stack([s["count"] for s in stats])
    total = counts.sum(axis=0)
    while counts.ndim < means.ndim:
        counts = np.expand_dims(counts, axis=-1)
    mean = (means * counts).sum(axis=0) / total
    variance = ((variances + (means - mean) ** 2) * counts).sum(axis=0) / total
    out: Stats = {
        "min": np.min(np.stack([s["min"] for s in stats]), axis=0),
        "max": np.max(np.stack([s["max"] for s in stats]), axis=0),
        "mean": mean,
        "std": np.sqrt(variance),
        "count": total,
    }
    for key in _QUANTILE_KEYS:
        if all(key in s for s in stats):
            values = np.stack([s[key] for s in stats])
            out[key] = np.min(values, axis=0) if int(key[1:]) <= 50 else np.max(values, axis=0)
    return out


def aggregate_stats(episodes: Sequence[Mapping[str, Mapping[str, np.ndarray]]]) -> dict[str, Stats]:
    """The dataset's statistics from its episodes' (``aggregate_stats``): every
    feature any episode has, merged over the episodes that have it."""
    keys = list(dict.fromkeys(key for stats in episodes for key in stats))
    return {key: _aggregate_feature([s[key] for s in episodes if key in s]) for key in keys}
