"""What the CLI writes to a terminal: control characters from Kafka data shown as text."""

from __future__ import annotations

import io

import pytest

from airflow_kafka_events.cli_terminal import EscapingStream, escape_controls, terminal_stream

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
    from airflow_kafka_events import cli

    def broken(args):
        raise RuntimeError("record said \x1b]0;owned\x07 with password=pw-in-traceback")

    parser = cli.build_parser()
    monkeypatch.setattr(cli, "build_parser", lambda: parser)
    parser.set_defaults(handler=broken)
    assert cli.main(["-v"]) == cli.EXIT_ERROR
    err = capsys.readouterr().err
    assert "RuntimeError" in err and "\x1b" not in err and "\x07" not in err
    assert "\\x1b]0;owned" in err and "pw-in-traceback" not in err
