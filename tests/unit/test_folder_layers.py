"""The package's folders import one way: each from its own layer or lower, no two folders in a circle.

The layers are those of docs/architecture.md.  Imports under ``if TYPE_CHECKING:`` are not
counted (they run no code); imports inside functions are (they run when called).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "airflow_kafka_events"
NAME = "airflow_kafka_events"

#: Lowest first; a node imports only nodes of its own layer or a lower one.
LAYERS: list[set[str]] = [
    {"errors", "retry", "airflow_config", "lazy_exports", "__about__"},
    {"envelopes", "metrics", "airflow_versions", "triggerer_heap", "local_broker"},
    {"kafka"},
    {"dead_letters", "provider"},
    {"assets"},
    {"bridge"},
    {"watcher"},
    {"streams"},
    {"http", "iteration", "ui"},
    {"cli"},
    {"(package)"},
]


def _node(module: str) -> str:
    """The top folder (or top-level module) of a dotted module name of the package."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "(package)"


def _module_of(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST, module: str, is_package: bool) -> set[str]:
    """Modules of the package ``tree`` imports at run time."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.startswith(NAME))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if is_package else module.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            if target.startswith(NAME):
                if target != NAME:  # the package's own __init__ runs for any import of it
                    found.add(target)
                found.update(f"{target}.{alias.name}" for alias in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def _graph() -> dict[str, set[str]]:
    known = {_module_of(p) for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        module = _module_of(path)
        tree = ast.parse(path.read_text(encoding="utf-8"))
        source = _node(module)
        for target in _imports(tree, module, path.name == "__init__.py"):
            if target not in known:
                continue  # a name imported from a package, not a module
            if _node(target) != source:
                graph.setdefault(source, set()).add(_node(target))
    return graph


def _layer(node: str) -> int:
    for index, layer in enumerate(LAYERS):
        if node in layer:
            return index
    raise AssertionError(f"{node!r} has no layer: give it one in LAYERS and in docs/architecture.md")


def test_every_folder_imports_only_its_own_layer_or_lower():
    up = [
        f"{source} (layer {_layer(source) + 1}) -> {target} (layer {_layer(target) + 1})"
        for source, targets in sorted(_graph().items())
        for target in sorted(targets)
        if _layer(target) > _layer(source)
    ]
    assert not up, "imports that run up the layers:\n" + "\n".join(up)


def test_no_two_folders_import_each_other():
    graph = _graph()
    both = sorted(
        {tuple(sorted((a, b))) for a, targets in graph.items() for b in targets if a in graph.get(b, ())}
    )
    assert not both, f"folders importing each other: {both}"
