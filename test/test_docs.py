"""The documents a new user reads first stay true to the code."""

from __future__ import annotations

import re
from pathlib import Path

from relay_ros.node.params import PARAMETERS

ROOT = Path(__file__).resolve().parents[1]


def test_readme_opens_with_the_two_commands():
    lines = [line.strip() for line in (ROOT / "README.md").read_text().splitlines()]
    start = lines.index("```")
    assert lines[start + 1 : start + 4] == ["make demo", "make test", "```"]
    assert all(not line or line.startswith("#") for line in lines[:start])


def test_node_doc_lists_every_parameter():
    text = (ROOT / "docs" / "node.md").read_text()
    missing = [spec.name for spec in PARAMETERS if f"`{spec.name}`" not in text]
    assert missing == []


def test_architecture_doc_has_a_section_per_package_and_names_only_real_modules():
    """A paragraph per package (not a module catalogue), and every module path it
    names exists: the page stays true as modules move."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    package = ROOT / "relay_ros"
    packages = sorted(
        str(path.parent.relative_to(package)) for path in package.rglob("*/__init__.py")
    )
    headings = re.findall(r"^### `([\w/]+)/`", text, flags=re.M)
    assert sorted(headings) == packages
    named = set(re.findall(r"`([\w/]+\.py)`", text))
    assert named, "the page names the modules it describes"
    missing = sorted(
        name for name in named if not (package / name).exists() and not (ROOT / name).exists()
    )
    assert missing == []


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to '-'."""
    text = re.sub(r"[`*]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    anchors, fenced = set(), False
    for line in path.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and line.startswith("#"):
            anchors.add(_slug(line.lstrip("#")))
    return anchors


def test_doc_links_resolve():
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    broken = []
    for page in pages:
        text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue  # http(s), mailto
            file_part, _, anchor = target.partition("#")
            linked = (page.parent / file_part).resolve() if file_part else page
            if not linked.exists():
                broken.append(f"{page.name}: {target} (no such file)")
            elif anchor and linked.suffix == ".md" and anchor not in _anchors(linked):
                broken.append(f"{page.name}: {target} (no such heading)")
    assert broken == []
