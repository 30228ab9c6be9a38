"""The documentation site builds with warnings as errors (a broken link, a missing image or anchor
fails), and its navigation lists every page of docs/."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _nav_pages(entries: list) -> set[str]:
    pages = set()
    for entry in entries:
        for value in (entry.values() if isinstance(entry, dict) else [entry]):
            pages |= _nav_pages(value) if isinstance(value, list) else {value}
    return pages


def test_every_page_is_in_the_navigation() -> None:
    yaml = pytest.importorskip("yaml", reason="pyyaml (the test extra) reads mkdocs.yml")
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    pages = {path.name for path in (ROOT / "docs").glob("*.md")}
    listed = _nav_pages(config["nav"])
    assert pages - listed == set(), f"pages missing from mkdocs.yml's nav: {sorted(pages - listed)}"
    assert listed - pages == set(), f"nav entries without a page: {sorted(listed - pages)}"


@pytest.mark.skipif(importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("material") is None,
                    reason="mkdocs and mkdocs-material (the docs extra) are not installed")
def test_the_site_builds_with_warnings_as_errors(tmp_path: Path) -> None:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}  # a banner about Material's successor, not a warning
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "site/index.html").is_file() and (tmp_path / "site/export/index.html").is_file()
