"""What the operators share: how a task names itself in errors and logs."""

from __future__ import annotations

from typing import Any

__all__ = ["task_label"]


def task_label(operator: Any) -> str:
    """``ClassName(task_id='...')``: the operator as errors and logs name it."""
    return f"{type(operator).__name__}(task_id={getattr(operator, 'task_id', '?')!r})"
