"""Accepted changes: a reviewable way to let the merge gate pass a regression made on purpose (a
wider model for accuracy) for named models, without loosening ``--edge-max-regression`` for all.

An acceptance is committed with the change, in ``edge-accept.toml`` at the rootdir (ini
``edge_accept_file``), and written by ``pytest-edge accept MODEL --reason "..."``::

    [[accept]]
    model = "kws"
    sha256 = ["3f2a...", "9b1c..."]   # the artifacts accepted: exactly these files
    figures = ["P50 latency", "peak memory"]   # optional; every figure when absent
    reason = "1.6x wider for +2 points of accuracy (PR #123)"

It holds for exactly the artifacts whose sha256 it names: once the change is merged, the base
branch's artifacts are these (A/B) or main's next report has their figures (stored), so the next
pull request is gated against the accepted figures, and a later change to the model (another
sha256) is gated again, whatever the file still says. The gate's findings keep the figure with
the verdict ``accepted`` and the reason; the reports count them apart from regressions.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from ..errors import EdgeUsageError
from ..files import atomic_write

try:
    import tomllib
except ImportError:  # Python 3.10: the same parser, as a package
    import tomli as tomllib  # type: ignore[no-redef]

ACCEPT_FILE = "edge-accept.toml"


@dataclass(frozen=True)
class Acceptance:
    """One accepted change: the model, the artifacts (sha256) it holds for, the figures (empty:
    every figure the gate judges) and why."""

    model: str
    sha256: tuple[str, ...]
    figures: tuple[str, ...]
    reason: str

    def holds_for(self, sha256: str | Sequence[str] | None) -> bool:
        """Whether every file of the artifact (its sha256, or each of its files': record.artifact_identity)
        is one this acceptance lists: a changed weights file beside an unchanged model file is not."""
        digests = _digests(sha256)
        return bool(digests) and all(d in self.sha256 for d in digests)

    def covers(self, model: str, sha256: str | Sequence[str] | None, figure: str) -> bool:
        return (model == self.model and self.holds_for(sha256)
                and (not self.figures or figure in self.figures))


def _digests(sha256: str | Sequence[str] | None) -> tuple[str, ...]:
    return () if sha256 is None else (sha256,) if isinstance(sha256, str) else tuple(sha256)


def read_acceptances(path: Path) -> list[Acceptance]:
    """The acceptances in ``path`` (none where it does not exist). A malformed file is an error
    naming it and the entry: a gate must not pass on a file it misread."""
    if not path.is_file():
        return []
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise EdgeUsageError(f"{path}: not valid TOML ({exc})") from None
    return parse_acceptances(text, path)


def parse_acceptances(text: str, path: Path) -> list[Acceptance]:
    """The acceptances in ``text``, the content of ``path`` (named in every error): what
    :func:`read_acceptances` reads, and what :func:`write_acceptance` checks its own text by."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise EdgeUsageError(f"{path}: not valid TOML ({exc})") from None
    except RecursionError:  # tomllib recurses per nesting level: 100 000 '[' would be an INTERNALERROR
        raise EdgeUsageError(f"{path}: not valid TOML (nested deeper than the parser's recursion limit)") from None
    others = sorted(set(data) - {"accept"})
    if others:
        # An acceptance file holds acceptances only: anything else is another file (pyproject.toml),
        # which `accept` must not overwrite and the gate must not read as accepting nothing.
        raise EdgeUsageError(f"{path}: holds {', '.join(repr(k) for k in others[:5])}, not only [[accept]] tables: "
                             f"not an acceptance file (edge_accept_file names a file of its own, e.g. {ACCEPT_FILE})")
    entries = data.get("accept", [])
    if not isinstance(entries, list):
        raise EdgeUsageError(f"{path}: 'accept' must be an array of tables ([[accept]])")
    found = []
    for number, entry in enumerate(entries, 1):
        where = f"{path}: [[accept]] #{number}"
        if not isinstance(entry, dict):
            raise EdgeUsageError(f"{where}: expected a table")
        unknown = sorted(set(entry) - {"model", "sha256", "figures", "reason"})
        if unknown:
            raise EdgeUsageError(f"{where}: unknown keys {unknown} (model, sha256, figures, reason)")
        model, digests, figures, reason = (entry.get("model"), entry.get("sha256"), entry.get("figures", []),
                                           entry.get("reason"))
        if not isinstance(model, str) or not model:
            raise EdgeUsageError(f"{where}: 'model' must name a model")
        if not isinstance(reason, str) or not reason.strip():
            raise EdgeUsageError(f"{where} ({model}): 'reason' is required: an accepted regression says why")
        if (not isinstance(digests, list) or not digests
                or not all(isinstance(d, str) and len(d) == 64 and all(c in "0123456789abcdef" for c in d)
                           for d in digests)):
            raise EdgeUsageError(f"{where} ({model}): 'sha256' must list the accepted artifacts' sha256 "
                                 "(64 lowercase hex digits each; pytest-edge accept writes them)")
        if not isinstance(figures, list) or not all(isinstance(f, str) for f in figures):
            raise EdgeUsageError(f"{where} ({model}): 'figures' must be a list of figure names")
        found.append(Acceptance(model, tuple(digests), tuple(figures), reason.strip()))
    return found


# Files an acceptance file must never be: the project's configuration, whatever edge_accept_file says.
CONFIG_FILES = ("pyproject.toml", "pytest.ini", ".pytest.ini", "tox.ini", "setup.cfg", "conftest.py")


def accept_file_problem(path: Path, rootdir: Path) -> str | None:
    """Why ``pytest-edge accept`` may not write ``path``, or None: outside the project (after links
    are followed), a configuration file of the project, or something other than a regular file."""
    path = Path(path)
    try:
        resolved = path.resolve()
        resolved.relative_to(Path(rootdir).resolve())
    except ValueError:
        return f"lies outside the project ({rootdir}); an acceptance is committed with the project"
    except (OSError, RuntimeError) as exc:  # a link loop
        return f"cannot be resolved ({exc})"
    if resolved.name in CONFIG_FILES or path.name in CONFIG_FILES:
        return "is a configuration file of the project, not an acceptance file of its own"
    if resolved.exists() and not resolved.is_file():
        return "is not a regular file"
    return None


def write_acceptance(path: Path, model: str, digests: Sequence[str], reason: str,
                     figures: Sequence[str] = (), rootdir: Path | None = None) -> Acceptance:
    """Append one acceptance to ``path`` (created where missing), atomically; entries of the same
    model are replaced (one acceptance per model: the latest change is the one under review).
    Refused (EdgeUsageError naming the file) where ``path`` is not an acceptance file of its own
    inside ``rootdir`` (:func:`accept_file_problem`; the existing file must read as one), or where
    the text written would not read back as these acceptances: the old file stays as it was."""
    path = Path(path)
    if rootdir is not None:
        problem = accept_file_problem(path, rootdir)
        if problem:
            raise EdgeUsageError(f"{path} (edge_accept_file) {problem}: refused, nothing written")
    if not reason.strip():
        raise EdgeUsageError(f"{path}: an acceptance needs a reason (--reason): an accepted regression says why")
    existing = [a for a in read_acceptances(path) if a.model != model]
    accepted = Acceptance(model, tuple(digests), tuple(figures), reason.strip())
    text = render([*existing, accepted])
    if parse_acceptances(text, path) != [*existing, accepted]:
        raise EdgeUsageError(f"{path}: the acceptance of {model} would not read back as written: refused, the file "
                             "is unchanged")
    atomic_write(path, text.encode("utf-8"))
    return accepted


def toml_string(text: str) -> str:
    """``text`` as a TOML basic string, ASCII only: control and non-ASCII characters escaped
    (``\\uXXXX``, ``\\UXXXXXXXX``); a lone surrogate (an undecodable byte of a command line)
    has no TOML form and is refused naming the text."""
    out = []
    for char in text:
        code = ord(char)
        if 0xD800 <= code <= 0xDFFF:
            raise EdgeUsageError(f"{text!r}: holds an undecodable character ({char!r}); give it as UTF-8 text")
        if char in ('"', "\\"):
            out.append("\\" + char)
        elif 0x20 <= code < 0x7F:
            out.append(char)
        elif code <= 0xFFFF:
            out.append(f"\\u{code:04X}")
        else:
            out.append(f"\\U{code:08X}")
    return '"' + "".join(out) + '"'


def render(acceptances: Sequence[Acceptance]) -> str:
    """The file's text (TOML; its strings as :func:`toml_string` writes them)."""
    lines = ["# Changes accepted by the merge gate (pytest-edge accept; docs/gate.md, \"Accepting a change\").",
             "# Each holds for exactly the artifacts whose sha256 it lists."]
    for a in acceptances:
        lines += ["", "[[accept]]", f"model = {toml_string(a.model)}",
                  "sha256 = [" + ", ".join(toml_string(d) for d in a.sha256) + "]"]
        if a.figures:
            lines.append("figures = [" + ", ".join(toml_string(f) for f in a.figures) + "]")
        lines.append(f"reason = {toml_string(a.reason)}")
    return "\n".join(lines) + "\n"


def find(acceptances: Sequence[Acceptance], model: str, sha256: str | Sequence[str] | None,
         figure: str) -> Acceptance | None:
    return next((a for a in acceptances if a.covers(model, sha256, figure)), None)


def stale(acceptances: Sequence[Acceptance], model: str, sha256: str | Sequence[str] | None) -> Acceptance | None:
    """An acceptance of ``model`` that does not hold for this artifact (one of its files changed since)."""
    return next((a for a in acceptances if a.model == model and not a.holds_for(sha256)), None)


def changed_files(acceptance: Acceptance, sha256: str | Sequence[str] | None) -> tuple[str, ...]:
    """The artifact's sha256 that ``acceptance`` does not list (what changed since it was written)."""
    return tuple(d for d in _digests(sha256) if d not in acceptance.sha256)


def describe(acceptance: Acceptance, path: Any) -> str:
    return f"accepted in {path}: {acceptance.reason}"
