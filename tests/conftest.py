"""Fixtures shared by the test modules (helpers that are plain functions live in the `*_support.py`
modules beside them, imported by name)."""

from __future__ import annotations

import signal
from typing import Iterator

import pytest


@pytest.fixture()
def default_signals() -> Iterator[None]:
    """SIGINT and SIGTERM at Python's defaults during the test, whatever this process inherited (a
    suite run as a background job starts with SIGINT ignored), and as they were after it."""
    previous = {signal.SIGINT: signal.signal(signal.SIGINT, signal.default_int_handler),
                signal.SIGTERM: signal.signal(signal.SIGTERM, signal.SIG_DFL)}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
