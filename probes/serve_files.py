"""orch's file server for one build (the wheel feed, BuildKit's context server): `http.server`, for as long as
orch holds its standard input open.

Run as `python -c <this source> PORT --bind ADDRESS --directory FOLDER` in a container orch creates with an open
stdin that it attaches to and closes only once (StdinOnce). When orch ends, however it ends (`kill -9`, an OOM
kill, a CI timeout, a lost connection to a remote engine), the engine closes that stdin: this process reads its
end of file and exits, so the container stops within a second instead of serving files with nobody to serve.
Standard library only: it runs in the base image's own Python.
"""

import os
import runpy
import sys
import threading


def _lifeline():
    try:
        while sys.stdin.buffer.read(4096):
            pass  # orch writes nothing; anything it might write is ignored
    except (OSError, ValueError):
        pass
    os._exit(0)


threading.Thread(target=_lifeline, daemon=True).start()
sys.argv = ["http.server", *sys.argv[1:]]
runpy.run_module("http.server", run_name="__main__", alter_sys=True)
