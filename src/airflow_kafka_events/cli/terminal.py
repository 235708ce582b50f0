"""What the operator CLI writes to a terminal: text, never control sequences from Kafka data.

Records carry whatever their producers wrote: an ``ESC ]0;...BEL`` would set the terminal's title,
``ESC [2K ESC [1G`` erase the line a confirmation was printed on and write another, ``ESC c`` or
``ESC [2J`` clear the screen.  :func:`escape_controls` shows every C0 and C1 control character
(except newline and tab, the CLI's own layout), DEL, the Unicode bidirectional marks and overrides,
the line and paragraph separators and lone surrogates as text (``\\x1b``, ``\\x9b``, ``\\u202e``,
``\\udc9b``: a stream with ``surrogateescape``, Python's under the C locale, would write that one
as the raw byte 0x9b, an 8-bit terminal's CSI); :func:`escaped_output` makes everything the CLI prints
to stdout and stderr go through it, so no command (``dlq ls|show|replay``, ``streams``,
``replay-assets``, an error message quoting a record) can send one.  The progress bar draws on the
terminal itself (:func:`terminal_stream`): its text is the CLI's own.

Imports no Airflow module.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TextIO

__all__ = ["EscapingStream", "escape_controls", "escaped_output", "terminal_stream"]

_CONTROLS = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]"
)


def _escaped(match: re.Match[str]) -> str:
    code = ord(match.group(0))
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def escape_controls(text: str) -> str:
    """``text`` with its control characters written out as escapes (newlines and tabs kept)."""
    return _CONTROLS.sub(_escaped, text)


class EscapingStream:
    """A text stream that writes :func:`escape_controls` of what it is given to ``raw``."""

    def __init__(self, raw: TextIO) -> None:
        self.raw = raw

    def write(self, text: str) -> int:
        self.raw.write(escape_controls(text))
        return len(text)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        self.raw.flush()

    def isatty(self) -> bool:
        return self.raw.isatty()

    def __getattr__(self, name: str) -> Any:  # encoding, fileno, ... of the stream underneath
        return getattr(self.raw, name)


def terminal_stream(stream: Any) -> Any:
    """The stream underneath ``stream`` (for drawing the CLI's own progress bar)."""
    return stream.raw if isinstance(stream, EscapingStream) else stream


@contextmanager
def escaped_output() -> Iterator[None]:
    """Within: ``sys.stdout`` and ``sys.stderr`` escape control characters (restored after)."""
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = EscapingStream(saved[0]), EscapingStream(saved[1])  # type: ignore[assignment]
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved
