"""The error every strict output parser of the inventory raises (npu_smi, hccn, versions); no Django import here."""

from __future__ import annotations


class OutputParseError(ValueError):
    """Output that does not have the layout we know. `line` is 1-based, None when the text is empty."""

    def __init__(self, line: int | None, expected: str, got: str | None):
        self.line = line
        self.expected = expected
        self.got = got
        where = f"line {line}: " if line is not None else ""
        seen = "end of output" if got is None else repr(got)
        super().__init__(f"{where}expected {expected}, got {seen}")
