#!/usr/bin/env bash
# Several protocol windows (launch/protocol_window.sh) side by side on one lent machine, and
# what they leave packed into what such a machine sends back: at most 8 files of 16 MiB each,
# 64 MiB together (the device tool's README).
#
#   WINDOW_S=480 bash launch/protocol_session.sh OUT \
#     'AS DATASETS=scaled_digits FAMILIES=scale_iiws_disco,scale_pool_disco SIZE_GROUPS=0' \
#     'D DATASETS=scaled_digits FAMILIES=scale_iimono_disco,scale_iiws_mnet_disco SIZE_GROUPS=300'
#
# - Each argument is a window: its name (letters, digits, '_'), then its protocol_window.sh
#   settings as NAME=value words (a value holds no space: separate RERUN's paths by commas). The
#   protocol trains its datasets one after the other, so give each dataset a window of its
#   own when they should train side by side.
# - Each window has its own run directory, SESSION_ROOT/r<name> (default /tmp/r<name>), kept on
#   the machine: the same command again on the same warm machine resumes every window. Each
#   has its own copy of the record (RECORD, default docs/results/protocol) at SESSION_ROOT/p<name>.
# - OUT gets three kinds of file, four where a window retrains RERUN runs:
#   landed.tgz: the runs that landed in any window (runs/..., unpack into the record and
#     commit: tar xzf OUT/landed.tgz -C docs/results/protocol --skip-old-files);
#   rerun.tgz (only if a window's RERUN runs trained again and finished): their small results,
#     runs/... as the record holds them, which the record keeps its own of unless replaced on
#     purpose (tar xzf OUT/rerun.tgz -C docs/results/protocol overwrites);
#   logs.tgz: every window's logs;
#   partial.tar (or partial.tar.aa, .ab, ... in pieces of 15 MiB when larger): per window
#     <name>/protocol_partial.tgz, the unfinished runs' latest checkpoints and those that
#     PACK_FINISHED named (cat partial.tar* | tar x, then unpack each into its run directory).
#   launch/protocol_land.sh OUT RUNS [--replace] lands all of them on the machine that goes on.
set -uo pipefail
out=${1:?usage: bash launch/protocol_session.sh OUT 'NAME SETTING=value ...' ...}
shift
[ $# -gt 0 ] || { echo "protocol_session: name at least one window" >&2 && exit 2; }
for spec in "$@"; do  # every window checked before any starts
  read -ra words <<<"$spec"
  [[ "${words[0]:-}" =~ ^[A-Za-z0-9_]+$ ]] ||
    { echo "protocol_session: window '$spec': its first word must be a name (letters, digits, _)" >&2 && exit 2; }
  for w in "${words[@]:1}"; do
    [[ "$w" =~ ^[A-Z_]+= ]] ||
      { echo "protocol_session: window ${words[0]}: '$w' is not a NAME=value setting" >&2 && exit 2; }
  done
done
mkdir -p "$out" && out=$(cd "$out" && pwd)  # OUT relative to where it was called
cd "$(dirname "$0")/.."  # RECORD relative to the repository
root=${SESSION_ROOT:-/tmp}
record=${RECORD:-docs/results/protocol}
work=$(mktemp -d)
names=()
for spec in "$@"; do
  read -ra words <<<"$spec"
  name=${words[0]}
  names+=("$name")
  [ -d "$root/p$name" ] || cp -r "$record" "$root/p$name"
  env RUNS="$root/r$name" PROTOCOL_OUT="$root/p$name" "${words[@]:1}" \
    bash launch/protocol_window.sh "$work/$name" >"$work/$name.out" 2>&1 &
done
wait
mkdir -p "$work/landed" "$work/partial" "$work/rerun"
for name in "${names[@]}"; do
  tar xzf "$work/$name/protocol_runs.tgz" -C "$work/landed" 2>/dev/null
  if [ -f "$work/$name/protocol_rerun.tgz" ]; then
    tar xzf "$work/$name/protocol_rerun.tgz" -C "$work/rerun" && rm "$work/$name/protocol_rerun.tgz"
  fi
  if [ -f "$work/$name/protocol_partial.tgz" ]; then
    mkdir -p "$work/partial/$name" && mv "$work/$name/protocol_partial.tgz" "$work/partial/$name/"
  fi
  rm -f "$work/$name/protocol_runs.tgz"
done
(cd "$work/landed" && find . -type f | sort) >"$work/landed.list"
tar czf "$out/landed.tgz" -C "$work/landed" -T "$work/landed.list"
[ -d "$work/rerun/runs" ] && tar czf "$out/rerun.tgz" -C "$work/rerun" runs
tar czf "$out/logs.tgz" -C "$work" "${names[@]}" "${names[@]/%/.out}"
tar cf "$out/partial.tar" -C "$work/partial" .
if [ "$(stat -c %s "$out/partial.tar")" -gt $((15 * 1024 * 1024)) ]; then
  split -b 15m "$out/partial.tar" "$out/partial.tar." && rm "$out/partial.tar"
fi
echo "protocol_session: $(grep -c 'results.json$' "$work/landed.list") results.json landed"
rm -rf "$work"
echo "protocol_session: $(ls "$out" | wc -l) files in $out ($(du -sh "$out" | cut -f1)):"
ls -l "$out"
