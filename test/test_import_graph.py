"""relay_ros's imports run only downward, and never in a circle (no ROS, no imports).

Every module of the package is parsed (not imported) and every ``import`` of a
relay_ros module in it, at module level, under ``TYPE_CHECKING`` or inside a
function, becomes an edge of the graph. Each module belongs to a layer:

    base < wire < pipeline < server < recording < node < sim < bag < demo < top

``base`` is the plain top-level modules (models, paths, ...), ``top`` the programs
(the package root, ``cli``, ``entry_points`` and every ``__main__``). ``formats``
(one module per wire format) belongs to ``wire``: the client checks a reply's type
with its model's format, and the pipeline and the server build on the formats. A module may
import its own layer and the layers below it; an import of a higher layer, or a
cycle of imports (through any layers), fails with the modules and lines involved.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "relay_ros"

LAYERS = (
    "base", "wire", "pipeline", "server", "recording", "node", "sim", "bag", "demo", "top",
)  # fmt: skip
#: The top-level modules of the bottom layer: facts every layer may read.
BASE_MODULES = {
    "models",
    "paths",
    "yaml_files",
    "stop_signals",
    "_version",
    "world",
    "logsafe",
    "image_size",
}
#: The top-level modules of the top layer: programs that wire the layers together.
TOP_MODULES = {"cli", "entry_points", "__main__"}
#: Packages that belong to another package's layer.
PACKAGE_LAYERS = {"formats": "wire"}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def layer_of(module: str) -> str:
    """The layer of a relay_ros module (an unknown top-level module fails the test)."""
    parts = module.split(".")
    if len(parts) == 1 or parts[-1] == "__main__" or parts[1] in TOP_MODULES:
        return "top"
    if parts[1] in BASE_MODULES:
        return "base"
    if parts[1] in LAYERS:
        return parts[1]
    if parts[1] in PACKAGE_LAYERS:
        return PACKAGE_LAYERS[parts[1]]
    raise AssertionError(
        f"module {module} has no layer: add {parts[1]!r} to BASE_MODULES or TOP_MODULES "
        f"in {Path(__file__).name}, or put it in one of the packages {LAYERS[1:-1]}"
    )


def _resolve(importer: str, node: ast.ImportFrom | ast.Import) -> Iterator[str]:
    """The relay_ros modules an import statement in ``importer`` loads by name."""
    if isinstance(node, ast.Import):
        for alias in node.names:
            if alias.name.split(".")[0] == "relay_ros":
                yield alias.name
        return
    base = node.module or ""
    if node.level:  # relative: from the importer's package, then up level - 1
        package = importer.split(".")
        if MODULES[importer].name != "__init__.py":
            package.pop()
        package = package[: len(package) - (node.level - 1)]
        base = ".".join(package + ([base] if base else []))
    if base.split(".")[0] != "relay_ros":
        return
    for alias in node.names:
        candidate = f"{base}.{alias.name}"
        yield candidate if candidate in MODULES else base


def import_edges() -> list[tuple[str, str, int, bool]]:
    """``(importer, imported, line, inside a function)`` for every internal import."""
    edges = []
    for module, path in MODULES.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        in_function: set[int] = set()
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                in_function.update(id(n) for n in ast.walk(node) if n is not node)
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for target in _resolve(module, node):
                    assert target in MODULES, f"{module}:{node.lineno} imports {target}, no module"
                    edge = (module, target, node.lineno, id(node) in in_function)
                    if edge not in edges:
                        edges.append(edge)
    return edges


EDGES = import_edges()


def test_every_module_has_a_layer() -> None:
    assert len(MODULES) > 100
    for module in MODULES:
        layer_of(module)


def test_imports_only_go_down() -> None:
    upward = [
        f"{src}:{line} ({layer_of(src)}) imports {dst} ({layer_of(dst)})"
        for src, dst, line, _ in EDGES
        if LAYERS.index(layer_of(dst)) > LAYERS.index(layer_of(src))
    ]
    assert not upward, "imports that go up a layer:\n" + "\n".join(upward)


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(start: str) -> None:
        # Iterative, so a deep chain cannot hit the recursion limit.
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return found


def package_edges(edges: list[tuple[str, str, int, bool]]) -> list[tuple[str, str, int, bool]]:
    """The edges plus, for each, the packages Python runs first: importing
    ``relay_ros.a.b.c`` executes ``relay_ros/a/__init__.py`` and ``relay_ros/a/b/__init__.py``
    (not the root package, and not a package the importer is inside of, which runs
    already)."""
    out = list(edges)
    for src, dst, line, inside in edges:
        parts = dst.split(".")
        for depth in range(2, len(parts)):
            package = ".".join(parts[:depth])
            if package in MODULES and not src.startswith(package + ".") and src != package:
                out.append((src, package, line, inside))
    return out


def test_no_import_cycles() -> None:
    # Through packages too: a package whose __init__ imports its modules makes every
    # import of one of them an import of all (a cycle that only shows at run time).
    edges = package_edges(EDGES)
    graph: dict[str, set[str]] = {module: set() for module in MODULES}
    for src, dst, _, _ in edges:
        if src != dst:
            graph[src].add(dst)
    cycles = _cycles(graph)
    described = []
    for component in cycles:
        members = set(component)
        lines = [
            f"  {src}:{line} imports {dst}"
            for src, dst, line, _ in edges
            if src in members and dst in members and src != dst
        ]
        described.append("\n".join(lines))
    assert not cycles, "import cycles:\n" + "\n\n".join(described)


def test_the_checker_sees_upward_and_function_level_imports() -> None:
    # The graph is only as good as its parsing: known edges must be in it.
    edges = {(src, dst): inside for src, dst, _, inside in EDGES}
    assert edges[("relay_ros.wire.transport", "relay_ros._version")] is False
    assert edges[("relay_ros", "relay_ros.wire.client")] is True  # lazy PolicyClient
    assert layer_of("relay_ros.server.__main__") == "top"
    assert layer_of("relay_ros.world") == "base"
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    # Importing a package's module runs the package's __init__ first.
    known = [("relay_ros.pipeline.smoothing.splice", "relay_ros.pipeline.gate.motion", 1, False)]
    assert ("relay_ros.pipeline.smoothing.splice", "relay_ros.pipeline.gate", 1, False) in (
        package_edges(known)
    )
