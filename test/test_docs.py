"""The documents a new user reads first stay true to the code."""

from __future__ import annotations

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


def test_architecture_doc_names_every_module():
    text = (ROOT / "docs" / "architecture.md").read_text()
    package = ROOT / "relay_ros"
    modules = [
        str(path.relative_to(package))
        for path in package.rglob("*.py")
        if path.name != "__init__.py" and not path.name.startswith("_")
    ]
    assert [m for m in modules if f"`{m}`" not in text] == []
