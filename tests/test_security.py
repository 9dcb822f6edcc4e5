"""Security: config and workload text is data, never code; results stay inside the results directory;
a local Ray listens on loopback only.

Interpolations: the command line and conf/ go through OmegaConf, so `${...}` in a value is resolved
by one of the resolvers registered in the process, and only those (an unknown resolver is an
error): OmegaConf's `oc.env` (an environment variable, as a string), `oc.decode` (a string parsed
as a YAML-like primitive), `oc.create`, `oc.select`, `oc.dict.keys`, `oc.dict.values`,
`oc.deprecated`, and Hydra's `hydra`, `now` and `python_version`. None of them evaluates Python;
what they produce goes through the same validation as a typed value (a `name` from `${oc.env:HOME}`
is refused: it holds a `/`). ASTRA-sim workload files are read as whitespace-separated fields by the
engine, never through OmegaConf or `eval`.
"""

from __future__ import annotations

import ipaddress
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from omegaconf.basecontainer import BaseContainer
from sweep_support import compose_config

import engine
from sweep.cli import EXIT_BAD_CONFIG, EXIT_OK
from sweep.plan import validate
from sweep.store import load_table

ALLOWED_RESOLVERS = {"oc.create", "oc.decode", "oc.deprecated", "oc.dict.keys", "oc.dict.values", "oc.env",
                     "oc.select"}


def _sweep(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sweep", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=120)


def test_resolvers_reachable_from_a_config_are_known_and_evaluate_no_code() -> None:
    compose_config(["+x=${oc.env:HOME}"])  # compose as the command line does, then look
    registered = set(BaseContainer._resolvers)
    # Hydra's own: `hydra` (its config node), `now` (a time stamp), `python_version` (a string)
    assert registered <= ALLOWED_RESOLVERS | {"hydra", "now", "python_version"}, registered - ALLOWED_RESOLVERS
    assert not {name for name in registered if "eval" in name or "exec" in name}


def test_code_in_overrides_is_data(tmp_path: Path) -> None:
    """Override values that look like code reach the validation as strings and are refused there;
    an unknown resolver (`${eval:...}`) is refused; nothing runs and no file is touched."""
    marker = tmp_path / "marker"
    marker.write_text("still here")
    code = f"__import__('os').remove('{marker}')"
    for args, expect in (
        ([f'tcp.cc="{code}"'], "tcp.cc="),
        ([f'+workload.extra="{code}"'], "workload.extra="),
        (["+x='${eval:1+1}'"], "x='${eval:1+1}'"),
        (["name='${oc.env:HOME}'"], "without path separators"),
    ):
        result = _sweep(*args, f"results_dir={tmp_path / 'results'}", cwd=tmp_path)
        assert result.returncode == EXIT_BAD_CONFIG, (args, result.stderr)
        assert expect in result.stderr and "Traceback" not in result.stderr, result.stderr
    assert marker.read_text() == "still here"
    assert not (tmp_path / "results").exists()


def test_code_and_interpolations_in_a_workload_file_are_data(tmp_path: Path) -> None:
    """A layer named like Python code or an interpolation runs as a layer of that literal name."""
    marker = tmp_path / "marker"
    marker.write_text("still here")
    names = [f"__import__('os').remove('{marker}')", "${oc.env:HOME}"]
    layers = "".join(f"{name} -1 5 NONE 0 5 NONE 0 5 ALLREDUCE 1024 5\n" for name in names)
    workload = tmp_path / "evil.txt"
    workload.write_text(f"MICRO\n{len(names)}\n{layers}")
    result = _sweep("workload=astra_micro_allreduce", f"workload.path={workload}", "network.npus=4",
                    "engine.backend=analytical", f"results_dir={tmp_path}", "name=evil", cwd=tmp_path)
    assert result.returncode == EXIT_OK, result.stderr
    assert marker.read_text() == "still here"
    assert set(load_table(tmp_path / "evil", "layers")["layer"]) == set(names)


@pytest.mark.parametrize("name", ["..", ".", "../escape", "a/../..", "/tmp/x", "a\\b", "", "sub/dir"])
def test_a_name_cannot_leave_the_results_directory(name: str, tmp_path: Path) -> None:
    config = compose_config([f"results_dir={tmp_path}"])
    config["name"] = name
    with pytest.raises(engine.ConfigError, match="without path separators"):
        validate(config)


LISTENERS = textwrap.dedent("""
    import json, os, re, subprocess
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf
    from sweep.cli import CONF_DIR
    from sweep.cluster import RayExecutor
    from sweep.plan import PlannedRun
    from sweep.runner import run_id

    with initialize_config_dir(config_dir=CONF_DIR, version_base=None):
        config = OmegaConf.to_container(compose(config_name="config", overrides=[
            "workload=collective", "workload.bytes=1024", "network.npus=4", "engine.backend=analytical"]),
            resolve=True)
    run = PlannedRun((), config, run_id(config))

    def descendants(root):
        children = {}
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    ppid = int(open(f"/proc/{entry}/stat").read().rsplit(")", 1)[1].split()[1])
                except OSError:
                    continue
                children.setdefault(ppid, []).append(int(entry))
        found, todo = set(), [root]
        while todo:
            pid = todo.pop()
            found.add(pid)
            todo.extend(children.get(pid, []))
        return found

    with RayExecutor(num_cpus=1) as executor:
        done = [item for item in executor.results([run]) if item is not None]
        ours = descendants(os.getpid())
        lines = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, check=True).stdout.splitlines()
        sockets = []
        for line in lines:
            for name, pid in re.findall(r'\\("([^"]+)",pid=(\\d+)', line):
                if int(pid) in ours:
                    sockets.append({"local": line.split()[3], "process": name, "pid": int(pid)})
    print(json.dumps({"done": len(done), "sockets": sockets}))
""")


def _loopback(host: str) -> bool:
    """127.0.0.0/8, ::1 or an IPv4-mapped loopback (`::ffff:127.0.0.1`); not `*`, 0.0.0.0 or `::`."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:  # `*`: every interface
        return False
    mapped = getattr(address, "ipv4_mapped", None)
    return address.is_loopback or bool(mapped and mapped.is_loopback)


@pytest.mark.slow
def test_local_ray_listens_on_loopback_only(tmp_path: Path) -> None:
    """Every TCP socket listening in the processes of a local sweep's Ray session is on 127.0.0.1
    (or ::1), and there is no dashboard."""
    result = subprocess.run([sys.executable, "-c", LISTENERS], capture_output=True, text=True, cwd=tmp_path,
                            timeout=180)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["done"] == 1
    sockets = report["sockets"]
    assert len(sockets) >= 2, sockets  # at least the GCS and the raylet
    exposed = [s for s in sockets if not _loopback(s["local"].rsplit(":", 1)[0].strip("[]"))]
    assert not exposed, exposed
    print(sorted((s["process"], s["local"]) for s in sockets))
    assert not [s for s in sockets if s["local"].endswith(":8265")]  # Ray's dashboard port
