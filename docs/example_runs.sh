#!/usr/bin/env bash
# Makes docs/example_error_vs_n_train.png and docs/example_training_curves.png from real short
# runs: the plain CNN of configs/digits_cnn.py at two widths, N_t = 100, 300, 1000 scaled digits,
# seeds 0 and 1, 15 epochs (learning rate x0.1 after epochs 10 and 13). Offline (scikit-learn's
# digits); about 10 minutes on 2 CPU cores. Usage, from the repository root:
#   bash docs/example_runs.sh [RUNS_DIR]       (default runs/example)
set -euo pipefail
runs=${1:-runs/example}
for width in 16 32; do
  for n in 100 300 1000; do
    for seed in 0 1; do
      python3 -m invjax.main --config=configs/digits_cnn.py --workdir="$runs/w$width/n${n}_s$seed" \
        --config.model.width=$width --config.data.n_train=$n --config.seed=$seed \
        --config.train.num_epochs=15 --config.train.lr_boundaries='(10, 13)' | tail -1
    done
  done
done
python3 -m invjax.report "$runs" --markdown --plot=docs/example_error_vs_n_train.png \
  --curves="$runs/all_curves.png"
# Training curves of one size and seed per width (all twelve runs would crowd the plot).
python3 -c "
import sys; from invjax import report
runs = [r for r in report.find_results(sys.argv[1]) if r[0].endswith('n1000_s0')]
print(report.plot_curves(runs, sys.argv[1], 'docs/example_training_curves.png'))" "$runs"
