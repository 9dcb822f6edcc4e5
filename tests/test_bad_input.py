"""Mistakes a new user makes, through the real command line (`python -m sweep`, `python -m sweep -m`).

Every mistake must end with one clear message on stderr that names the key and the value (and what
is allowed), a non-zero exit code, no Python traceback, and nothing written: the files of an
existing dataset (and everything else under the test's directory) are hashed before and after.

Every mistake gives one line `error: <key>=<value> is not valid: <allowed>` and exit 2, those Hydra
finds while composing (an unknown preset, a value override of a key that does not exist, an
override it cannot parse) included: the line lists the presets or keys there are, and the closest
one to a typo.

A command line costs about a second of interpreter start-up and imports (Hydra, the engine) before
it reaches its mistake. So the module fixture runs the mistakes in two command servers: each is
`python` that has imported the command's modules once and runs each command line in a child forked
from it (`python -m sweep` itself: `runpy`, its arguments, working directory and environment, its
own standard output and error, its exit status). `test_forked_commands_are_the_command_line` runs a
few of the mistakes as separate `python -m sweep` processes and finds the same exit code and output.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import hashlib
import io
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import pytest
from sweep_support import compose_config

from sweep.cli import EXIT_BAD_CONFIG, EXIT_OK, run_one

GOOD_LAYER = "conv1 -1 5 NONE 0 5 NONE 0 5 ALLREDUCE 1048576 5\n"
ASTRA = "workload=astra_micro_allreduce workload.path={root}/"


@dataclass(frozen=True)
class Mistake:
    """One wrong command line: its arguments (`{root}` is the test directory, `{not_ray}` the address of
    a server that is not Ray), the exit code and
    the pieces the message must contain."""

    id: str
    args: str
    code: int
    expect: tuple[str, ...]
    multirun: bool = False
    needs: str | None = None  # a fixture-side condition (see `_prepare`)
    extra: dict = field(default_factory=dict)


MISTAKES = [
    # unknown config group option or key
    Mistake("unknown-preset", "network=nope", EXIT_BAD_CONFIG,
            ("network='nope'", "a preset in conf/network/", "leaf_spine, rail_optimized, ring, switch")),
    Mistake("unknown-workload-preset", "workload=astra", EXIT_BAD_CONFIG,
            ("workload='astra'", "(did you mean astra_dlrm?)", "astra_micro_allreduce")),
    Mistake("unknown-key-added", "+network.nope=1", EXIT_BAD_CONFIG,
            ("network.nope=1", "an existing key", "link_gbps")),
    # network and workload take any key at composition (a grid may set another topology's); the engine
    # refuses one no topology has
    Mistake("unknown-key", "network.nope=1", EXIT_BAD_CONFIG,
            ("network.nope=1", "an existing key", "network.link_gbps, network.link_latency_us")),
    Mistake("key-typo", "tcp.min_rto=5", EXIT_BAD_CONFIG, ("tcp.min_rto=5", "(did you mean tcp.min_rto_ms?)")),
    Mistake("group-typo", "netwrk.npus=4", EXIT_BAD_CONFIG, ("netwrk.npus='4'", "(did you mean network?)")),
    Mistake("unparsable-override", "seed=range(", EXIT_BAD_CONFIG, ("override='seed=range('", "override syntax")),
    # typo in an option value
    Mistake("preset-typo", "tcp=newrenoo", EXIT_BAD_CONFIG,
            ("tcp='newrenoo'", "(did you mean newreno?)", "cubic, dctcp, linux, newreno")),
    Mistake("value-typo", "tcp.cc=renoo", EXIT_BAD_CONFIG, ("tcp.cc='renoo'", "newreno, dctcp, cubic")),
    Mistake("backend-typo", "engine.backend=fast", EXIT_BAD_CONFIG, ("engine.backend='fast'", "packet, analytical")),
    # wrong type
    Mistake("number-not-a-number", "network.link_gbps=fast", EXIT_BAD_CONFIG,
            ("network.link_gbps='fast'", "number")),
    Mistake("bool-not-a-bool", "tcp.sack=maybe", EXIT_BAD_CONFIG, ("tcp.sack='maybe'", "true or false")),
    Mistake("int-not-an-int", "seed=abc", EXIT_BAD_CONFIG, ("seed='abc'", "an integer")),
    Mistake("nan-bandwidth", "network.link_gbps=nan", EXIT_BAD_CONFIG, ("network.link_gbps=nan", "finite")),
    # out of range
    Mistake("negative-bandwidth", "network.link_gbps=-5", EXIT_BAD_CONFIG, ("network.link_gbps=-5.0", "> 0")),
    Mistake("zero-bandwidth", "network.link_gbps=0", EXIT_BAD_CONFIG, ("network.link_gbps=0.0", "> 0")),
    # a rate in its base unit (bit/s, FLOP/s) where the key's unit is asked: absurd by a factor of a billion
    Mistake("bandwidth-in-bits", "network.link_gbps=100e9", EXIT_BAD_CONFIG,
            ("network.link_gbps=100000000000.0", "a rate in Gb/s, at most 1,000,000", "bit/s",
             "network.link_gbps=100)")),
    Mistake("uplink-in-bits", "network=leaf_spine network.uplink_gbps=4e11", EXIT_BAD_CONFIG,
            ("network.uplink_gbps=400000000000.0", "bit/s", "network.uplink_gbps=400)")),
    Mistake("tflops-in-flops", "workload=dlrm workload.npu_tflops=989e12", EXIT_BAD_CONFIG,
            ("workload.npu_tflops=989000000000000.0", "TFLOP/s", "FLOP/s", "workload.npu_tflops=989)")),
    Mistake("mss-above-mtu", "tcp.mss_bytes=9000", EXIT_BAD_CONFIG, ("tcp.mss_bytes=9000", "1460")),
    Mistake("mtu-too-small", "network.mtu_bytes=10", EXIT_BAD_CONFIG, ("network.mtu_bytes=10", ">= 68")),
    Mistake("loss-not-a-probability", "network.loss_rate=2", EXIT_BAD_CONFIG, ("network.loss_rate=2.0", "[0, 1)")),
    Mistake("zero-npus", "network.npus=0", EXIT_BAD_CONFIG, ("network.npus=0", ">= 2")),
    # a named grid without -m: one run of its base config would ignore the grid
    Mistake("grid-without-m", "experiment=quickstart", EXIT_BAD_CONFIG, ("names a grid", "add -m")),
    Mistake("dashed-override", "--network=leaf_spine", EXIT_BAD_CONFIG,
            ("--network=leaf_spine is not an option", "(network=leaf_spine)")),
    Mistake("absurd-npus", "network.npus=100000000", EXIT_BAD_CONFIG, ("network.npus=100000000", "at most 1,048,576")),
    # a topology that cannot hold the NPUs
    Mistake("leaf-spine-npus", "network=leaf_spine network.npus=10", EXIT_BAD_CONFIG,
            ("network.npus=10", "multiple of network.hosts_per_leaf = 4")),
    Mistake("dumbbell-odd-npus", "network=dumbbell network.npus=7", EXIT_BAD_CONFIG, ("network.npus=7", "even")),
    Mistake("halving-doubling-12", "system=halving_doubling network.npus=12", EXIT_BAD_CONFIG,
            ("system.all_reduce='halving_doubling'", "power-of-two", "12")),
    # flows to hosts that do not exist
    Mistake("flow-to-missing-host", "workload=flows workload.flows=[{src:0,dst:99,bytes:10,start_us:0}]",
            EXIT_BAD_CONFIG, ("workload.flows[0].dst=99", "0..15")),
    # a bool echoed as written (true), not in Python's spelling (True)
    Mistake("astra-compat-on-flows", "workload=incast system.astra_compat=true", EXIT_BAD_CONFIG,
            ("system.astra_compat=true is not valid",)),
    Mistake("incast-too-many-senders", "workload=incast workload.senders=99", EXIT_BAD_CONFIG,
            ("workload.senders=99", "1..15")),
    # a key of another preset, which would change nothing
    Mistake("key-of-another-topology", "network=switch network.spines=4", EXIT_BAD_CONFIG,
            ("network.spines='4'", "network.topology=leaf_spine", "change nothing")),
    Mistake("grid-key-of-another-cc", "tcp=newreno tcp.dctcp_g=0.1,0.2", EXIT_BAD_CONFIG,
            ("tcp.dctcp_g='0.1'", "tcp.cc=dctcp", "in every point of this grid"), multirun=True),
    # ASTRA-sim workload files
    Mistake("astra-missing", ASTRA + "missing.txt", EXIT_BAD_CONFIG,
            ("workload.path=", "missing.txt", "existing")),
    Mistake("astra-empty", ASTRA + "empty.txt", EXIT_BAD_CONFIG,
            ("workload.path=", "empty.txt", "this one is empty")),
    Mistake("astra-not-a-workload", ASTRA + "garbage.txt", EXIT_BAD_CONFIG,
            ("garbage.txt", "line 1: parallelism 'hello' is not one of", "starts with it")),
    Mistake("astra-truncated", ASTRA + "truncated.txt", EXIT_BAD_CONFIG, ("truncated.txt", "1 layer lines", "found 0")),
    Mistake("astra-field-count", ASTRA + "fields.txt", EXIT_BAD_CONFIG,
            ("fields.txt", "line 3", "12 fields", "found 6")),
    Mistake("astra-comm-type", ASTRA + "comm.txt", EXIT_BAD_CONFIG, ("comm.txt", "'BROADCAST'", "ALLREDUCE")),
    Mistake("astra-directory", ASTRA + "adir", EXIT_BAD_CONFIG, ("workload.path=", "adir")),
    # where the results go
    Mistake("results-dir-is-a-file", "results_dir={root}/afile", EXIT_BAD_CONFIG,
            ("results_dir=", "afile", "is a file")),
    Mistake("name-is-a-file", "results_dir={root} name=afile", EXIT_BAD_CONFIG, ("name='afile'", "is a file")),
    Mistake("results-dir-under-a-file", "results_dir={root}/afile/sub", EXIT_BAD_CONFIG, ("results_dir=", "is a file")),
    Mistake("results-dir-read-only", "results_dir={root}/readonly", EXIT_BAD_CONFIG,
            ("results_dir=", "readonly", "not writable"), needs="immutable"),
    Mistake("name-escapes", "name=../escape", EXIT_BAD_CONFIG, ("name='../escape'", "without path separators")),
    Mistake("name-with-slash", "name=a/b", EXIT_BAD_CONFIG, ("name='a/b'", "without path separators")),
    Mistake("name-absolute", "name=/tmp/x", EXIT_BAD_CONFIG, ("name='/tmp/x'", "without path separators")),
    Mistake("bad-interpolation", "+x='${oc.decode:1}'", EXIT_BAD_CONFIG, ("x='${oc.decode:1}'", "resolve")),
    Mistake("missing-env-var", "+x='${oc.env:NETSWEEP_SURELY_UNSET}'", EXIT_BAD_CONFIG,
            ("x='${oc.env:NETSWEEP_SURELY_UNSET}'", "NETSWEEP_SURELY_UNSET")),
    Mistake("bad-force", "+force=maybe", EXIT_BAD_CONFIG, ("force='maybe'", "true or false")),
    # multirun
    Mistake("grid-bad-point", "network.link_gbps=25,-5", EXIT_BAD_CONFIG,
            ("network.link_gbps=-5.0", "grid point 2 of 2", "network.link_gbps=-5"), multirun=True),
    Mistake("grid-value-typo", "tcp.cc=cubic,renoo seed=1,2", EXIT_BAD_CONFIG,
            ("tcp.cc='renoo'", "grid point 3 of 4", "tcp.cc=renoo seed=1"), multirun=True),
    Mistake("grid-unknown-preset", "tcp=newreno,nope", EXIT_BAD_CONFIG, ("tcp='nope'", "cubic, dctcp, linux, newreno"),
            multirun=True),
    Mistake("grid-key-typo", "tcp.mn_rto_ms=1,200", EXIT_BAD_CONFIG,
            ("tcp.mn_rto_ms=1", "(did you mean tcp.min_rto_ms?)"), multirun=True),
    Mistake("grid-name-escapes", "name=../escape seed=1,2", EXIT_BAD_CONFIG,
            ("name='../escape'", "grid point 1 of 2"), multirun=True),
    Mistake("grid-results-dir-is-a-file", "results_dir={root}/afile seed=1,2", EXIT_BAD_CONFIG,
            ("results_dir=", "is a file", "grid point 1 of 2"), multirun=True),
    Mistake("grid-bad-interpolation", "+x='${oc.decode:1}' seed=1,2", EXIT_BAD_CONFIG,
            ("x='${oc.decode:1}'", "grid point 1 of 2"), multirun=True),
    Mistake("grid-launcher-setting", "hydra.launcher.max_in_flight=0", EXIT_BAD_CONFIG,
            ("hydra.launcher.max_in_flight=0", "positive integer"), multirun=True),
    Mistake("grid-bad-num-cpus", "ray.num_cpus=0", EXIT_BAD_CONFIG, ("ray.num_cpus=0", "positive integer"),
            multirun=True),
    # more memory a run than the machine has, on a local Ray: refused before Ray starts, not an error row a run
    Mistake("grid-memory-beyond-machine", "hydra.launcher.run_memory_mb=100000000 seed=1,2", EXIT_BAD_CONFIG,
            ("hydra.launcher.run_memory_mb=100000000.0", "this machine's memory"), multirun=True),
    Mistake("screen-without-budget", "hydra.launcher.screen_backend=analytical seed=1,2", EXIT_BAD_CONFIG,
            ("hydra.launcher.refine_budget=null", "number of refined runs"), multirun=True),
    Mistake("screen-backend-typo", "hydra.launcher.screen_backend=analitical hydra.launcher.refine_budget=1 seed=1,2",
            EXIT_BAD_CONFIG, ("hydra.launcher.screen_backend='analitical'", "analytical, alpha_beta"), multirun=True),
    Mistake("refine-budget-too-small", "hydra.launcher.screen_backend=alpha_beta hydra.launcher.refine_budget=3 "
            "hydra.launcher.refine_top=2 hydra.launcher.refine_top_per=[seed] seed=1,2", EXIT_BAD_CONFIG,
            ("hydra.launcher.refine_budget=3", "refine_top x 2", "= 4"), multirun=True),
    Mistake("screen-flows-on-analytical", "hydra.launcher.screen_backend=analytical hydra.launcher.refine_budget=1 "
            "hydra.launcher.refine_top=0 workload=incast seed=1,2", EXIT_BAD_CONFIG,
            ("engine.backend", "grid point 1 of 2"), multirun=True),
    # a search (hydra/sweeper=optuna): refused before anything is planned or run
    Mistake("search-objective-typo", "hydra/sweeper=optuna hydra.sweeper.objective=iteration_time seed=1,2",
            EXIT_BAD_CONFIG, ("hydra.sweeper.objective='iteration_time'", "numeric column of the runs table"),
            multirun=True),
    Mistake("search-objective-text", "hydra/sweeper=optuna hydra.sweeper.objective=status seed=1,2",
            EXIT_BAD_CONFIG, ("hydra.sweeper.objective='status'", "numeric column"), multirun=True),
    Mistake("search-objective-null", "hydra/sweeper=optuna hydra.sweeper.objective=null seed=1,2",
            EXIT_BAD_CONFIG, ("hydra.sweeper.objective=null", "a non-empty list"), multirun=True),
    Mistake("search-objective-empty", "hydra/sweeper=optuna hydra.sweeper.objective=[] seed=1,2",
            EXIT_BAD_CONFIG, ("hydra.sweeper.objective=[]", "a non-empty list"), multirun=True),
    # a search is checked as a grid is before Ray starts: its objective on every backend, its values' corners
    Mistake("search-objective-not-filled", "hydra/sweeper=optuna engine.backend=phase hydra.sweeper.objective="
            "retransmits network.link_gbps=25,100", EXIT_BAD_CONFIG,
            ("hydra.sweeper.objective='retransmits'", "engine.backend=phase", "leaves retransmits empty"),
            multirun=True),
    Mistake("search-value-backend-refuses", "hydra/sweeper=optuna engine.backend=hybrid "
            "network.npus=16,1087", EXIT_BAD_CONFIG,
            ("network.npus=1087", "engine.backend=hybrid", "(search point: "), multirun=True),
    Mistake("search-interval-end-wrong", "hydra/sweeper=optuna network.link_gbps=interval(-5,100)", EXIT_BAD_CONFIG,
            ("network.link_gbps=-5.0", "a number > 0", "(search point: "), multirun=True),
    Mistake("search-direction-typo", "hydra/sweeper=optuna hydra.sweeper.direction=minimise seed=1,2",
            EXIT_BAD_CONFIG, ("hydra.sweeper.direction='minimise'", "minimize or maximize"), multirun=True),
    Mistake("search-directions-count", "hydra/sweeper=optuna hydra.sweeper.direction=[minimize,maximize] seed=1,2",
            EXIT_BAD_CONFIG, ("hydra.sweeper.direction=", "one direction per objective"), multirun=True),
    Mistake("search-nothing-to-search", "hydra/sweeper=optuna seed=1", EXIT_BAD_CONFIG,
            ("hydra.sweeper.params=", "at least one key to search"), multirun=True),
    Mistake("search-real-range", "hydra/sweeper=optuna network.link_gbps=range(1,2,0.5)", EXIT_BAD_CONFIG,
            ("network.link_gbps='range(1,2,0.5)'", "a range of integers"), multirun=True),
    Mistake("search-memory-beyond-machine", "hydra/sweeper=optuna hydra.launcher.run_memory_mb=100000000 seed=1,2",
            EXIT_BAD_CONFIG, ("hydra.launcher.run_memory_mb=100000000.0", "this machine's memory"), multirun=True),
    Mistake("search-fixed-key-wrong", "hydra/sweeper=optuna network.link_gbps=-5 seed=1,2", EXIT_BAD_CONFIG,
            ("network.link_gbps=-5.0",), multirun=True),
    # replicate until confident
    Mistake("replicate-pct-out-of-range", "replicate.until_ci_pct=150 seed=1", EXIT_BAD_CONFIG,
            ("replicate.until_ci_pct=150", "percentage of the mean"), multirun=True),
    Mistake("replicate-metric-typo", "replicate.until_ci_pct=5 replicate.metric=iteration_time", EXIT_BAD_CONFIG,
            ("replicate.metric='iteration_time'", "numeric column of the runs table"), multirun=True),
    Mistake("replicate-one-seed", "replicate.until_ci_pct=5 replicate.min_seeds=1", EXIT_BAD_CONFIG,
            ("replicate.min_seeds=1", "an interval needs two"), multirun=True),
    Mistake("replicate-max-below-min", "replicate.until_ci_pct=5 replicate.max_seeds=2", EXIT_BAD_CONFIG,
            ("replicate.max_seeds=2", "replicate.min_seeds (3)"), multirun=True),
    Mistake("replicate-seed-swept", "replicate.until_ci_pct=5 seed=1,2", EXIT_BAD_CONFIG,
            ("seed=2", "one seed per grid point"), multirun=True),
    Mistake("replicate-two-fidelity", "replicate.until_ci_pct=5 hydra.launcher.screen_backend=alpha_beta "
            "hydra.launcher.refine_budget=2 hydra.launcher.refine_top=1 network.link_gbps=25,100", EXIT_BAD_CONFIG,
            ("replicate.until_ci_pct=5", "two-fidelity"), multirun=True),
    Mistake("replicate-in-a-search", "hydra/sweeper=optuna replicate.until_ci_pct=5 network.link_gbps=25,100",
            EXIT_BAD_CONFIG, ("replicate.until_ci_pct=5", "in a search"), multirun=True),
    # a port where something that is not Ray listens (the module's `_not_ray_server`)
    Mistake("ray-address-not-ray", "ray.address={not_ray} seed=12346", EXIT_BAD_CONFIG,
            ("no Ray cluster answers at ray.address=127.0.0.1:", "does not speak Ray's protocol"), multirun=True),
    Mistake("unreachable-ray", "ray.address=127.0.0.1:1 seed=12345", EXIT_BAD_CONFIG,
            # refused by the address probe at once, never reaching ray.init's minutes of retries
            ("ray.address=127.0.0.1:1", "no Ray cluster answers", "Connection refused"), multirun=True),
]


def _tree_hashes(root: Path) -> dict[str, str]:
    """Every file under `root` (relative path -> SHA-256) and every directory (-> 'dir')."""
    hashes = {}
    for path in sorted(root.rglob("*")):
        key = str(path.relative_to(root))
        hashes[key] = "dir" if path.is_dir() else hashlib.sha256(path.read_bytes()).hexdigest()
    return hashes


def _immutable(path: Path) -> bool:
    """Make `path` a directory that not even root can write to (`chattr +i`); False if the file
    system or the container does not allow it."""
    path.mkdir()
    try:
        subprocess.run(["chattr", "+i", str(path)], check=True, capture_output=True)
    except (OSError, subprocess.CalledProcessError):
        return False
    try:
        (path / "probe").write_text("x")
    except PermissionError:
        return True
    (path / "probe").unlink()  # chattr succeeded but writes still pass: not a real test
    subprocess.run(["chattr", "-i", str(path)], check=False)
    return False


@contextlib.contextmanager
def _not_ray_server() -> Iterator[str]:
    """`127.0.0.1:<port>` of a server that is not Ray: it answers every connection in plain text and hangs up."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()

        def answer() -> None:
            while True:
                try:
                    connection, _ = server.accept()
                except OSError:  # closed: the tests are over
                    return
                with connection:
                    connection.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")

        threading.Thread(target=answer, daemon=True).start()
        yield f"127.0.0.1:{server.getsockname()[1]}"


