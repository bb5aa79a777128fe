#!/usr/bin/env bash
# The reviewer's protocol (launch/study_protocol.py) inside a fixed window of wall time, for a
# lent machine that is given back afterwards (a GPU session): tune the families, then their main
# runs a group of N_t at a time, and leave what did not finish resumable.
#
#   WINDOW_S=420 FAMILIES=scale_pool_disco,scale_iiws_disco DATASETS=scaled_digits \
#     bash launch/protocol_window.sh OUTDIR
#
# - The runs already landed in docs/results/protocol/runs are copied into the run directory
#   first, so that they are skipped (a finished run is one with its results.json).
# - Tuning runs TUNE_PARALLEL candidates side by side (their programs differ, so one program
#   cannot hold them); the main runs go a group of sizes at a time (SIZE_GROUPS, ';'-separated;
#   set and empty: tuning only), K seeds per program (--seeds-in-one), MAIN_PARALLEL programs
#   side by side: a group whose programs all progress together either lands whole or not at
#   all, so the groups are small.
# - MAIN_FAMILIES: the main runs' families, if not all of FAMILIES (e.g. tune a family while
#   another, already tuned, runs its main groups).
# - No group starts with less than MIN_GROUP_S seconds of the window left; at the window's end
#   every run is stopped with SIGTERM (each saves a checkpoint on it; the driver is killed
#   KILL_GRACE_S, default 90, later if its runs have not saved by then: 30 s was too short for
#   up to 20 programs saving at once on one machine) and OUTDIR gets
#   protocol_runs.tgz (the small results of the runs that landed in this window, as runs/...
#   relative to PROTOCOL_OUT: unpack there and commit them; only these, so that the archives
#   of several windows stay inside what a lent machine sends back) and protocol_partial.tgz
#   (the unfinished runs' latest checkpoints, to resume elsewhere with
#   the same command: unpack into the run directory), each log beside them.
# - RERUN (run paths relative to the run directory, separated by spaces or commas) are moved to
#   RUNS/replaced after that copy, so that they train again: a run that landed on a machine given
#   back has its small results in git but no checkpoint, which a two-phase network needs of its
#   phase-1 streams. A path under which the run directory already holds a checkpoint (trained
#   here by an earlier call, finished or not) is kept, so the same command can be given again on
#   a warm machine and resumes instead of starting over (study_protocol.py's rerun_prepare, the
#   rule of its --rerun). Their recorded results stay the record
#   (launch/study_protocol.py reads the choice and the errors from PROTOCOL_OUT/runs; sync never
#   overwrites it); the retrained ones' small results come back apart, in protocol_rerun.tgz
#   (runs/<path>/..., as the record holds them), to replace the record's only on purpose:
#   tar xzf OUTDIR/protocol_rerun.tgz -C docs/results/protocol.
# - PACK_FINISHED (space-separated globs, launch/pack_partial.py --finished) adds the final
#   checkpoints of the finished runs that match to protocol_partial.tgz, e.g. the streams that
#   two-phase networks elsewhere will reuse: PACK_FINISHED='*/scale_iiws_disco/*'.
set -uo pipefail
out=${1:?usage: bash launch/protocol_window.sh OUTDIR}
mkdir -p "$out"
cd "$(dirname "$0")/.."
runs=${RUNS:-/tmp/protocol_runs}
report=${PROTOCOL_OUT:-docs/results/protocol}
mirror=$report/runs
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
end=$((SECONDS + ${WINDOW_S:-420}))
stamp=$(mktemp)  # what lands in the mirror after this is this window's
mkdir -p "$runs" "$mirror"
cp -rn "$mirror"/. "$runs"/
rerun_list=${RERUN:-}
read -ra rerun <<<"${rerun_list//,/ }"
for run in "${rerun[@]}"; do  # all checked before any is removed
  case "$run" in /* | *..*) echo "RERUN: $run must be a path inside the run directory" >&2 && exit 2 ;; esac
done
if [ ${#rerun[@]} -gt 0 ]; then  # study_protocol's --rerun rule: kept, or moved to RUNS/replaced
  python3 - "$runs" "${rerun[@]}" <<'PY'
import runpy, sys

prepare = runpy.run_path("launch/study_protocol.py")["rerun_prepare"]
for line, _ in prepare(sys.argv[1], sys.argv[2:]):
    print(f"== {line}")
PY
fi
families=${FAMILIES:-scale_pool_disco,scale_iiws_disco}
common=(--datasets "${DATASETS:-scaled_digits}" --runs-dir "$runs" --out "$report" ${PROTOCOL_ARGS:-})

left() { echo $((end - SECONDS)); }
protocol() {  # protocol LOG ARGS...: one invocation, stopped at the window's end
  local log=$1
  shift
  echo "== $(date +%T) protocol $* ($(left) s left)"
  timeout -s TERM -k "${KILL_GRACE_S:-90}" "$(left)" python3 launch/study_protocol.py "${common[@]}" "$@" \
    >>"$out/$log" 2>&1
  echo "== $(date +%T) exit $? ($(left) s left)"
  grep -E "landed|budget|wait|left out|error" "$out/$log" | tail -n 5
}

protocol tune.log --stage tune --families "$families" --parallel "${TUNE_PARALLEL:-10}" \
  --runs-per-gpu "${TUNE_PARALLEL:-10}"
IFS=';' read -ra groups <<<"${SIZE_GROUPS-20,50;100,300;0}"
for sizes in "${groups[@]}"; do
  if [ "$(left)" -lt "${MIN_GROUP_S:-150}" ]; then
    echo "== $(date +%T) $(left) s left: no group of sizes $sizes"
    continue
  fi
  protocol main.log --stage main --families "${MAIN_FAMILIES:-$families}" --sizes "$sizes" --seeds-in-one \
    --parallel "${MAIN_PARALLEL:-4}" --runs-per-gpu "${MAIN_PARALLEL:-4}"
done
# the report from what landed, then the two archives
python3 launch/study_protocol.py "${common[@]}" --families "$families" --stage report >"$out/report.log" 2>&1
(cd "$report" && find runs -type f -newer "$stamp" | sort) >"$stamp.list"
tar czf "$out/protocol_runs.tgz" -C "$report" -T "$stamp.list"
echo "== $(wc -l <"$stamp.list") files of landed runs in $out/protocol_runs.tgz"
rm -f "$stamp" "$stamp.list"
if [ ${#rerun[@]} -gt 0 ]; then  # the retrained runs, apart from the record they would replace
  again=$(mktemp -d)
  python3 - "$runs" "$again/runs" "${rerun[@]}" <<'PY'
import os, runpy, sys

sync = runpy.run_path("launch/study_protocol.py")["sync"]
runs, dst = sys.argv[1], sys.argv[2]
for path in sys.argv[3:]:
    if os.path.isdir(os.path.join(runs, path)):
        n = sync(os.path.join(runs, path), os.path.join(dst, path))
        print(f"== {path}: {n} retrained run(s) in protocol_rerun.tgz")
PY
  [ -d "$again/runs" ] && tar czf "$out/protocol_rerun.tgz" -C "$again" runs
  rm -rf "$again"
fi
finished=()
read -ra globs <<<"${PACK_FINISHED:-}"  # read: no pathname expansion of the globs
for glob in "${globs[@]}"; do finished+=(--finished "$glob"); done
python3 launch/pack_partial.py "$runs" "$out/protocol_partial.tgz" "${finished[@]}"
ls -l "$out"
