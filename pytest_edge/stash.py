"""Where the plugin keeps its session on pytest's config (both kinds of check, ``edge`` and
``edge_llm``, share it), apart from the hooks so that what they call needs no import of them.

The session is made on first need (:func:`edge_session`: the first edge test collected, a report
to merge), not when pytest starts: a run without edge tests imports no NumPy, starts no worker and
reads no golden folder."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

import pytest

from .core.settings import Settings

if TYPE_CHECKING:
    from .run.session import EdgeSession
    from .worker.spare import SpareWorker

SESSION_KEY = pytest.StashKey["EdgeSession"]()
SETTINGS_KEY = pytest.StashKey[Settings]()  # read at configure, so a bad option is a usage error at once
PROGRESS_KEY = pytest.StashKey[Callable[[str], None]]()  # where the session's workers say what they do
SPARE_KEY = pytest.StashKey["SpareWorker | None"]()  # a worker interpreter started for the session's pool (start_spare)


def edge_session(config: pytest.Config) -> "EdgeSession":
    """The session of this pytest run, made now if no test needed it yet."""
    edge = config.stash.get(SESSION_KEY, None)
    if edge is None:
        from .run.session import EdgeSession

        edge = config.stash[SESSION_KEY] = EdgeSession(config.stash[SETTINGS_KEY])
        if PROGRESS_KEY in config.stash:
            edge.pool.progress = config.stash[PROGRESS_KEY]
        edge.pool.spare = config.stash.get(SPARE_KEY, None)
        config.stash[SPARE_KEY] = None  # the pool's now
    return edge


def start_spare(config: pytest.Config) -> None:
    """Start a worker interpreter (worker/spare.py) before the session is imported, once per run:
    when the session starts in a project that names its model folders, else when the first edge test
    is planned. It imports NumPy and the worker's modules on another core while pytest collects and
    imports the session, and the first local worker adopts it. Not where nothing will run
    (--collect-only), nor without isolation (the worker is this process)."""
    if SPARE_KEY in config.stash or SESSION_KEY in config.stash or config.option.collectonly:
        return
    settings = config.stash.get(SETTINGS_KEY, None)
    config.stash[SPARE_KEY] = None
    if settings is None or not settings.isolated:
        return
    from .worker.spare import SpareWorker

    try:
        config.stash[SPARE_KEY] = SpareWorker()
    except OSError:  # no process to spare (a limit on processes): the worker starts as it always did
        pass


def close_spare(config: pytest.Config) -> None:
    """Kill a spare no session took (no edge test was collected, or collection ended early)."""
    spare = config.stash.get(SPARE_KEY, None)
    if spare is not None:
        spare.close()
        config.stash[SPARE_KEY] = None
