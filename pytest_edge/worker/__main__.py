"""``python -m pytest_edge.worker BACKEND FD``: a local worker on a socket the parent passed;
``python -m pytest_edge.worker --stdio``: a device worker over stdin/stdout (a device's command);
``python -m pytest_edge.worker --zygote BACKEND FD``: a zygote that forks local workers (.zygote)."""

import os
import sys
from multiprocessing.connection import Connection

from .server import die_with_parent, serve, serve_stdio

if sys.argv[1:2] == ["--zygote"]:
    import socket

    from .zygote_process import serve_zygote

    serve_zygote(socket.socket(fileno=int(sys.argv[3])), sys.argv[2])
    sys.exit(0)
die_with_parent()
if sys.argv[1:] == ["--stdio"]:
    serve_stdio()
else:
    connection = Connection(int(sys.argv[2]))
    serve(connection, connection, sys.argv[1])
# Served: end without the interpreter's teardown. Unloading torch's modules and libraries takes
# ~0.8 s of CPU in an ExecuTorch worker, which the host waits for when it closes a measuring
# process and which would share the machine with the next process's timed window.
sys.stdout.flush()
sys.stderr.flush()
os._exit(0)
