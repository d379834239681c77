"""One line per recovered failure: what the turn records and logs say of an exception."""

from __future__ import annotations

from agent.errors import ERROR_LINE_CHARS, error_line


def test_an_exception_is_one_clipped_line_with_its_type() -> None:
    assert error_line(RuntimeError("onnx said:\n  bad input\tshape")) == (
        "RuntimeError: onnx said: bad input shape"
    )
    long = error_line(ValueError("x" * 1000))
    assert long.startswith("ValueError: xxx") and len(long) == ERROR_LINE_CHARS


def test_an_exception_without_a_message_is_its_type_alone() -> None:
    assert error_line(TimeoutError()) == "TimeoutError"
    assert error_line(KeyError("")) == "KeyError: ''"