def _arguments(mistake: Mistake, root: Path, not_ray: str = "") -> list[str]:
    """The arguments after `python -m sweep`: every command writes to the existing dataset unless
    it names another place itself."""
    args = mistake.args.replace("{root}", str(root)).replace("{not_ray}", not_ray).split(" ")
    keys = {arg.lstrip("+").split("=", 1)[0] for arg in args}
    defaults = [arg for key, arg in (("results_dir", f"results_dir={root / 'results'}"), ("name", "name=existing"))
                if key not in keys]
    return [*(["-m"] if mistake.multirun else []), *args, *defaults]


def _environment() -> dict[str, str]:
    """The commands' environment: the sweep package of this checkout, not whichever one is installed."""
    path = os.pathsep.join([str(Path(__file__).resolve().parent.parent), os.environ.get("PYTHONPATH", "")])
    return {**os.environ, "HYDRA_FULL_ERROR": "", "PYTHONPATH": path}


def _run(mistake: Mistake, root: Path) -> subprocess.CompletedProcess:
    """The mistake's command line as its own process."""
    return subprocess.run([sys.executable, "-m", "sweep", *_arguments(mistake, root)], capture_output=True,
                          text=True, cwd=root / "cwd", timeout=120, env=_environment())


# A command server: reads one JSON job a line ({args, cwd, env, out, err}), runs `python -m sweep
# <args>` in a forked child with that working directory, environment and output files, and writes
# the child's exit code as one line.
_COMMAND_SERVER = r"""
import json, os, runpy, sys, traceback
import sweep.cli  # the command's imports, once: Hydra, OmegaConf, the engine
for line in sys.stdin:
    job = json.loads(line)
    pid = os.fork()
    if pid == 0:
        os.chdir(job["cwd"])
        os.environ.clear()
        os.environ.update(job["env"])
        for fd, name in ((1, job["out"]), (2, job["err"])):
            os.dup2(os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), fd)
        sys.argv = ["sweep", *job["args"]]
        try:
            runpy.run_module("sweep", run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as exiting:  # as the interpreter treats it
            code = exiting.code if isinstance(exiting.code, int) else (exiting.code is not None)
            if not isinstance(exiting.code, (int, type(None))):
                print(exiting.code, file=sys.stderr)
        except BaseException:
            traceback.print_exc()
            code = 1
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), flush=True)
"""


