"""Write the Chakra traces tests/test_chakra.py's round trips read, with Chakra's own converter.

The round-trip tests check netsweep's reader against files written by MLCommons Chakra's text
converter (the library behind `chakra_converter Text`), not by netsweep. netsweep does not depend on
Chakra, so the converter's output is kept here, beside the ASTRA-sim 1.0 text it was converted from:
the tiny `*.txt` files of this folder and the workloads bundled in engine/workloads/astra-sim-1.0/.
Each trace is `<source>/<N>npus_<P>pass/<source>.<rank>.et`.

Re-run it (or check that the files are still what the converter writes) in an environment with
Chakra (`pip install mlc-chakra`, in a virtual environment of its own; it is heavy):

    python tests/chakra_traces/convert.py          # rewrite every trace
    python tests/chakra_traces/convert.py --check  # exit 1 if a trace differs from a fresh conversion
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from chakra.src.converter.text_converter import TextConverter

HERE = Path(__file__).resolve().parent
BUNDLED = HERE.parent.parent / "engine" / "workloads" / "astra-sim-1.0"
# (source text, NPU counts, pass counts) the tests use
CONVERSIONS = [(HERE / f"{name}.txt", (2, 4), (1,)) for name in
               ("DATA", "MODEL", "HYBRID_DATA_MODEL", "HYBRID_MODEL_DATA", "HYBRID_DLRM_ENHANCED")]
CONVERSIONS += [(BUNDLED / f"{name}.txt", (2, 4, 8), (1,)) for name in ("microAllReduce", "microAllToAll")]
CONVERSIONS += [(BUNDLED / "DLRM_HybridParallel.txt", (4, 8), (1, 2))]


def convert(source: Path, npus: int, passes: int, folder: Path) -> list[Path]:
    """Convert `source` into `folder`; the rank files written."""
    folder.mkdir(parents=True, exist_ok=True)
    TextConverter(str(source), str(folder / source.stem), npus, passes).convert()
    return [folder / f"{source.stem}.{rank}.et" for rank in range(npus)]


def main(check: bool) -> int:
    differ = 0
    with tempfile.TemporaryDirectory() as scratch:
        for source, npu_counts, pass_counts in CONVERSIONS:
            for npus in npu_counts:
                for passes in pass_counts:
                    where = Path(source.stem) / f"{npus}npus_{passes}pass"
                    for fresh in convert(source, npus, passes, Path(scratch) / where):
                        kept = HERE / where / fresh.name
                        if not check:
                            kept.parent.mkdir(parents=True, exist_ok=True)
                            kept.write_bytes(fresh.read_bytes())
                        elif not kept.is_file() or kept.read_bytes() != fresh.read_bytes():
                            print(f"differs from a fresh conversion: {kept}")
                            differ += 1
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main("--check" in sys.argv[1:]))
