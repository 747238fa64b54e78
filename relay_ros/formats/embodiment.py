"""GR00T embodiments: camera keys, state groups and action groups, read from YAML.

GR00T observations and replies are dicts keyed by group names that depend on the
robot ("embodiment"). The reference server reads them from
``config/groot_embodiments.yaml`` (found by :mod:`relay_ros.paths`) or from a YAML
file given by path, so robot teams can dry-run their own layout.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from relay_ros.paths import config_file

__all__ = [
    "EMBODIMENTS_FILE",
    "Embodiment",
    "EmbodimentError",
    "load_embodiment",
    "load_embodiments",
    "split_action_groups",
]

EMBODIMENTS_FILE = "groot_embodiments.yaml"


class EmbodimentError(ValueError):
    """The embodiment file or the requested embodiment is invalid."""


@dataclass(frozen=True)
class Embodiment:
    """One GR00T embodiment.

    Attributes:
        name: embodiment name sent as metadata ``embodiment``.
        video_keys: required camera keys, e.g. ``("video.front", "video.wrist")``.
        state_groups: ``(state key, width)`` pairs in concatenation order.
        action_groups: ``(action key, width)`` pairs in reply order.
    """

    name: str
    video_keys: tuple[str, ...]
    state_groups: tuple[tuple[str, int], ...]
    action_groups: tuple[tuple[str, int], ...]

    @property
    def state_keys(self) -> dict[str, int]:
        """State group -> width, as sent in metadata ``state_keys``."""
        return dict(self.state_groups)

    @property
    def action_keys(self) -> list[str]:
        """Action group names, as sent in metadata ``action_keys``."""
        return [key for key, _ in self.action_groups]

    @property
    def state_dim(self) -> int:
        """Width of the concatenated state vector."""
        return sum(width for _, width in self.state_groups)

    @property
    def action_dim(self) -> int:
        """Width of the concatenated action vector."""
        return sum(width for _, width in self.action_groups)


def _groups(name: str, field: str, value: Any, prefix: str) -> tuple[tuple[str, int], ...]:
    if not isinstance(value, Mapping) or not value:
        raise EmbodimentError(
            f"embodiment {name!r}: {field} is {value!r}; expected a non-empty map "
            f"of '{prefix}<group>' -> width"
        )
    groups = []
    for key, width in value.items():
        if not isinstance(key, str) or not key.startswith(prefix) or key == prefix:
            raise EmbodimentError(
                f"embodiment {name!r}: {field} key {key!r} does not start with {prefix!r}"
            )
        if isinstance(width, bool) or not isinstance(width, int) or width < 1:
            raise EmbodimentError(
                f"embodiment {name!r}: width of {key!r} is {width!r}; expected an integer >= 1"
            )
        groups.append((key, width))
    return tuple(groups)


def _parse(name: str, entry: Any) -> Embodiment:
    if not isinstance(entry, Mapping):
        raise EmbodimentError(f"embodiment {name!r} is {entry!r}; expected a map")
    video = entry.get("video_keys")
    if (
        not isinstance(video, list)
        or not video
        or not all(isinstance(k, str) and k.startswith("video.") for k in video)
        or len(set(video)) != len(video)
    ):
        raise EmbodimentError(
            f"embodiment {name!r}: video_keys is {video!r}; expected a non-empty list of "
            "distinct 'video.<camera>' strings"
        )
    return Embodiment(
        name=name,
        video_keys=tuple(video),
        state_groups=_groups(name, "state_keys", entry.get("state_keys"), "state."),
        action_groups=_groups(name, "action_keys", entry.get("action_keys"), "action."),
    )


def load_embodiments(path: str | Path | None = None) -> tuple[dict[str, Embodiment], str]:
    """Read every embodiment of a YAML file.

    Args:
        path: the YAML file; ``None`` reads ``groot_embodiments.yaml`` from the config dir.

    Returns:
        ``(embodiments by name, default name)``.

    Raises:
        EmbodimentError: the file is missing, not YAML, or an entry is malformed.
    """
    file = Path(path) if path is not None else config_file(EMBODIMENTS_FILE)
    try:
        doc = yaml.safe_load(file.read_text(encoding="utf-8"))
    except OSError as exc:
        raise EmbodimentError(f"cannot read embodiment file {str(file)!r}: {exc}") from exc
    except yaml.YAMLError as exc:
        raise EmbodimentError(f"embodiment file {str(file)!r} is not valid YAML: {exc}") from exc
    if not isinstance(doc, Mapping) or not isinstance(doc.get("embodiments"), Mapping):
        raise EmbodimentError(
            f"embodiment file {str(file)!r} has no 'embodiments' map of name -> embodiment"
        )
    embodiments = {str(name): _parse(str(name), e) for name, e in doc["embodiments"].items()}
    if not embodiments:
        raise EmbodimentError(f"embodiment file {str(file)!r} defines no embodiment")
    default = doc.get("default", next(iter(embodiments)))
    if default not in embodiments:
        raise EmbodimentError(
            f"embodiment file {str(file)!r}: default {default!r} is not one of "
            f"{sorted(embodiments)}"
        )
    return embodiments, default


def load_embodiment(spec: str | None = None) -> Embodiment:
    """Resolve ``--embodiment``: a name in the config file, a YAML path, or ``None``.

    A spec ending in ``.yaml``/``.yml`` or containing a path separator is a file, whose
    ``default`` embodiment is used; ``path.yaml:name`` picks one by name. Anything else
    names an embodiment of ``config/groot_embodiments.yaml``.

    Raises:
        EmbodimentError: the name is unknown or the file is invalid.
    """
    path: str | None = None
    name = spec
    if spec is not None:
        head, sep, tail = spec.rpartition(":")
        if sep and head.endswith((".yaml", ".yml")):
            path, name = head, tail
        elif spec.endswith((".yaml", ".yml")) or "/" in spec:
            path, name = spec, None
    embodiments, default = load_embodiments(path)
    chosen = name or default
    if chosen not in embodiments:
        raise EmbodimentError(f"embodiment {chosen!r} is not one of {sorted(embodiments)}")
    return embodiments[chosen]


def split_action_groups(
    flat: np.ndarray, action_groups: Sequence[tuple[str, int]]
) -> dict[str, np.ndarray]:
    """A GR00T reply's actions from a flat ``(H, D)`` chunk: ``{key: (1, H, width)}``.

    The groups take consecutive columns in ``action_groups`` order (``(key, width)``
    pairs whose widths add up to ``D``); each array is contiguous, as the codec sends it.
    """
    groups: dict[str, np.ndarray] = {}
    start = 0
    for key, width in action_groups:
        groups[key] = np.ascontiguousarray(flat[None, :, start : start + width])
        start += width
    return groups
