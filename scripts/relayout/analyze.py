"""Measure the package for the relayout: modules, re-exports, imports through them, the import graph.

Usage: python scripts/relayout/analyze.py REPO [--json OUT]
Reads src/airflow_kafka_events and tests/ with ast; runs nothing of the project.
"""

from __future__ import annotations

import ast
import collections
import json
import sys
from pathlib import Path

import layout_map

PKG = "airflow_kafka_events"


def module_name(path: Path, root: Path) -> str:
    rel = path.relative_to(root).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def resolve_from(mod: str, is_pkg: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = mod.split(".")
    if not is_pkg:
        base = base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


class Module:
    def __init__(self, name: str, path: Path, is_pkg: bool) -> None:
        self.name, self.path, self.is_pkg = name, path, is_pkg
        self.tree = ast.parse(path.read_text(), str(path))
        self.lines = len(path.read_text().splitlines())
        self.defined: set[str] = set()
        self.imported: dict[str, tuple[str, str]] = {}  # local -> (module, name)
        self.all: list[str] | None = None
        self.lazy: dict[str, str] = {}
        self.aliases: list[
            tuple[str, str, int]
        ] = []  # (alias, target, line) for Name = OtherName at top level
        for node in self.tree.body:
            self._top(node, top=True)
        # imports anywhere (for edges)
        self.edges: list[tuple[str, str, int, bool]] = []  # (module, name, line, type_checking)
        self._walk_imports()

    def _top(self, node: ast.stmt, top: bool) -> None:  # noqa: C901 (a one-off migration script)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            self.defined.add(node.name)
        elif isinstance(node, ast.Assign):
            for t in node.targets:
                if isinstance(t, ast.Name):
                    if t.id == "__all__" and isinstance(node.value, (ast.List, ast.Tuple)):
                        self.all = [e.value for e in node.value.elts if isinstance(e, ast.Constant)]
                    elif (
                        isinstance(node.value, ast.Name)
                        and node.value.id.lstrip("_")[:1].isupper()
                        and t.id.lstrip("_")[:1].isupper()
                    ):
                        self.aliases.append((t.id, node.value.id, node.lineno))
                        self.defined.add(t.id)
                    else:
                        self.defined.add(t.id)
            if isinstance(node.value, ast.Call) and getattr(node.value.func, "id", "") == "lazy_exports":
                for arg in node.value.args:
                    if isinstance(arg, ast.Dict):
                        for k, v in zip(arg.keys, arg.values, strict=True):
                            if isinstance(k, ast.Constant) and isinstance(v, ast.Constant):
                                self.lazy[k.value] = v.value
                    if isinstance(arg, ast.Name):
                        self._lazy_var = arg.id
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            self.defined.add(node.target.id)
            if node.target.id.startswith("_LAZY") and isinstance(node.value, ast.Dict):
                for k, v in zip(node.value.keys, node.value.values, strict=True):
                    if isinstance(k, ast.Constant) and isinstance(v, ast.Constant):
                        self.lazy[k.value] = v.value
        elif isinstance(node, ast.ImportFrom):
            src = resolve_from(self.name, self.is_pkg, node)
            for a in node.names:
                self.imported[a.asname or a.name] = (src, a.name)
        elif isinstance(node, ast.If):
            for n in node.body + node.orelse:
                self._top(n, top)
        elif isinstance(node, ast.Try):
            for n in node.body + node.orelse + node.finalbody:
                self._top(n, top)
        if isinstance(node, ast.Assign):
            for t in node.targets:
                if isinstance(t, ast.Name) and t.id.startswith("_LAZY") and isinstance(node.value, ast.Dict):
                    for k, v in zip(node.value.keys, node.value.values, strict=True):
                        if isinstance(k, ast.Constant) and isinstance(v, ast.Constant):
                            self.lazy[k.value] = v.value

    def _walk_imports(self) -> None:  # noqa: C901 (a one-off migration script)
        tc_lines: set[int] = set()
        for node in ast.walk(self.tree):
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                for n in node.body:
                    for m in ast.walk(n):
                        if hasattr(m, "lineno"):
                            tc_lines.add(m.lineno)
        for node in ast.walk(self.tree):
            if isinstance(node, ast.ImportFrom):
                src = resolve_from(self.name, self.is_pkg, node)
                for a in node.names:
                    self.edges.append((src, a.name, node.lineno, node.lineno in tc_lines))
            elif isinstance(node, ast.Import):
                for a in node.names:
                    self.edges.append((a.name, "", node.lineno, node.lineno in tc_lines))


def load(root: Path, sub: str) -> dict[str, Module]:
    mods = {}
    for p in sorted((root / sub).rglob("*.py")):
        if "node_modules" in p.parts:
            continue
        name = module_name(p, root / ("src" if sub.startswith("src") else "."))
        mods[name] = Module(name, p, p.name == "__init__.py")
    return mods


def folder_of(mod: str) -> str:
    parts = mod.split(".")
    if len(parts) <= 2:
        return "(top)"
    return parts[1]


def main() -> None:  # noqa: C901 (a one-off migration script)
    repo = Path(sys.argv[1])
    src = load(repo, f"src/{PKG}")
    tests = {}
    for sub in ("tests", "examples", "benchmarks"):
        if (repo / sub).exists():
            for p in sorted((repo / sub).rglob("*.py")):
                if "node_modules" in p.parts:
                    continue
                name = module_name(p, repo)
                try:
                    tests[name] = Module(name, p, p.name == "__init__.py")
                except SyntaxError:
                    pass

    def real_home(mod: str, name: str, seen=None) -> tuple[str, str]:
        seen = seen or set()
        if (mod, name) in seen or mod not in src:
            return mod, name
        seen.add((mod, name))
        m = src[mod]
        if name in m.defined:
            return mod, name
        if name in m.imported:
            return real_home(*m.imported[name], seen)
        if name in m.lazy:
            return real_home(m.lazy[name], name, seen)
        if f"{mod}.{name}" in src:
            return f"{mod}.{name}", ""
        return mod, name

    # which names are imported from each module (by anyone)
    uses: dict[tuple[str, str], list[str]] = collections.defaultdict(list)
    for who, m in {**src, **tests}.items():
        for dep, name, _line, _tc in m.edges:
            if dep in src and name:
                uses[(dep, name)].append(who)

    reexports = []  # (module, name, home, users_src, users_tests)
    for name_mod, m in src.items():
        exported = set(m.all or [])
        for local, (dep, orig) in m.imported.items():
            if not dep.startswith(PKG):
                continue
            used_here = [u for u in uses.get((name_mod, local), [])]
            if local in exported or used_here:
                home = real_home(dep, orig)
                reexports.append(
                    {
                        "module": name_mod,
                        "init": m.is_pkg,
                        "name": local,
                        "home": f"{home[0]}.{home[1]}" if home[1] else home[0],
                        "in_all": local in exported,
                        "src_users": sorted(u for u in used_here if u in src),
                        "test_users": sorted(u for u in used_here if u not in src),
                    }
                )
        for lname, lmod in m.lazy.items():
            home = real_home(lmod, lname)
            used_here = uses.get((name_mod, lname), [])
            reexports.append(
                {
                    "module": name_mod,
                    "init": m.is_pkg,
                    "lazy": True,
                    "name": lname,
                    "home": f"{home[0]}.{home[1]}",
                    "in_all": lname in (m.all or []),
                    "src_users": sorted(u for u in used_here if u in src),
                    "test_users": sorted(u for u in used_here if u not in src),
                }
            )

    aliases = [
        {"module": n, "alias": a, "target": t, "line": ln, "file": str(m.path.relative_to(repo))}
        for n, m in src.items()
        for (a, t, ln) in m.aliases
    ]

    # folder graph
    fedges: dict[tuple[str, str], list[str]] = collections.defaultdict(list)
    for n, m in src.items():
        for dep, name, line, tc in m.edges:
            if not dep.startswith(PKG + ".") and dep != PKG:
                continue
            target = dep if dep in src else (f"{dep}.{name}" if f"{dep}.{name}" in src else dep)
            a, b = folder_of(n), folder_of(target)
            if a != b:
                short = f"{n.split('.', 1)[-1]}:{line}->{target.split('.', 1)[-1]}.{name}"
                fedges[(a, b)].append(short + (" [TC]" if tc else ""))

    out = {
        "modules": {n: {"lines": m.lines, "file": str(m.path.relative_to(repo))} for n, m in src.items()},
        "reexports": reexports,
        "aliases": aliases,
        "folder_edges": {f"{a} -> {b}": v for (a, b), v in sorted(fedges.items())},
    }
    if "--json" in sys.argv:
        Path(sys.argv[sys.argv.index("--json") + 1]).write_text(json.dumps(out, indent=1))
    ordinary = [r for r in reexports if not r["init"]]
    print("src lines:", sum(m.lines for m in src.values()), "modules:", len(src))
    print(
        "re-exports from ordinary modules:", len(ordinary), "modules:", len({r["module"] for r in ordinary})
    )
    print("re-exports from __init__:", len([r for r in reexports if r["init"]]))
    print("aliases:", len(aliases))
    print(
        "imports through ordinary-module shims: src",
        sum(len(r["src_users"]) for r in ordinary),
        "tests/examples/benchmarks",
        sum(len(r["test_users"]) for r in ordinary),
    )
    print_map_coverage(repo)
    print_layers(src)


def print_map_coverage(repo: Path) -> None:
    """Modules under the package that the layout map gives no target (before phase A only)."""
    base = repo / layout_map.PKG_DIR
    rels = sorted(
        p.relative_to(base).as_posix()
        for p in base.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
    )
    if "triggers/__init__.py" not in rels:
        return  # already moved: the map describes the old layout
    missing = [r for r in rels if layout_map.target_of(r) is None]
    print("files without a target in layout_map:", len(missing), missing)


def node_of(mod: str) -> str:
    """The graph node of a module: its top folder, or the module itself at the top level."""
    parts = mod.split(".")
    return parts[1] if len(parts) > 1 else "(package)"


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:  # noqa: C901 (a one-off migration script)
    """Strongly connected components with more than one node (Tarjan, iterative enough for ~200)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []
    sys.setrecursionlimit(10000)

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def print_layers(src: dict[str, Module]) -> None:
    """The import graph between top folders (and top-level modules) against layout_map.LAYERS.

    Prints the nodes, the edges, every edge that runs from a lower layer up to a higher one, the
    nodes no layer names, and the import circles: between nodes and between modules (runtime
    imports only; imports under TYPE_CHECKING are counted apart).
    """
    layer = {name: i for i, names in enumerate(layout_map.LAYERS) for name in names}
    mgraph: dict[str, set[str]] = collections.defaultdict(set)
    ngraph: dict[str, set[str]] = collections.defaultdict(set)
    up: set[tuple[str, str]] = set()
    tc_only = 0
    for n, m in src.items():
        for dep, name, _line, tc in m.edges:
            if not (dep == PKG or dep.startswith(PKG + ".")):
                continue
            target = f"{dep}.{name}" if f"{dep}.{name}" in src else dep
            if target not in src or target == n:
                continue
            if tc:
                tc_only += 1
                continue
            mgraph[n].add(target)
            a, b = node_of(n), node_of(target)
            if a != b:
                ngraph[a].add(b)
                if a in layer and b in layer and layer[b] > layer[a]:
                    up.add((a, b))
    nodes = {node_of(n) for n in src}
    print(
        "import graph: nodes",
        len(nodes),
        "edges",
        sum(len(v) for v in ngraph.values()),
        "edges up",
        len(up),
        "(runtime imports;",
        tc_only,
        "TYPE_CHECKING imports not counted)",
    )
    print("  nodes no layer names:", sorted(nodes - set(layer)))
    for a, b in sorted(up):
        print(f"  up: {a} (layer {layer[a]}) -> {b} (layer {layer[b]})")
    print("  circles between nodes:", cycles(ngraph))
    print("  circles between modules:", [[c.split(".", 1)[-1] for c in comp] for comp in cycles(mgraph)])


if __name__ == "__main__":
    main()
