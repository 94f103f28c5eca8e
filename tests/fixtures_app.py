"""The app served in this process, for the test modules that talk to it over HTTP or drive it in Chromium.

One server per test module (module scope): what a module patches in the app (its engine calls, the models
folder, free memory) stays with that module, and each test opens its own session against it."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest


def free_port() -> int:
    """A TCP port nothing listens on now (the OS's choice), for a server this process starts."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server_url() -> Iterator[str]:
    """The app's address, without a trailing slash; the server closes when the module ends."""
    import app

    _, url, _ = app.demo.launch(server_port=free_port(), prevent_thread_lock=True, quiet=True, **app.launch_options())
    try:
        yield url.rstrip("/")
    finally:
        app.demo.close()
