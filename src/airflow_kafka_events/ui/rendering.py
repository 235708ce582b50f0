"""How the view answers: server-rendered HTML (Jinja2) or JSON, with every secret masked last.

Whatever a page shows went through :mod:`airflow_kafka_events.ui.inspection.redact` where it was read
(payload previews, headers, extra, keys, error messages; that module's doc says what it masks and
what Airflow's masker does).  A JSON answer's structure also goes through Airflow's masker
(``redact``: its sensitive key names, ``[core] sensitive_var_conn_names`` included).  As a last
line, :func:`mask` runs on the whole answer: Airflow's secrets maskers (every connection password
and sensitive extra the process loaded) and the secret-named values of the view's own Kafka
connection (``sasl.password``, ``ssl.key.password`` ...) are replaced by ``***``, whatever field
they turned up in.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Iterable, Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import jinja2
import markupsafe
from fastapi import Request
from fastapi.responses import HTMLResponse, JSONResponse, Response

from airflow_kafka_events.ui.inspection.redact import MASK, is_secret_name
from airflow_kafka_events.ui.inspection.window import human_time

__all__ = [
    "TEMPLATES_DIR",
    "mask",
    "render_html",
    "render_json",
    "secrets_of",
]

TEMPLATES_DIR = Path(__file__).resolve().parent / "templates"
#: Secrets shorter than this are not masked (they would mask common words); Airflow's default.
MIN_SECRET_LENGTH = 5


def _ago(value: datetime | None) -> str:
    if value is None:
        return "-"
    seconds = (datetime.now(timezone.utc) - value).total_seconds()
    if seconds < 0:
        return "just now"
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f} {unit} ago"
    return f"{seconds:.0f} s ago"


def _minutes_back(value: datetime | None) -> int:
    """Whole minutes from ``value`` to now, plus a margin: a window that still holds ``value``."""
    if value is None:
        return 60
    return max(1, math.ceil((datetime.now(timezone.utc) - value).total_seconds() / 60) + 2)


def _when(value: datetime | str | None, style: str = "ago") -> markupsafe.Markup:
    """A time for people -- ``3 min ago``, or with ``style="utc"`` ``2026-12-02 03:04:05 UTC`` --
    in a ``<time>`` element whose ``title`` (shown on hover) is the exact value; ``-`` for none.

    The one way a template shows a time (``{{ value | when }}``); ISO text is read as a time.
    """
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            return markupsafe.Markup("{0}").format(value)
    if value is None:
        return markupsafe.Markup("-")
    if style not in ("ago", "utc"):
        raise ValueError(f"the when filter's style is 'ago' or 'utc', got {style!r}")
    exact = value.astimezone(timezone.utc).isoformat()
    shown = _ago(value) if style == "ago" else human_time(value)
    return markupsafe.Markup('<time datetime="{0}" title="{0}">{1}</time>').format(exact, shown)


def _query(request: Request, **changes: Any) -> str:
    """The current query string with ``changes`` (``None`` removes a parameter)."""
    params = dict(request.query_params)
    for key, value in changes.items():
        if value is None:
            params.pop(key, None)
        else:
            params[key] = str(value)
    return "?" + urlencode(params) if params else ""


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES_DIR)),
        autoescape=jinja2.select_autoescape(["html"]),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["when"] = _when
    env.filters["minutes_back"] = _minutes_back
    return env


@functools.cache
def environment() -> jinja2.Environment:
    """The view's template environment (built on first use)."""
    return _environment()


def secrets_of(config: Mapping[str, Any] | None, extra: Iterable[str | None] = ()) -> list[str]:
    """The values of ``config``'s secret-named keys, plus ``extra``, long enough to mask."""
    values = [str(v) for k, v in (config or {}).items() if is_secret_name(str(k))]
    values.extend(v for v in extra if v)
    return sorted({v for v in values if len(v) >= MIN_SECRET_LENGTH}, key=len, reverse=True)


def _airflow_masked(text: str) -> str:
    from airflow._shared.secrets_masker import redact as core_redact

    text = str(core_redact(text))
    try:
        from airflow.sdk._shared.secrets_masker import redact as sdk_redact
    except ImportError:  # pragma: no cover - the task SDK is part of Airflow 3
        return text
    return str(sdk_redact(text))


def _written_forms(secret: str) -> list[str]:
    """How ``secret`` can appear in an answer: as is, HTML-escaped (Jinja's autoescape), JSON-escaped
    (``json.dumps``: quotes, backslashes, non-ASCII as ``\\uXXXX``), or JSON-escaped inside HTML."""
    in_json = json.dumps(secret)[1:-1]
    forms = {secret, str(markupsafe.escape(secret)), in_json, str(markupsafe.escape(in_json))}
    return sorted(forms, key=len, reverse=True)


def mask(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with Airflow's masked values and ``secrets`` (in any written form) replaced by ``***``."""
    for secret in secrets:
        for form in _written_forms(secret):
            if form in text:
                text = text.replace(form, MASK)
    return _airflow_masked(text)


def render_html(
    request: Request,
    template: str,
    context: Mapping[str, Any],
    *,
    secrets: Iterable[str] = (),
    status: int = 200,
) -> Response:
    html = (
        environment()
        .get_template(template)
        .render(request=request, query=lambda **c: _query(request, **c), **context)
    )
    return HTMLResponse(mask(html, secrets), status_code=status)


#: Characters a JSON answer writes as ``\\uXXXX`` (the same JSON): no markup from a record survives in
#: it, whatever reads it as HTML (a browser sniffing, a proxy's error page, a log viewer).
_JSON_MARKUP = str.maketrans({"<": "\\u003c", ">": "\\u003e", "&": "\\u0026"})


def render_json(payload: Any, *, secrets: Iterable[str] = (), status: int = 200) -> Response:
    from airflow._shared.secrets_masker import redact as core_redact

    text = mask(json.dumps(core_redact(payload), default=str, sort_keys=True), secrets)
    return Response(text.translate(_JSON_MARKUP), status_code=status, media_type=JSONResponse.media_type)
