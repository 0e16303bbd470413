"""`ThreadedServer`: an ASGI app under uvicorn in a daemon thread on a loopback port, for test doubles and benchmarks
that serve an app beside their own client."""

from __future__ import annotations

import threading
import time
from typing import Any

import uvicorn

from infra.processes import free_port


class ThreadedServer:
    """Runs an ASGI `app` with uvicorn in a daemon thread on a free port (or `port`); `url` is
    `http://127.0.0.1:<port>`. Entering waits for uvicorn to start (its lifespan included), at most 60 s.

    Raises:
        RuntimeError: on entering, the server did not start (the thread died, or 60 s passed).
    """

    def __init__(self, app: Any, port: int | None = None) -> None:
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> ThreadedServer:
        self.thread.start()
        deadline = time.monotonic() + 60
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError(f"uvicorn server on port {self.port} did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)
