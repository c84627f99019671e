"""Where the app listens: the command line's ``--host`` / ``--port``, else Gradio's own
``GRADIO_SERVER_NAME`` / ``GRADIO_SERVER_PORT`` (what hosting platforms set), else 127.0.0.1:7860.

Imports nothing heavy, so that ``app.py`` refuses a bad port at once, before torch, the model
and Gradio load.
"""

from __future__ import annotations

import os

DEFAULT_HOST, DEFAULT_PORT = "127.0.0.1", 7860
PORTS = range(1, 65536)


def check_port(port: int) -> int:
    """``port`` when it is in 1..65535, else ValueError."""
    if port not in PORTS:
        raise ValueError(f"the port must be in 1..65535, got {port}")
    return port


def server_address(host: str | None = None, port: int | None = None, environ=None) -> tuple[str, int]:
    """(host, port): ``host`` / ``port`` when given, else the Gradio variables in ``environ``
    (default: ``os.environ``), else the defaults. ValueError for a port that is not a number in
    1..65535."""
    environ = os.environ if environ is None else environ
    host = host or environ.get("GRADIO_SERVER_NAME") or DEFAULT_HOST
    if port is None:
        text = environ.get("GRADIO_SERVER_PORT", "").strip()
        try:
            port = int(text) if text else DEFAULT_PORT
        except ValueError:
            raise ValueError(f"GRADIO_SERVER_PORT must be a port number, got {text!r}") from None
    return host, check_port(port)
