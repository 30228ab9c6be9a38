"""``python -m pytest_edge.worker BACKEND FD [SOURCE]``: a local worker on a socket the parent passed;
``python -m pytest_edge.worker --stdio``: a device worker over stdin/stdout (a device's command);
``python -m pytest_edge.worker --zygote BACKEND FD [SOURCE]``: a zygote that forks local workers (.zygote);
``python -m pytest_edge.worker --spare FD``: a local worker started before its backend is known, which
its first request (Start) names (.spare).
SOURCE ("module:callable", backends.backend_source) is where the backend comes from: the worker
imports that module alone instead of reading the entry points (a device's install is its own: by name)."""

import os
import sys

from .frames import Channel
from .process import die_with_parent, serve, serve_stdio

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
