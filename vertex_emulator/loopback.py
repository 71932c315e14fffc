"""An HTTP stand-in's server: 127.0.0.1 only, a free port, requests answered in daemon threads.

Both HTTP stand-ins (``rest_service.RestStandIn``, ``registry_service.RegistryStandIn``) serve
through it: a subclass returns its request handler class from ``handler_class`` (the handler
reads the stand-in as ``self.state``) and gets ``start``/``stop``, use as a context manager and
``url``.
"""

from __future__ import annotations

import http.server
import threading
from typing import Self


class LoopbackService:
    """A server on 127.0.0.1; use as a context manager, or call ``start()`` and ``stop()``."""

    _server: http.server.ThreadingHTTPServer | None = None

    def handler_class(self) -> type[http.server.BaseHTTPRequestHandler]:
        """The class that answers a request (its ``state``: this stand-in)."""
        raise NotImplementedError

    def start(self) -> Self:
        """Starts serving on a free port of 127.0.0.1 (never another interface)."""
        handler = type("Handler", (self.handler_class(),), {"state": self})
        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True).start()
        return self

    def stop(self) -> None:
        """Stops serving and closes the socket."""
        if self._server:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT``."""
        assert self._server, "not started"
        return f"http://127.0.0.1:{self._server.server_address[1]}"
