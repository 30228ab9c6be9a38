"""Backend workers: the server that runs in each worker process (:mod:`.server`), the client that
starts and talks to it (:mod:`.client`), the pool of one session (:mod:`.pool`), and the typed
messages between them (:mod:`.protocol`). ``python -m pytest_edge.worker`` starts a worker."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .client import BackendWorker, remove_stale_logs
    from .server import WorkerServer

__all__ = ["BackendWorker", "WorkerServer", "remove_stale_logs"]


def __getattr__(name: str) -> Any:
    # Each on first use: a worker process (``python -m pytest_edge.worker``, this package first)
    # needs the server only, the pytest process the client only.
    if name in ("BackendWorker", "remove_stale_logs"):
        from . import client

        return getattr(client, name)
    if name == "WorkerServer":
        from .server import WorkerServer

        return WorkerServer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
