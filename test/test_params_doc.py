"""docs/node.md's parameter table is the one rendered from the declarations."""

from __future__ import annotations

from pathlib import Path

import pytest

from relay_ros.node.params import PARAMETERS
from relay_ros.node.params_doc import BEGIN, END, main, markdown_table, replace_table

NODE_DOC = Path(__file__).resolve().parents[1] / "docs" / "node.md"


def test_node_doc_table_is_current():
    text = NODE_DOC.read_text(encoding="utf-8")
    assert replace_table(text) == text, (
        "docs/node.md's parameter table is out of date; run "
        "python -m relay_ros.node.params_doc --update docs/node.md"
    )


def test_table_has_one_row_per_parameter_with_range_and_live_flag():
    rows = [line for line in markdown_table().splitlines() if line.startswith("| `")]
    names = [row.split("`")[1] for row in rows]
    assert names[: len(PARAMETERS)] == [spec.name for spec in PARAMETERS]
    assert names[len(PARAMETERS) :] == [
        "outputs.<name>.topic",
        "outputs.<name>.joints",
        "outputs.<name>.dims",
        "outputs.<name>.action_key",
        "joint_limits.<joint>.has_position_limits",
        "joint_limits.<joint>.min_position",
        "joint_limits.<joint>.max_position",
        "joint_limits.<joint>.has_velocity_limits",
        "joint_limits.<joint>.max_velocity",
        "joint_limits.<joint>.has_acceleration_limits",
        "joint_limits.<joint>.max_acceleration",
    ]
    execute = next(row for row in rows if row.startswith("| `execute_horizon`"))
    assert "| int | `0` | 0 .. 1000 | yes |" in execute
    model = next(row for row in rows if row.startswith("| `model`"))
    assert "| `pi05`, `pi0`, `groot` | no |" in model
    assert "| required |" in next(row for row in rows if row.startswith("| `state_joints`"))
    # Descriptions are plain text; '<model>' must not turn into an HTML tag.
    assert "config/\\<model>_cameras.yaml" in markdown_table()


def test_update_rewrites_only_the_marked_section(tmp_path: Path, capsys):
    doc = tmp_path / "node.md"
    doc.write_text(f"# title\n\n{BEGIN}\nold table\n{END}\n\nafter\n", encoding="utf-8")
    assert main(["--update", str(doc)]) == 0
    text = doc.read_text(encoding="utf-8")
    assert text == f"# title\n\n{BEGIN}\n{markdown_table()}{END}\n\nafter\n"
    assert main(["--markdown"]) == 0
    assert capsys.readouterr().out.endswith(markdown_table())


def test_update_without_markers_says_what_is_missing(tmp_path: Path, capsys):
    doc = tmp_path / "node.md"
    doc.write_text("# no markers\n", encoding="utf-8")
    assert main(["--update", str(doc)]) == 1
    assert "needs the lines" in capsys.readouterr().err
    with pytest.raises(ValueError, match="needs the lines"):
        replace_table("nothing")
