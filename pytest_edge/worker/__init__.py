"""Backend workers: the server that runs in each worker process (:mod:`.server`), the client that
starts and talks to it (:mod:`.client`), the pool of one session (:mod:`.pool`), and the typed
messages between them (:mod:`.protocol`). ``python -m pytest_edge.worker`` starts a worker."""

from .client import BackendWorker, remove_stale_logs
from .server import WorkerServer

__all__ = ["BackendWorker", "WorkerServer", "remove_stale_logs"]
