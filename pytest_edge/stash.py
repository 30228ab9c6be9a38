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

SESSION_KEY = pytest.StashKey["EdgeSession"]()
SETTINGS_KEY = pytest.StashKey[Settings]()  # read at configure, so a bad option is a usage error at once
PROGRESS_KEY = pytest.StashKey[Callable[[str], None]]()  # where the session's workers say what they do


def edge_session(config: pytest.Config) -> "EdgeSession":
    """The session of this pytest run, made now if no test needed it yet."""
    edge = config.stash.get(SESSION_KEY, None)
    if edge is None:
        from .run.session import EdgeSession

        edge = config.stash[SESSION_KEY] = EdgeSession(config.stash[SETTINGS_KEY])
        if PROGRESS_KEY in config.stash:
            edge.pool.progress = config.stash[PROGRESS_KEY]
    return edge
