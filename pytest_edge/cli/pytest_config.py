"""The pytest configuration ``pytest-edge init`` adds ``edge_model_dirs`` to: the file pytest reads
for the project (ini, setup.cfg, pyproject.toml or pytest.toml), the line written in that file's
syntax, and the text read back as pytest will read it before it replaces the user's file."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Sequence

try:
    import tomllib
except ModuleNotFoundError:  # Python < 3.11
    import tomli as tomllib  # type: ignore[no-redef]

from ..errors import EdgeUsageError



def _ini_line(dirs: Sequence[str]) -> str:
    """pytest splits a ``paths`` ini value as a shell would: each folder quoted where it must be
    (``'My Models'``). A line break cannot be written into an ini value at all (the next line would
    be read as a setting of its own): refused."""
    unwritable = [d for d in dirs if "\n" in d or "\r" in d]
    if unwritable:
        raise EdgeUsageError(f"cannot write the folder {unwritable[0]!r} into an ini file: its name holds a line "
                             "break; rename it, or set edge_model_dirs in pyproject.toml by hand")
    return "edge_model_dirs = " + " ".join(shlex.quote(d) for d in dirs)


def _toml_line(dirs: Sequence[str]) -> str:
    # A JSON string is a TOML basic string: quotes, backslashes and control characters escaped.
    return "edge_model_dirs = [" + ", ".join(json.dumps(d, ensure_ascii=False) for d in dirs) + "]"


def read_back(path: Path, text: str) -> list[str] | None:
    """The ``edge_model_dirs`` pytest will read from ``text`` as ``path``, or None if it does not
    parse: what init writes is checked this way before it replaces the user's file."""
    try:
        if path.suffix == ".toml":
            data = tomllib.loads(text)
            table = data.get("tool", {}).get("pytest", {}) if path.name == "pyproject.toml" else data.get("pytest", {})
            value = table.get("ini_options", {}).get("edge_model_dirs", table.get("edge_model_dirs"))
            return list(value) if isinstance(value, list) else None
        import iniconfig

        parsed = iniconfig.IniConfig(str(path), data=text)
        name = "tool:pytest" if path.name == "setup.cfg" else "pytest"
        value = parsed[name].get("edge_model_dirs") if name in parsed else None
        return shlex.split(value) if isinstance(value, str) else None
    except Exception:  # noqa: BLE001 - any parse failure: the text is not written
        return None


def _insert_after(text: str, header: str, line: str) -> str | None:
    """``text`` with ``line`` right after the table/section ``header`` line; None without one."""
    match = re.search(rf"^[ \t]*{re.escape(header)}[ \t]*(#.*)?$", text, re.M)
    if match is None:
        return None
    return text[:match.end()] + "\n" + line + text[match.end():]


def configured_text(inipath: Path | None, root: Path, dirs: Sequence[str]) -> tuple[Path, str]:
    """The configuration file to write and its new text: the one pytest reads (``inipath``), or a
    new ``[tool.pytest.ini_options]`` in pyproject.toml, or a new pytest.ini."""
    if inipath is None:
        pyproject = root / "pyproject.toml"
        if pyproject.is_file():
            text = pyproject.read_text(encoding="utf-8")
            return pyproject, text + ("" if text.endswith("\n") or not text else "\n") + \
                f"\n[tool.pytest.ini_options]\n{_toml_line(dirs)}\n"
        return root / "pytest.ini", f"[pytest]\n{_ini_line(dirs)}\n"
    text = inipath.read_text(encoding="utf-8")
    name = inipath.name
    if name == "pyproject.toml":
        headers, line = ("[tool.pytest.ini_options]", "[tool.pytest]"), _toml_line(dirs)
    elif name in ("pytest.toml", ".pytest.toml"):
        headers, line = ("[pytest]",), _toml_line(dirs)
    else:
        headers, line = ("[tool:pytest]" if name == "setup.cfg" else "[pytest]",), _ini_line(dirs)
    for header in headers:
        new = _insert_after(text, header, line)
        if new is not None:
            return inipath, new
    # pytest reads pytest.ini even without its section.
    return inipath, text + ("" if text.endswith("\n") or not text else "\n") + f"{headers[0]}\n{line}\n"


def pytest_config(root: Path) -> tuple[Path | None, bool]:
    """The configuration file pytest reads for ``root`` and whether it sets edge_model_dirs."""
    import pytest

    found: list[tuple[Path | None, bool]] = []  # (the ini file, whether it sets edge_model_dirs), once read

    class _Capture:
        @pytest.hookimpl(tryfirst=True)
        def pytest_cmdline_main(self, config: pytest.Config) -> int:
            found.append((Path(config.inipath) if config.inipath else None, "edge_model_dirs" in config.inicfg))
            return 0

    code = pytest.main(["-p", "no:cacheprovider", "--rootdir", str(root), str(root)], plugins=[_Capture()])
    if not found:
        raise EdgeUsageError(f"cannot read the pytest configuration of {root} (pytest exit status {int(code)})")
    return found[0]
