#!/usr/bin/env bash
# invjax against e2cnn in one command, from the repository root:
#
#   benchmarks/peers/run.sh [e2cnn_bench.py flags, e.g. --json peers.json, --gpu]
#
# Creates the peer's own virtual environment once (.venv-peers/, git-ignored; override with
# PEERS_VENV=DIR): e2cnn 0.2.3 with numpy<2 (e2cnn calls ndarray.tostring, np.float; see
# below), and CPU PyTorch 2.13.0 (on the development machine pip takes it from a local wheel
# file; with --gpu set PEERS_TORCH to a CUDA build, e.g. PEERS_TORCH='torch==2.13.0'). The
# project's own environment never gets torch or e2cnn. Then runs benchmarks/peers/e2cnn_bench.py with the
# project's python3, which starts benchmarks/peers/e2cnn_side.py in that venv.
#
# On a machine whose python3 already has a (CUDA) torch and no package index, e.g. a GPU box:
#
#   PEERS_TORCH=system PEERS_WHEELS=DIR benchmarks/peers/run.sh --gpu --json peers.json
#
# installs only e2cnn 0.2.3 (from the wheel file in DIR, or the index without PEERS_WHEELS) into
# $PEERS_VENV/site, a --target folder, and writes $PEERS_VENV/bin/python, a wrapper that runs
# python3 with that folder first on its path. python3's own torch, scipy, sympy and numpy are
# used: numpy<2 cannot go beside a torch and scipy built for NumPy 2, so e2cnn_side.py gives the
# three NumPy 1 behaviours e2cnn relies on back to it (its _patch_numpy2 says which; the results
# print what was patched). Get the wheel elsewhere with: pip download --no-deps -d DIR e2cnn==0.2.3
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
venv="${PEERS_VENV:-$repo/.venv-peers}"
torch_req="${PEERS_TORCH:-torch==2.13.0}"
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "import e2cnn, torch" 2>/dev/null; then
  if [ "$torch_req" = system ]; then
    echo "peer site $venv/site (python3's torch and numpy, e2cnn==0.2.3)" >&2
    from=()
    if [ -n "${PEERS_WHEELS:-}" ]; then from=(--no-index --find-links "$PEERS_WHEELS"); fi
    python3 -m pip install -q --no-deps --no-compile --target "$venv/site" "${from[@]}" \
      "e2cnn==0.2.3"
    mkdir -p "$venv/bin"
    printf '#!/bin/sh\nPYTHONPATH="%s/site" exec python3 "$@"\n' "$venv" >"$venv/bin/python"
    chmod +x "$venv/bin/python"
  else
    echo "creating the peer venv $venv ($torch_req, numpy<2, e2cnn==0.2.3)" >&2
    python3 -m venv "$venv"
    "$venv/bin/python" -m pip install -q "$torch_req" "numpy<2" "e2cnn==0.2.3"
  fi
fi
cd "$repo"
exec python3 benchmarks/peers/e2cnn_bench.py --peer-python "$venv/bin/python" "$@"
