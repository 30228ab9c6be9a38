"""The project as pytest sees it, read through pytest itself: its settings (rootdir, ini file, every
``edge_*`` key) and which golden sets its collected edge tests use."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Sequence

from ..errors import EdgeUsageError
from ..core.settings import Settings

if TYPE_CHECKING:
    from ..golden.use import GoldenUse


def project_settings(pytest_args: Sequence[str] = ()) -> Settings:
    """The project's settings exactly as ``pytest`` would read them here: rootdir, the ini file
    (pytest.ini, pyproject.toml, tox.ini, setup.cfg) and every ``edge_*`` key. pytest parses its
    configuration and this hook stops it before any test is collected."""
    import pytest

    from ..plugin import settings_from_config

    captured: dict[str, Settings] = {}

    class _Capture:
        @pytest.hookimpl(tryfirst=True)
        def pytest_cmdline_main(self, config: pytest.Config) -> int:
            captured["settings"] = settings_from_config(config)
            return 0

    code = pytest.main(["-p", "no:cacheprovider", *pytest_args], plugins=[_Capture()])
    if "settings" not in captured:
        raise EdgeUsageError(f"cannot read the pytest configuration here (pytest exit status {int(code)})")
    return captured["settings"]


@dataclass
class _Collected:
    """What the collection hook of :func:`golden_usage` saw; None: the hook never ran."""

    settings: Settings | None = None
    refs: set[tuple[str, str]] = field(default_factory=set)  # (model, input set) of each edge test
    use: "GoldenUse | None" = None


def golden_usage(pytest_args: Sequence[str] = ()) -> tuple[Settings, set[tuple[str, str]]]:
    """Collect the project's tests as ``pytest [pytest_args]`` would (nothing runs, no runtime
    starts) and return the settings and the (model, input set) references of its edge tests.
    EdgeUsageError when the collection cannot speak for every test: collection errors, node ids,
    deselection (-k, -m), or no edge test at all."""
    import contextlib
    import io

    import pytest

    from ..golden.use import USE_KEY, golden_references
    from ..plugin import item_plan
    from ..stash import edge_session

    if any("::" in arg for arg in pytest_args):
        raise EdgeUsageError("prune needs every test collected; node ids (file::test) select some only")
    found = _Collected()

    class _Usage:
        @pytest.hookimpl(trylast=True)
        def pytest_collection_finish(self, session: pytest.Session) -> None:
            edge = edge_session(session.config)
            found.settings = edge.settings
            found.refs = golden_references(edge.golden, session.items, item_plan)
            found.use = session.config.stash[USE_KEY]

    output = io.StringIO()
    with contextlib.redirect_stdout(output):
        code = pytest.main(["-p", "no:cacheprovider", "--collect-only", "-q", *pytest_args], plugins=[_Usage()])
    use, settings = found.use, found.settings
    tail = "\n".join(output.getvalue().splitlines()[-15:])
    if use is None or settings is None or use.collect_errors or int(code) not in (0, 5):
        raise EdgeUsageError(f"collecting the tests failed (pytest exit status {int(code)}); nothing is "
                             f"pruned while a test may be missing:\n{tail}")
    if use.deselected:
        raise EdgeUsageError(f"{use.deselected} tests were deselected (-k, -m, --deselect): prune needs "
                             "every test collected")
    refs = found.refs
    if not refs:
        raise EdgeUsageError("no test with @pytest.mark.edge was collected here (nor edge_llm): pass the paths of "
                             "the edge tests (pytest-edge golden prune [--dry-run] PATH...)")
    return settings, refs
