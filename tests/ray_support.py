"""Helpers for the tests that run a Ray cluster of their own on loopback (tests/test_sweep_ray.py,
tests/test_faults_ray.py): its environment, free ports, its processes, and a sweep run as a user
runs it."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

RAY_ENV = {
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",  # every Ray service binds to 127.0.0.1 only
    "RAY_AUTH_MODE": "disabled",  # a throwaway loopback cluster: no token to read or write
    "RAY_USAGE_STATS_ENABLED": "0",
}


_HANDED_OUT: set[int] = set()  # every port free_port gave in this process


def free_port() -> int:
    """A TCP port of 127.0.0.1 that nothing listens on (now), never one it gave before in this process: the
    system may hand the same free port to two probes in a row, and a Ray node given one port for two of its
    components refuses to start."""
    while True:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port: int = probe.getsockname()[1]
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port


def session_pids(session_id: int) -> list[int]:
    """Processes of a session (Linux /proc)."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.getsid(int(entry)) == session_id:
                    pids.append(int(entry))
            except OSError:  # gone meanwhile
                pass
    return pids


def stop_session(head: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the cluster's processes, SIGKILL to any left after a few seconds."""
    for pid in session_pids(head.pid):
        try:
            os.kill(pid, signal.SIGTERM)
        except OSError:
            pass
    deadline = time.monotonic() + 5
    while session_pids(head.pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    for pid in session_pids(head.pid):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    head.wait(timeout=30)


def sweep_command(cwd: Path, *overrides: str, timeout: float = 180,
           env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`python -m sweep -m overrides...` in `cwd`, in this process's environment or `env`."""
    env = {key: value for key, value in (os.environ if env is None else env).items() if key != "HYDRA_FULL_ERROR"}
    return subprocess.run([sys.executable, "-m", "sweep", "-m", *overrides], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)