def _run_forked(mistakes: list[Mistake], root: Path, outputs: Path,
                not_ray: str) -> dict[str, subprocess.CompletedProcess]:
    """Each mistake's command line run by a command server (`_COMMAND_SERVER`); one server per
    core, each taking every other mistake; their output files go to `outputs`."""
    env = _environment()

    def serve(share: list[Mistake]) -> dict[str, subprocess.CompletedProcess]:
        jobs = [{"args": _arguments(m, root, not_ray), "cwd": str(root / "cwd"), "env": env,
                 "out": str(outputs / f"{m.id}.out"), "err": str(outputs / f"{m.id}.err")} for m in share]
        server = subprocess.run([sys.executable, "-c", _COMMAND_SERVER], input="".join(json.dumps(job) + "\n"
                                for job in jobs), capture_output=True, text=True, env=env, timeout=600, check=True)
        codes = [int(code) for code in server.stdout.split()]
        assert len(codes) == len(share), server.stderr
        return {m.id: subprocess.CompletedProcess(["python", "-m", "sweep", *job["args"]], code,
                                                  Path(job["out"]).read_text(), Path(job["err"]).read_text())
                for m, job, code in zip(share, jobs, codes)}

    servers = max(2, os.cpu_count() or 2)
    with concurrent.futures.ThreadPoolExecutor(max_workers=servers) as pool:
        shares = pool.map(serve, [mistakes[index::servers] for index in range(servers)])
    return {key: value for share in shares for key, value in share.items()}


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Set up the workload files, an existing dataset and a read-only directory; run every mistake
    (concurrently); return the results and the file hashes before and after."""
    root = tmp_path_factory.mktemp("bad_input")
    (root / "cwd").mkdir()  # the commands run here: a stray relative write would show up in the hashes
    (root / "empty.txt").write_text("")
    (root / "garbage.txt").write_text("hello this is not a workload\n")
    (root / "truncated.txt").write_text("MICRO\n1\n")
    (root / "fields.txt").write_text("MICRO\n1\nconv1 -1 5 NONE 0 5\n")
    (root / "comm.txt").write_text(f"MICRO\n1\n{GOOD_LAYER.replace('ALLREDUCE', 'BROADCAST')}")
    (root / "adir").mkdir()
    (root / "afile").write_text("not a directory\n")
    immutable = _immutable(root / "readonly")
    config = compose_config([f"results_dir={root / 'results'}", "name=existing", "workload=collective",
                             "workload.bytes=1024", "network.npus=4", "engine.backend=analytical"])
    assert run_one(config, out=io.StringIO()) == EXIT_OK  # an existing dataset with one run in it
    before = _tree_hashes(root)
    runnable = [m for m in MISTAKES if m.needs != "immutable" or immutable]
    try:
        with _not_ray_server() as not_ray:
            results = _run_forked(runnable, root, tmp_path_factory.mktemp("bad_input_outputs"), not_ray)
        after = _tree_hashes(root)
    finally:
        if immutable:
            subprocess.run(["chattr", "-i", str(root / "readonly")], check=False)
    yield {"results": results, "before": before, "after": after, "root": root}
    shutil.rmtree(root, ignore_errors=True)


def test_there_are_enough_distinct_mistakes() -> None:
    assert len({m.id for m in MISTAKES}) == len(MISTAKES) >= 30
    assert len({m.args for m in MISTAKES}) == len(MISTAKES)


@pytest.mark.parametrize("mistake", MISTAKES, ids=[m.id for m in MISTAKES])
def test_mistake_is_refused_clearly(mistake: Mistake, outcomes: dict) -> None:
    if mistake.id not in outcomes["results"]:
        pytest.skip("no way to make a directory read-only for this user here (root, and chattr +i "
                    "is not allowed): a writable check cannot be shown")
    result = outcomes["results"][mistake.id]
    stderr = result.stderr
    assert result.returncode == mistake.code, (result.returncode, stderr, result.stdout)
    assert "Traceback" not in stderr and "Traceback" not in result.stdout
    for piece in mistake.expect:
        assert piece.replace("{root}", str(outcomes["root"])) in stderr, (piece, stderr)
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr


@pytest.mark.parametrize("mistake_id", ["unknown-preset", "negative-bandwidth", "grid-value-typo", "astra-comm-type"])
def test_forked_commands_are_the_command_line(mistake_id: str, outcomes: dict) -> None:
    """A Hydra composition error, a validation error, a grid point's error and a workload file's
    error, each run as its own `python -m sweep` process: the same exit code, output and error as
    from the command server."""
    mistake = next(m for m in MISTAKES if m.id == mistake_id)
    alone = _run(mistake, outcomes["root"])
    forked = outcomes["results"][mistake_id]
    assert (alone.returncode, alone.stdout, alone.stderr) == (forked.returncode, forked.stdout, forked.stderr)


def test_nothing_was_written_or_changed(outcomes: dict) -> None:
    before, after = outcomes["before"], outcomes["after"]
    assert any(key.startswith("results/existing/runs/part-") for key in before)
    changed = {key for key in before.keys() | after.keys() if before.get(key) != after.get(key)}
    assert not changed, sorted(changed)
    assert not (outcomes["root"] / "escape").exists() and not (outcomes["root"] / "results" / "a").exists()


# `python -m sweep` where Ray finds no Ray process running on this machine: with exactly one running
# (another sweep's, a test's), `auto` joins that one whatever the current-cluster file says
_NO_OTHER_RAY = r"""
import runpy, sys
import ray._private.services
ray._private.services._find_address_from_flag = lambda flag: set()
sys.argv = ["sweep", *sys.argv[1:]]
runpy.run_module("sweep", run_name="__main__", alter_sys=True)
"""


def test_auto_address_whose_head_died_is_refused_at_once(tmp_path: Path) -> None:
    """`ray.address=auto` where a crashed head left Ray's current-cluster file behind (here a file of this
    test's own, `$RAY_TMPDIR/ray/ray_current_cluster`, naming a loopback port nothing listens on): one
    line that says what to do, at once, not `ray.init`'s 824 s of retries; exit 2, nothing written."""
    with socket.socket() as probe:  # a loopback port that was free a moment ago, closed: nothing listens
        probe.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{probe.getsockname()[1]}"
    (tmp_path / "ray").mkdir()
    current = tmp_path / "ray" / "ray_current_cluster"
    current.write_text(dead)
    (tmp_path / "cwd").mkdir()
    env = {key: value for key, value in _environment().items() if key != "RAY_ADDRESS"}
    done = subprocess.run([sys.executable, "-c", _NO_OTHER_RAY, "-m", "ray.address=auto", "seed=1",
                           f"results_dir={tmp_path / 'results'}", "engine.backend=analytical", "workload=collective",
                           "network.npus=4"], capture_output=True, text=True, cwd=tmp_path / "cwd", timeout=120,
                          env={**env, "RAY_TMPDIR": str(tmp_path)})
    assert done.returncode == EXIT_BAD_CONFIG, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    # (dialled there, or at this machine's address if Ray was imported as for a cluster of machines)
    for piece in (f"ray.address=auto found the Ray cluster at {dead} (from {current})", "its head has stopped",
                  "`ray stop`", "ray.address="):
        assert piece in lines[0], (piece, lines[0])
    assert sorted(path.name for path in tmp_path.rglob("*")) == ["cwd", "ray", "ray_current_cluster"]


@pytest.mark.parametrize("existing", [False, True])
def test_a_refused_cluster_leaves_the_ray_log_as_it_was(tmp_path: Path, existing: bool) -> None:
    """What Ray wrote while a cluster refused the sweep (a ConnectionError inside `stderr_to_log`) is
    taken back: a log that was not there is gone with the directories made for it, an older one keeps
    its bytes."""
    from sweep.cluster import stderr_to_log

    log = tmp_path / "results" / "name" / "_ray.log"
    if existing:
        log.parent.mkdir(parents=True)
        log.write_text("an earlier sweep's lines\n")
    with pytest.raises(ConnectionError), stderr_to_log(log, "ray.address=somewhere"):
        os.write(2, b"Ray's retries\n")
        raise ConnectionError("refused")
    assert log.read_text() == "an earlier sweep's lines\n" if existing else not (tmp_path / "results").exists()
