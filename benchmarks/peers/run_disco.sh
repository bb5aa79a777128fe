#!/usr/bin/env bash
# invjax against DISCO's own code in one command, from the repository root:
#
#   benchmarks/peers/run_disco.sh DIR [disco_bench.py flags, e.g. --json disco.json]
#
# DIR is a checkout of github.com/ISosnovik/disco (measured at f832fa06), e.g.
#   git clone https://github.com/ISosnovik/disco DIR && git -C DIR checkout f832fa06
# kept outside this repository. Creates the peer's own virtual environment once
# (.venv-peers/disco/, git-ignored with .venv-peers/; override with PEERS_VENV=DIR): CPU PyTorch
# 2.13.0 (on the development machine pip takes it from a local wheel file), NumPy and SciPy
# (DISCO's models/basis imports scipy). The project's own environment never gets torch. Then
# runs benchmarks/peers/disco_bench.py with the project's python3, which starts
# benchmarks/peers/disco_side.py in that venv.
set -euo pipefail
if [ $# -lt 1 ] || [ ! -d "$1/precalculated_basis" ]; then
  echo "invjax: error: run_disco.sh: give a checkout of github.com/ISosnovik/disco as the first" \
    "argument (a directory with precalculated_basis/ in it; got '${1:-}')" >&2
  exit 2
fi
disco="$(cd "$1" && pwd)"
shift
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
venv="${PEERS_VENV:-$repo/.venv-peers/disco}"
torch_req="${PEERS_TORCH:-torch==2.13.0}"
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "import torch, scipy" 2>/dev/null; then
  echo "creating the peer venv $venv ($torch_req, numpy, scipy)" >&2
  python3 -m venv "$venv"
  "$venv/bin/python" -m pip install -q "$torch_req" numpy scipy
fi
cd "$repo"
exec python3 benchmarks/peers/disco_bench.py --disco "$disco" --peer-python "$venv/bin/python" "$@"
