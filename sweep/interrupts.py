"""Ctrl-C (SIGINT) and SIGTERM stop a sweep the same way: by raising KeyboardInterrupt in the main
thread, except inside `interrupts_deferred()`, where they wait for the block to end.

Both act only in the main thread (the only one that runs Python's signal handlers) and leave alone
a signal that is ignored (`nohup`, a command started with `&` by a script): elsewhere they do
nothing.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from typing import Any, Iterator

# 128 + SIGINT, what a shell reports after Ctrl-C: the exit code of an interrupted command.
EXIT_INTERRUPTED = 130
_INTERRUPTS = (signal.SIGINT, signal.SIGTERM)


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Make SIGTERM (`kill`, a batch scheduler) stop the sweep as Ctrl-C does: by raising
    KeyboardInterrupt, so the `finally` blocks that stop Ray and flush the stores run."""
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGTERM) is signal.SIG_IGN:
        yield
        return

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _stderr_fd() -> int:
    """The file descriptor of `sys.stderr`: the terminal even while descriptor 2 goes to a sweep's
    Ray log (`sweep.cluster.stderr_to_log`); 2 if `sys.stderr` has none."""
    try:
        return sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):
        return 2


@contextlib.contextmanager
def interrupts_deferred(second_interrupts: bool = False, notice: str = "") -> Iterator[None]:
    """Hold SIGINT and SIGTERM back until the block ends, then raise KeyboardInterrupt if one came:
    Ctrl-C cannot cut a Parquet write, the bookkeeping of a finished run, or Ray's start or stop in
    half (an exception raised at a random point inside `ray.init` can be swallowed by Ray, or leave
    processes Ray no longer knows of). With `second_interrupts`, a second signal raises at once:
    for blocks that may take long (`ray.init`), where a user pressing Ctrl-C twice means it.
    `notice` is written to stderr on the first signal (what the wait is for).

    Signals are recorded by a handler rather than blocked (`pthread_sigmask`): a blocked mask would
    be inherited by the processes started inside the block (Ray's), which would then ignore them.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []

    def record(signum: int, frame: Any) -> None:
        received.append(signum)
        if len(received) == 1 and notice:
            os.write(_stderr_fd(), f"{notice}\n".encode())  # not print: a handler may run inside a print
        elif len(received) > 1 and second_interrupts:
            raise KeyboardInterrupt(f"signal {signum}, again")

    previous = {signum: signal.signal(signum, record) for signum in _INTERRUPTS
                if signal.getsignal(signum) is not signal.SIG_IGN}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if received:
        raise KeyboardInterrupt(f"signal {received[0]}")
