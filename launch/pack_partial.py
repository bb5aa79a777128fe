"""Pack a run directory's *unfinished* runs so that they resume on another machine.

    python launch/pack_partial.py RUNS_DIR ARCHIVE.tgz [--finished GLOB ...]

For each run without ``results.json`` (finished runs are skipped: their small results are
copied elsewhere, launch/study_protocol.py's ``sync``): its files, but of its checkpoints only
the latest step (and that step's manifest), and no TensorBoard events, compilation cache or
runs that ``--rerun`` moved aside (``replaced/``), so that the archive stays small. Unpacked into the same run directory elsewhere
(``tar xzf ARCHIVE.tgz -C RUNS_DIR``), the same protocol command resumes those runs.

``--finished GLOB`` (repeatable): the finished runs whose path relative to RUNS_DIR matches GLOB
(``fnmatch``) are packed the same way, for their final checkpoint. A two-phase network's phase 2
on the other machine then reuses such a run as its phase 1
(``invjax.training.plan.finished_results`` needs the checkpoint of the run's last step), e.g.
``--finished '*/scale_iiws_disco/*'``.
"""

from __future__ import annotations

import fnmatch
import os
import re
import sys
import tarfile

SKIP_DIRS = ("xla_cache", "tensorboard", "replaced")  # replaced: what --rerun moved aside


def _steps(checkpoints: str) -> list[int]:
    if not os.path.isdir(checkpoints):
        return []
    return sorted(int(d) for d in os.listdir(checkpoints) if d.isdigit())


def partial_files(runs: str, finished: tuple[str, ...] = ()) -> list[str]:
    """The paths (relative to ``runs``) that the archive holds: every unfinished run's, and those
    of the finished runs whose relative path matches a glob of ``finished``."""
    out = []
    for root, dirs, files in os.walk(runs):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS)
        rel = os.path.relpath(root, runs)
        if "results.json" in files and not any(fnmatch.fnmatch(rel, g) for g in finished):
            dirs[:] = []
            continue
        if os.path.basename(root) == "checkpoints":
            steps = _steps(root)
            dirs[:] = [d for d in dirs if not d.isdigit() or int(d) == steps[-1]]
        last = None
        if os.path.basename(root) == "checkpoint_manifests":
            steps = _steps(os.path.join(os.path.dirname(root), "checkpoints"))
            last = steps[-1] if steps else None
        for f in sorted(files):
            m = re.fullmatch(r"(\d+)\.json", f)
            if last is not None and m and int(m[1]) != last:
                continue
            out.append(os.path.relpath(os.path.join(root, f), runs))
    return out


def main(argv: list[str]) -> int:
    args, finished = list(argv), []
    while "--finished" in args:
        i = args.index("--finished")
        if i + 1 == len(args):
            print(
                "--finished needs a GLOB, e.g. --finished '*/scale_iiws_disco/*'", file=sys.stderr
            )
            return 2
        finished.append(args.pop(i + 1))
        args.pop(i)
    if len(args) != 2:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    runs, dest = args
    files = partial_files(runs, tuple(finished))
    with tarfile.open(dest, "w:gz") as tar:
        for f in files:
            tar.add(os.path.join(runs, f), arcname=f)
    which = f" (and the finished runs matching {' '.join(finished)})" if finished else ""
    print(f"{dest}: {len(files)} files of the unfinished runs{which} in {runs}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
