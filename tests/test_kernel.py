"""The two kernels of the hot path (engine/kernel.py): the mypyc-compiled modules that an install
builds, and the same sources interpreted. Speed must never change a result, so the pure-Python
kernel must reproduce the golden rows that the rest of the suite checks on the compiled one."""

from __future__ import annotations

import importlib
import importlib.machinery
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from golden_cases import CASES

import engine
from engine.kernel import KERNEL_MODULES, PURE_PYTHON_ENV, extension_path
from engine.simulation import Simulation

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent


def _python(code: str, env: dict[str, str], cwd: Path = TESTS) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300)


@pytest.mark.skipif(os.environ.get(PURE_PYTHON_ENV) == "1", reason="pure-Python kernel chosen")
def test_the_installed_kernel_is_compiled():
    assert engine.KERNEL == "compiled", "pip install -e . did not compile the kernel (see setup.py)"
    for module in KERNEL_MODULES:
        loader = importlib.import_module(module).__loader__
        assert isinstance(loader, importlib.machinery.ExtensionFileLoader), module


def test_the_pure_python_kernel_gives_the_golden_rows():
    code = (
        "import json, engine\n"
        "from golden_cases import CASES, golden_path, stable_rows\n"
        "assert engine.KERNEL == 'python', engine.KERNEL\n"
        "import engine.links, engine.transport.tcp\n"
        "assert engine.links.__file__.endswith('.py') and engine.transport.tcp.__file__.endswith('.py')\n"
        "for case in sorted(CASES):\n"
        "    expected = json.loads(golden_path(case).read_text())\n"
        "    actual = json.loads(json.dumps(stable_rows(case), sort_keys=True))\n"
        "    assert actual == expected, case\n"
        "print('identical', len(CASES))\n"
    )
    done = _python(code, {**os.environ, PURE_PYTHON_ENV: "1"})
    assert done.returncode == 0, done.stderr
    assert f"identical {len(CASES)}" in done.stdout


@pytest.mark.skipif(extension_path("engine.links") is None, reason="no compiled kernel installed")
def test_an_edited_source_is_not_shadowed_by_its_stale_compiled_copy(tmp_path):
    """Edit a kernel module after the build: the edit must run (interpreted), with a warning. The
    check compares contents, not file times (a wheel install writes sources after extensions)."""
    shutil.copytree(REPO / "engine", tmp_path / "engine", ignore=shutil.ignore_patterns("__pycache__"))
    env = {key: value for key, value in os.environ.items() if key != PURE_PYTHON_ENV}
    env["PYTHONPATH"] = str(tmp_path)
    show = "import engine, engine.links as n\nprint(engine.KERNEL, n.__spec__.origin)"

    untouched = _python(show, env, cwd=tmp_path)
    assert untouched.returncode == 0 and untouched.stderr == "", untouched.stderr
    assert untouched.stdout.split()[0] == "compiled"
    for path in (tmp_path / "engine").rglob("*.py"):  # a new copy's times say nothing of its contents
        os.utime(path, (time.time() + 60, time.time() + 60))
    assert _python(show, env, cwd=tmp_path).stdout.split()[0] == "compiled"

    edited = tmp_path / "engine" / "links.py"
    edited.write_text(edited.read_text() + "\n# an edit\n")
    done = _python(show, env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["python", str(edited)]
    assert "engine.links changed since the compiled kernel was built" in done.stderr


def test_a_signal_handler_interrupts_a_long_run_promptly():
    """The compiled kernel runs no bytecode, so Python would defer a signal handler (Ctrl-C, a
    sweep's wall-time budget) to the end of the run; the event loop runs in slices so it fires in
    time: inside the run, with events still pending (the run would take minutes: 4 GB into one
    10 Gb/s port), not after them all."""
    class Budget(Exception):
        pass

    pending_at_signal = []

    def out_of_time(signum, frame):
        while frame is not None and not isinstance(frame.f_locals.get("self"), Simulation):
            frame = frame.f_back  # up to the simulation the signal interrupted, if any
        pending_at_signal.append(-1 if frame is None else frame.f_locals["self"].eventlist.pending())
        raise Budget

    previous = signal.signal(signal.SIGALRM, out_of_time)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.3)
        with pytest.raises(Budget):  # 8 x 500 MB into one 10 Gb/s port: minutes of work
            engine.run({"network": {"topology": "switch", "npus": 9, "link_gbps": 10},
                        "workload": {"type": "flows", "pattern": "incast", "senders": 8,
                                     "bytes_per_flow": 500_000_000}})
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert len(pending_at_signal) == 1 and pending_at_signal[0] > 0, pending_at_signal
