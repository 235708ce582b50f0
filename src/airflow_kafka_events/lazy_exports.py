"""Names a package exports without importing their modules until first use.

The packages' ``__init__`` modules re-export names whose modules import Airflow (``emit``,
``notifier``, ``iteration.operator`` ...), while the package itself stays importable without
Airflow (external producers, the CLI).  :func:`lazy_exports` gives a package the module-level
``__getattr__`` / ``__dir__`` (PEP 562) that import a name's module on first access.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, MutableMapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(
    package: str, names: Mapping[str, str], namespace: MutableMapping[str, Any]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package``: ``names`` maps an exported name to its module."""

    def __getattr__(name: str) -> Any:
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value  # later accesses skip this function
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *names})

    return __getattr__, __dir__
