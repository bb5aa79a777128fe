#!/usr/bin/env bash
# Land what a protocol session (launch/protocol_session.sh) brought back from a lent machine:
#
#   bash launch/protocol_land.sh OUT RUNS [--replace]
#
# - OUT/landed.tgz -> the record (RECORD, default docs/results/protocol): only runs the record
#   does not hold yet (a run that landed before keeps its first result);
# - OUT/rerun.tgz (the retrained RERUN runs) -> the record, over the runs it holds, only with
#   --replace (decide that before the runs, as the protocol README says); without it they are
#   counted and left out;
# - OUT/partial.tar (or its pieces partial.tar.aa, .ab, ...) -> RUNS, the run directory of the
#   machine that goes on: each window's unfinished runs with their latest checkpoints, and the
#   finished runs that PACK_FINISHED named, so that the same protocol command resumes them and
#   two-phase networks reuse them as phase 1 there.
# Everything is checked before anything is unpacked; then commit the record and rewrite the
# report (the lines printed at the end).
set -euo pipefail
usage="usage: bash launch/protocol_land.sh OUT RUNS [--replace]"
out=${1:?$usage}
runs=${2:?$usage}
replace=${3:-}
if [ -n "$replace" ] && [ "$replace" != "--replace" ]; then
  echo "protocol_land: '$replace' is invalid: the third argument is --replace or nothing" >&2
  exit 2
fi
[ -f "$out/landed.tgz" ] ||
  { echo "protocol_land: $out/landed.tgz is missing: give the OUT of protocol_session.sh" >&2 && exit 2; }
out=$(realpath "$out") runs=$(realpath -m "$runs")  # as given, before the cd below
cd "$(dirname "$0")/.."  # RECORD relative to the repository
record=${RECORD:-docs/results/protocol}
[ -d "$record/runs" ] || { echo "protocol_land: the record $record/runs is missing" >&2 && exit 2; }
pieces=("$out"/partial.tar*)
[ -e "${pieces[0]}" ] || pieces=()
for archive in "$out/landed.tgz" "$out"/rerun.tgz; do  # readable, and only runs/... inside
  [ -f "$archive" ] || continue
  outside=$(tar tzf "$archive" | grep -Ev '^(\./)?runs(/|$)|^\./$' | head -n 1 || true)
  if [ -n "$outside" ]; then
    echo "protocol_land: $archive holds paths outside runs/: not a session's archive" >&2
    exit 2
  fi
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if [ ${#pieces[@]} -gt 0 ]; then
  cat "${pieces[@]}" | tar x -C "$work"
fi

count() { tar tzf "$1" | grep -c 'results.json$' || true; }
before=$(find "$record/runs" -name results.json | wc -l)
tar xzf "$out/landed.tgz" -C "$record" --skip-old-files
after=$(find "$record/runs" -name results.json | wc -l)
echo "protocol_land: $((after - before)) of $(count "$out/landed.tgz") landed runs are new to $record"
if [ -f "$out/rerun.tgz" ]; then
  if [ -n "$replace" ]; then
    tar xzf "$out/rerun.tgz" -C "$record"
    echo "protocol_land: $(count "$out/rerun.tgz") retrained runs replace the record's (--replace)"
  else
    echo "protocol_land: $(count "$out/rerun.tgz") retrained runs in rerun.tgz left out (--replace lands them)"
  fi
fi
mkdir -p "$runs"
n=0
for partial in "$work"/*/protocol_partial.tgz; do
  [ -f "$partial" ] || continue
  tar xzf "$partial" -C "$runs"
  n=$((n + 1))
  echo "protocol_land: $(tar tzf "$partial" | wc -l) files of window $(basename "$(dirname "$partial")") into $runs"
done
[ "$n" -gt 0 ] || echo "protocol_land: no partial runs to resume"
echo "then: python3 launch/study_protocol.py --stage report --out $record --runs-dir /nonexistent"
echo "      git add $record && git commit -m 'docs/results/protocol: a GPU session landed'"
