"""What a native runtime prints on the process's stderr (file descriptor 2, below Python's
``sys.stderr``) while it loads a model: ncnn's ``layer pnnx.Expression not exists or registered``,
MNN's converter-version complaints. Captured around one call so the failure can quote it, instead
of leaving it in a worker's stderr that no user reads."""

from __future__ import annotations

import os
import sys
import tempfile
from contextlib import contextmanager
from typing import Iterator

# The most of it kept: a runtime that prints a line per layer must not fill a failure message.
MAX_CHARS = 2000


class Said:
    """The text a runtime printed (filled when the block ends)."""

    text: str = ""

    def lines(self, limit: int = 5) -> list[str]:
        return [line.strip() for line in self.text.splitlines() if line.strip()][:limit]


@contextmanager
def native_stderr() -> Iterator[Said]:
    """Redirect file descriptor 2 into a temporary file for the block; ``Said.text`` afterwards.
    Where fd 2 cannot be redirected (no such descriptor), the block runs as it is and says nothing."""
    said = Said()
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except OSError:
        yield said
        return
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield said
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            said.text = sink.read(MAX_CHARS).decode("utf-8", "replace")
