"""``python -m pytest_edge.worker BACKEND FD [SOURCE]``: a local worker on a socket the parent passed;
``python -m pytest_edge.worker --stdio``: a device worker over stdin/stdout (a device's command);
``python -m pytest_edge.worker --zygote BACKEND FD [SOURCE]``: a zygote that forks local workers (.zygote);
``python -m pytest_edge.worker --spare FD``: a local worker started before its backend is known, which
its first request (Start) names (.spare).
SOURCE ("module:callable", backends.backend_source) is where the backend comes from: the worker
imports that module alone instead of reading the entry points (a device's install is its own: by name)."""

import gc
import os
import sys

# No cyclic collection while the worker imports (NumPy, its modules): what they make lives as long
# as the worker, so the ~40 collections the imports would trigger free nothing (3 to 11 ms of CPU);
# frozen after them, it is never traversed again (gc.freeze), nor during a timed window.
gc.disable()

# NumPy's OpenBLAS starts a thread per core as it loads, and each spins for 2**28 cycles (~0.1 s)
# before it sleeps: on a 2-core runner that is the other core, taken from this worker's own start
# and from the session beside it (0.06 s of CPU, as much wall). A worker's NumPy moves arrays; its one
# BLAS call, a speech worker's log-mel matmul per window (timed in features_ms), wakes sleeping
# threads instead (docs/architecture.md, "Start-up"). So it loads with the shortest spin, unless the
# user set one. The variable goes again at once: a runtime's own OpenBLAS, loaded later, reads the
# user's environment, and so do the processes the worker starts.
if "OPENBLAS_THREAD_TIMEOUT" not in os.environ:
    os.environ["OPENBLAS_THREAD_TIMEOUT"] = "4"
    import numpy  # noqa: F401

    del os.environ["OPENBLAS_THREAD_TIMEOUT"]

from .frames import Channel  # noqa: E402
from .process import die_with_parent, serve, serve_stdio  # noqa: E402

gc.freeze()
gc.enable()
if sys.argv[1:2] == ["--zygote"]:
    import socket

    from .zygote_process import serve_zygote

    serve_zygote(socket.socket(fileno=int(sys.argv[3])), sys.argv[2], (sys.argv[4:5] or [None])[0])
    sys.exit(0)
die_with_parent()
if sys.argv[1:] == ["--stdio"]:
    serve_stdio()
elif sys.argv[1:2] == ["--spare"]:
    connection = Channel(int(sys.argv[2]))
    serve(connection, connection, None)
else:
    connection = Channel(int(sys.argv[2]))
    serve(connection, connection, sys.argv[1], source=(sys.argv[3:4] or [None])[0])
# Served: end without the interpreter's teardown. Unloading torch's modules and libraries takes
# ~0.8 s of CPU in an ExecuTorch worker, which the host waits for when it closes a measuring
# process and which would share the machine with the next process's timed window.
sys.stdout.flush()
sys.stderr.flush()
os._exit(0)
