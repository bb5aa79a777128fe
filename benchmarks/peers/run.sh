#!/usr/bin/env bash
# invjax against e2cnn in one command, from the repository root:
#
#   benchmarks/peers/run.sh [e2cnn_bench.py flags, e.g. --json peers.json, --gpu]
#
# Creates the peer's own virtual environment once (.venv-peers/, git-ignored; override with
# PEERS_VENV=DIR): e2cnn 0.2.3, which needs numpy<2 (it calls ndarray.tostring, np.float), and
# CPU PyTorch 2.13.0 (on the development machine pip takes it from a local wheel file; with
# --gpu set PEERS_TORCH to a CUDA build, e.g. PEERS_TORCH='torch==2.13.0'). The project's own
# environment never gets torch or e2cnn. Then runs benchmarks/peers/e2cnn_bench.py with the
# project's python3, which starts benchmarks/peers/e2cnn_side.py in that venv.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
venv="${PEERS_VENV:-$repo/.venv-peers}"
torch_req="${PEERS_TORCH:-torch==2.13.0}"
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "import e2cnn, torch" 2>/dev/null; then
  echo "creating the peer venv $venv ($torch_req, numpy<2, e2cnn==0.2.3)" >&2
  python3 -m venv "$venv"
  "$venv/bin/python" -m pip install -q "$torch_req" "numpy<2" "e2cnn==0.2.3"
fi
cd "$repo"
exec python3 benchmarks/peers/e2cnn_bench.py --peer-python "$venv/bin/python" "$@"
