"""Phase B: merge one module into another and point every import at the merged module.

Usage:  python scripts/relayout/merge.py REPO FILE INTO [FILE INTO ...]
        (paths relative to src/airflow_kafka_events/, e.g. kafka/bounded_reads.py kafka/assigned_reader.py)

For each pair: FILE's imports join INTO's (an import of INTO's own names is dropped), FILE's body
(without its docstring, ``from __future__`` and ``__all__``) is appended to INTO under a comment
line naming the concept, ``__all__`` lists are joined, a second ``log = logging.getLogger(...)``
is dropped; top-level names defined in both are reported and the pair is skipped. Then every
``FILE`` module name in the repo becomes ``INTO`` (imports, strings, docs), FILE is ``git rm``-ed,
and ``ruff check --fix --select F401,I001`` + ``ruff format`` tidy the imports. INTO's docstring
is left to the person merging: say in one sentence what the merged module holds.
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

PKG = "airflow_kafka_events"
SRC = f"src/{PKG}/"


def dotted(rel: str) -> str:
    rel = rel[:-3] if rel.endswith(".py") else rel
    parts = [PKG, *rel.split("/")]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def top_names(tree: ast.Module) -> set[str]:
    out: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, ast.Assign):
            out.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            out.add(node.target.id)
    return out - {"__all__", "log", "logger"}


def all_list(tree: ast.Module) -> list[str]:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            return [e.value for e in node.value.elts if isinstance(e, ast.Constant)]  # type: ignore[attr-defined]
    return []


def merge(repo: Path, file_rel: str, into_rel: str) -> bool:  # noqa: C901 (a one-off migration script)
    f_path, t_path = repo / SRC / file_rel, repo / SRC / into_rel
    f_text, t_text = f_path.read_text(), t_path.read_text()
    f_tree, t_tree = ast.parse(f_text), ast.parse(t_text)
    clash = top_names(f_tree) & top_names(t_tree)
    if clash:
        print(f"SKIP {file_rel} -> {into_rel}: both define {sorted(clash)}")
        return False
    f_mod, t_mod = dotted(file_rel), dotted(into_rel)
    f_lines = f_text.splitlines(keepends=True)
    imports, body = [], []
    for node in f_tree.body:
        seg = "".join(f_lines[node.lineno - 1 - len(getattr(node, "decorator_list", [])) : node.end_lineno])
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and node is f_tree.body[0]:
            continue  # docstring
        if isinstance(node, ast.ImportFrom) and node.module == "__future__":
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            if isinstance(node, ast.ImportFrom) and node.module == t_mod:
                continue
            imports.append(seg)
            continue
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id in ("__all__", "log") for t in node.targets
        ):
            continue
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            imports.append(seg)
            continue
        # keep the `#:` comments right above the statement
        start = node.lineno - 1 - len(getattr(node, "decorator_list", []))
        while start > 0 and f_lines[start - 1].lstrip().startswith("#"):
            start -= 1
        body.append("".join(f_lines[start : node.end_lineno]))
    # INTO: its own imports of FILE's names go (they are its own now)
    t_lines = t_text.splitlines(keepends=True)
    for node in sorted(t_tree.body, key=lambda n: -n.lineno):
        if isinstance(node, ast.ImportFrom) and node.module == f_mod:
            del t_lines[node.lineno - 1 : node.end_lineno]
    t_text = "".join(t_lines)
    t_tree = ast.parse(t_text)
    # INTO: imports after its last top-level import, body at the end, __all__ joined
    t_lines = t_text.splitlines(keepends=True)
    last_import = max(
        (
            n.end_lineno
            for n in t_tree.body
            if isinstance(n, (ast.Import, ast.ImportFrom))
            or (isinstance(n, ast.If) and "TYPE_CHECKING" in ast.unparse(n.test))
        ),
        default=1,
    )
    merged_all = sorted(set(all_list(t_tree)) | set(all_list(f_tree)))
    new_t = "".join(t_lines[:last_import]) + "".join(imports) + "".join(t_lines[last_import:])
    new_t = (
        new_t.rstrip("\n")
        + "\n\n\n# "
        + "-" * 70
        + f" from {file_rel}\n"
        + "\n\n".join(b.rstrip("\n") for b in body)
        + "\n"
    )
    if merged_all:
        new_t = re.sub(
            r"^__all__ = \[.*?^\]\n",
            "__all__ = [\n" + "".join(f'    "{n}",\n' for n in merged_all) + "]\n",
            new_t,
            count=1,
            flags=re.S | re.M,
        )
    t_path.write_text(new_t)
    subprocess.run(["git", "-C", str(repo), "rm", "-q", "-f", str(f_path.relative_to(repo))], check=True)
    # every mention of FILE's module becomes INTO's
    pat = re.compile(rf"(?<![\w.]){re.escape(f_mod)}(?!\w)")
    parent, _, base = f_mod.rpartition(".")
    t_parent, _, t_base = t_mod.rpartition(".")
    mod_import = re.compile(rf"^(\s*)from {re.escape(parent)} import {re.escape(base)}\b(?! as)", re.M)
    for sub in ("src", "tests", "examples", "benchmarks", "docs", "scripts"):
        for p in (repo / sub).rglob("*"):
            if (
                not p.is_file()
                or "node_modules" in p.parts
                or "relayout" in p.parts
                or p.suffix not in (".py", ".md", ".toml", ".txt", ".yml")
            ):
                continue
            text = p.read_text()
            new = mod_import.sub(rf"\1from {t_parent} import {t_base} as {base}", text)
            new = pat.sub(t_mod, new)
            new = new.replace(f"{PKG}/{file_rel}", f"{PKG}/{into_rel}")
            if new != text:
                p.write_text(new)
    print(f"merged {file_rel} -> {into_rel}")
    return True


def main() -> None:
    repo = Path(sys.argv[1]).resolve()
    pairs = sys.argv[2:]
    for file_rel, into_rel in zip(pairs[::2], pairs[1::2], strict=True):
        merge(repo, file_rel, into_rel)
    own = repo / ".venv/bin/ruff"
    ruff = str(own) if own.exists() else os.environ.get("RUFF") or shutil.which("ruff") or "ruff"
    dirs = [d for d in ("src", "tests", "examples", "benchmarks") if (repo / d).exists()]
    subprocess.run([ruff, "check", "--fix", "-q", "--select", "F401,F811,I001,RUF022", *dirs], cwd=repo)
    subprocess.run([ruff, "format", "-q", *dirs], cwd=repo)


if __name__ == "__main__":
    main()
