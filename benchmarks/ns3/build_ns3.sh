#!/bin/sh
# Builds ns-3's side of benchmarks/bench_engine.py, the two programs next to this script:
#   ns3_tcp_bulk.cc    one TCP NewReno+SACK bulk flow over a 10 Gb/s point-to-point link
#   ns3_tcp_incast.cc  16 senders x 64 KiB into one 64 KiB router port, 10 rounds
# against the headers and libraries shipped in the ns3 wheel from PyPI (ns-3.44).
# Usage: sh build_ns3.sh [OUTDIR]   -> OUTDIR/ns3_tcp_bulk, OUTDIR/ns3_tcp_incast
#                                      (OUTDIR defaults to $TMPDIR/ns3-bench, else /tmp/ns3-bench)
#        OUTDIR/ns3_tcp_bulk --bytes=100000000
#        OUTDIR/ns3_tcp_incast --rounds=10 --senders=16 --bytes=65536 --minRto=200 --buffer=65536
# Reuses the virtual environment OUTDIR/venv if it exists (with ns3 installed), otherwise creates it
# and installs ns3==3.44.post0 (about 100 MB). Needs g++ with C++20. Each program prints one RESULT line.
set -e
out=${1:-${TMPDIR:-/tmp}/ns3-bench}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
[ -x "$out/venv/bin/python" ] || python3 -m venv "$out/venv"
# the wheel's ns3 directory (a namespace package: no __init__.py, so look at its search path)
find_ns3='import importlib.util; s = importlib.util.find_spec("ns3"); print(list(s.submodule_search_locations)[0] if s else "")'
P=$("$out/venv/bin/python" -c "$find_ns3")
if [ -z "$P" ] || [ ! -d "$P/include/ns3" ]; then
  "$out/venv/bin/pip" -q install ns3==3.44.post0
  P=$("$out/venv/bin/python" -c "$find_ns3")
fi
L=$(ls -d "$P"/lib64 "$P"/lib 2>/dev/null | head -1)
libs=""
for m in applications bridge core internet mobility network point-to-point stats traffic-control; do
  libs="$libs $(ls "$L"/libns3*-"$m".so | head -1)"
done
for program in ns3_tcp_bulk ns3_tcp_incast; do
  # the macros the wheel's CMake targets export to programs built against it (lib64/cmake/ns3)
  g++ -O2 -std=c++20 -DNS3_LOG_ENABLE -DNS3_ASSERT_ENABLE -DNS3_BUILD_PROFILE_RELEASE -I"$P/include" \
    "$here/$program.cc" -o "$out/$program" -L"$L" $libs -Wl,-rpath,"$L" -lpthread
  echo "built $out/$program"
done
