"""Unused goldens: which golden sets the collected edge tests use, whether a session ran every
test, and the line that names the others (as syrupy reports unused snapshots). The plugin calls
this at the end of a session, ``pytest-edge golden prune`` after a collection."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Callable

import pytest

from ..errors import EdgeError

if TYPE_CHECKING:  # imported where used: GoldenUse is registered in every pytest session
    from ..core.plan import Plan
    from .sets import GoldenSets
    from .store import GoldenStore

# The edge_model parameter of a collected test (None for a test without one).
PlanOf = Callable[[pytest.Item], "Plan | None"]

ANY_SET = "*"  # a reference that keeps every set of a model (its input set could not be told)
ANY_MODEL = "*"  # with LLM_SET: every model's decoder goldens are kept (a decoder test's model could not be told)


class GoldenUse:
    """What the unused-golden report needs: whether this session ran every test, and which golden
    sets its tests use. Conservative: anything that may have left a test out (deselection, node
    ids, collection errors, -x) and the report says nothing."""

    def __init__(self) -> None:
        self.deselected = 0
        self.collect_errors = 0
        self.finished = 0  # items whose teardown was reported (also from xdist workers)
        self.worker_refs: list[set[tuple[str, str]]] = []  # from each xdist worker's collection
        self.workers_partial = False
        self.unused: list[tuple[str, str]] = []
        self.models_used: set[str] = set()
        self.error = ""  # why the unused goldens could not be told

    # Registered as a plugin of its own config: these hooks count what may leave a test out.
    def pytest_deselected(self, items: list[pytest.Item]) -> None:
        self.deselected += len(items)

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self.collect_errors += 1

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "teardown":
            self.finished += 1


USE_KEY = pytest.StashKey[GoldenUse]()


def golden_references(sets: GoldenSets, items: list[pytest.Item], plan_of: PlanOf) -> set[tuple[str, str]]:
    """(model, input set) of every collected edge test, with the stored set it reads where that
    is another (a legacy golden); ``(model, "*")`` where the set cannot be told (no backend
    selected, an ``inputs=`` that fails), so that model's sets all count as used."""
    from ..core.marker import parse_marker
    from .layout import LLM_SET
    from .sets import decoder_folder

    refs: set[tuple[str, str]] = set()
    for item in items:
        if item.get_closest_marker("edge_llm") is not None:
            # A decoder test reads its model's llm/ goldens (the reference's with reference=).
            callspec = getattr(item, "callspec", None)
            owner = getattr(callspec.params.get("edge_llm") if callspec else None, "golden_model", None)
            refs.add((decoder_folder(sets.store, owner, sets.keys), LLM_SET) if owner is not None
                     else (ANY_MODEL, LLM_SET))
            continue
        marker = item.get_closest_marker("edge")
        if marker is None:
            continue
        plan = plan_of(item)
        if plan is None:
            try:
                name = sets.model_name(parse_marker(marker.args, marker.kwargs), Path(item.path).parent)
            except EdgeError:
                continue  # a marker that does not parse is a collection error: no report then
            refs.add((name, ANY_SET))
            continue
        try:
            refs |= sets.used(plan)  # the reference= model's golden where the test names one
        except Exception:  # noqa: BLE001 - the test itself reports a bad inputs=; keep the model
            refs.add((sets.folder_of(plan.golden_model), ANY_SET))
    return refs


def unused_golden_sets(store: GoldenStore, refs: set[tuple[str, str]]) -> list[tuple[str, str]]:
    """Stored sets that no reference uses."""
    from .layout import LLM_SET, unused_sets

    whole = {model for model, key in refs if key == ANY_SET}
    every_decoder = (ANY_MODEL, LLM_SET) in refs
    return [s for s in unused_sets(store.all_sets(), refs)
            if s[0] not in whole and not (every_decoder and s[1] == LLM_SET)]


def selects_every_test(config: pytest.Config) -> bool:
    """Whether the command line asks for every test of the project: no arguments (the rootdir or
    ``testpaths``), or paths that hold the rootdir; never node ids, ``--ignore``, ``--deselect``
    or ``--pyargs``. Deselection (-k, -m, --lf) is counted separately."""
    for option in ("ignore", "ignore_glob", "deselect", "pyargs"):
        if config.getoption(option, None):
            return False
    if config.args_source == pytest.Config.ArgsSource.TESTPATHS:
        return True
    if any("::" in arg for arg in config.args):
        return False
    root = config.rootpath.resolve()
    paths = [Path(config.invocation_params.dir, arg).resolve() for arg in config.args]
    testpaths = sorted(Path(config.rootpath, t).resolve() for t in config.getini("testpaths"))
    if testpaths and sorted(set(paths)) == sorted(set(testpaths)):
        return True
    return any(path == root or path in root.parents for path in paths)


def unused_report(unused: list[tuple[str, str]], models_used: set[str]) -> str:
    """The line the terminal summary prints, as syrupy reports unused snapshots."""
    from .layout import set_label

    names = [set_label(model, key) + ("" if model in models_used else " (no test uses this model)")
             for model, key in unused]
    noun, pronoun = ("golden set", "it") if len(unused) == 1 else ("golden sets", "them")
    return (f"pytest-edge: {len(unused)} unused {noun}: {', '.join(names)}; "
            f"remove {pronoun} with pytest-edge golden prune")


def collection_complete(config: pytest.Config, use: GoldenUse) -> bool:
    return selects_every_test(config) and not use.deselected and not use.collect_errors


def find_unused(session: pytest.Session, sets: GoldenSets, plan_of: PlanOf) -> None:
    """Fill ``GoldenUse.unused`` when this session ran every test (see :class:`GoldenUse`)."""
    use = session.config.stash[USE_KEY]
    if not sets.store.all_sets() or not collection_complete(session.config, use):
        return
    if session.shouldfail or session.shouldstop or session.exitstatus not in (0, 1):
        return
    if not session.testscollected or use.finished != session.testscollected:
        return
    if session.config.pluginmanager.getplugin("dsession") is not None:  # xdist controller
        if use.workers_partial or not use.worker_refs:
            return
        refs = set().union(*use.worker_refs)
    else:
        refs = golden_references(sets, session.items, plan_of)
    if not refs:  # no edge test in this run: it says nothing about goldens
        return
    use.models_used = {model for model, _ in refs}
    use.unused = unused_golden_sets(sets.store, refs)
