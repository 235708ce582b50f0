"""What the CLI writes to a terminal: control characters from Kafka data shown as text."""

from __future__ import annotations

import io

import pytest

from airflow_kafka_events.cli.terminal import EscapingStream, escape_controls, terminal_stream

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("\x1b]0;owned\x07", "\\x1b]0;owned\\x07"),
        ("\x1b[2K\x1b[1Gsafe", "\\x1b[2K\\x1b[1Gsafe"),
        ("\x1b[2J\x1bc", "\\x1b[2J\\x1bc"),
        ("a\rb\x00\x7f", "a\\x0db\\x00\\x7f"),
        ("\x9b2J", "\\x9b2J"),
        ("abc\u202edef", "abc\\u202edef"),
        ("\u2067rtl\u2069 \u061c \u200f", "\\u2067rtl\\u2069 \\u061c \\u200f"),
        ("one\u2028two\u2029", "one\\u2028two\\u2029"),
        ("lone \udc9b2J \udc1b[2J \ud800", "lone \\udc9b2J \\udc1b[2J \\ud800"),
        ("line one\n\tline two", "line one\n\tline two"),
        ("naïve ✓", "naïve ✓"),
    ],
)
def test_control_characters_are_written_out(raw, shown):
    assert escape_controls(raw) == shown


def test_an_escaping_stream_sends_no_escape_byte():
    raw = io.StringIO()
    stream = EscapingStream(raw)
    stream.write("topic \x1b[2Jorders\n")
    stream.writelines(["\x1bc", "ok\n"])
    assert raw.getvalue() == "topic \\x1b[2Jorders\n\\x1bcok\n"
    assert terminal_stream(stream) is raw and terminal_stream(raw) is raw


def test_an_unexpected_error_s_traceback_is_escaped_and_redacted(monkeypatch, capsys):
    # an exception of no kind the CLI expects, quoting a record's data: printed inside the escaping
    # streams (Python's own traceback printing came after they were restored) and redacted
    from airflow_kafka_events.cli import main as cli

    def broken(args):
        raise RuntimeError("record said \x1b]0;owned\x07 with password=pw-in-traceback")

    parser = cli.build_parser()
    monkeypatch.setattr(cli, "build_parser", lambda: parser)
    parser.set_defaults(handler=broken)
    assert cli.main(["-v"]) == cli.EXIT_ERROR
    err = capsys.readouterr().err
    assert "RuntimeError" in err and "\x1b" not in err and "\x07" not in err
    assert "\\x1b]0;owned" in err and "pw-in-traceback" not in err


def test_a_lone_surrogate_never_reaches_a_c_locale_stream_as_a_raw_byte():
    """Python's stdout under the C locale encodes with ``surrogateescape``: U+DC9B would be written as
    the byte 0x9b (an 8-bit terminal's CSI), U+DC1B would raise mid-output."""
    raw = io.BytesIO()
    wrapper = io.TextIOWrapper(raw, encoding="utf-8", errors="surrogateescape")
    EscapingStream(wrapper).write("a\udc9b2J b\udc1b[2J\n")
    wrapper.flush()
    assert raw.getvalue() == b"a\\udc9b2J b\\udc1b[2J\n"


@pytest.mark.parametrize(
    "argv",
    [
        ["dlq", "show", "0", "\x1b]0;owned\x07"],
        ["streams", "ls", "--since", "\x1b]0;owned\x07"],
        ["dlq", "show", "\x1b[2J", "1"],
        ["no-such-command\x9b2J"],
    ],
)
def test_usage_errors_quoting_the_command_line_are_escaped(argv, capsys):
    """argparse and the commands' own checks quote what they were given (pasted from a page, maybe)."""
    from airflow_kafka_events.cli import main as cli

    try:
        code = cli.main(argv)
    except SystemExit as exc:  # argparse's usage errors
        code = exc.code
    assert code != 0
    out = capsys.readouterr()
    text = out.out + out.err
    assert "\x1b" not in text and "\x9b" not in text and "\x07" not in text, text
    assert "\\x1b" in text or "\\x9b" in text, text
