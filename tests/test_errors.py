"""One line per recovered failure: what the turn records and logs say of an exception."""

from __future__ import annotations

from agent.errors import ERROR_LINE_CHARS, error_line


def test_an_exception_is_its_type_and_first_line_clipped() -> None:
    assert error_line(RuntimeError("  out of\tmemory\n  at line 3 of kernel.cc")) == (
        "RuntimeError: out of memory"
    )
    long = error_line(ValueError("x" * 1000))
    assert long.startswith("ValueError: xxx") and len(long) == ERROR_LINE_CHARS


def test_an_exception_without_a_message_is_its_type_alone() -> None:
    assert error_line(TimeoutError()) == "TimeoutError"
    assert error_line(KeyError("")) == "KeyError: ''"
