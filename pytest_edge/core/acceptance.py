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

import json
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

    def covers(self, model: str, sha256: str | None, figure: str) -> bool:
        return (model == self.model and sha256 is not None and sha256 in self.sha256
                and (not self.figures or figure in self.figures))


def read_acceptances(path: Path) -> list[Acceptance]:
    """The acceptances in ``path`` (none where it does not exist). A malformed file is an error
    naming it and the entry: a gate must not pass on a file it misread."""
    if not path.is_file():
        return []
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise EdgeUsageError(f"{path}: not valid TOML ({exc})") from None
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


def write_acceptance(path: Path, model: str, digests: Sequence[str], reason: str,
                     figures: Sequence[str] = ()) -> Acceptance:
    """Append one acceptance to ``path`` (created where missing), atomically; entries of the same
    model are replaced (one acceptance per model: the latest change is the one under review)."""
    existing = [a for a in read_acceptances(path) if a.model != model]
    accepted = Acceptance(model, tuple(digests), tuple(figures), reason.strip())
    atomic_write(path, render([*existing, accepted]).encode("utf-8"))
    return accepted


def render(acceptances: Sequence[Acceptance]) -> str:
    """The file's text (TOML; its strings written as JSON strings, which TOML reads alike)."""
    lines = ["# Changes accepted by the merge gate (pytest-edge accept; docs/gate.md, \"Accepting a change\").",
             "# Each holds for exactly the artifacts whose sha256 it lists."]
    for a in acceptances:
        lines += ["", "[[accept]]", f"model = {json.dumps(a.model)}",
                  "sha256 = [" + ", ".join(json.dumps(d) for d in a.sha256) + "]"]
        if a.figures:
            lines.append("figures = [" + ", ".join(json.dumps(f) for f in a.figures) + "]")
        lines.append(f"reason = {json.dumps(a.reason)}")
    return "\n".join(lines) + "\n"


def find(acceptances: Sequence[Acceptance], model: str, sha256: str | None, figure: str) -> Acceptance | None:
    return next((a for a in acceptances if a.covers(model, sha256, figure)), None)


def stale(acceptances: Sequence[Acceptance], model: str, sha256: str | None) -> Acceptance | None:
    """An acceptance of ``model`` that does not hold for this artifact (it changed since)."""
    return next((a for a in acceptances if a.model == model and sha256 not in a.sha256), None)


def describe(acceptance: Acceptance, path: Any) -> str:
    return f"accepted in {path}: {acceptance.reason}"
