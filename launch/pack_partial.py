"""Pack a run directory's *unfinished* runs so that they resume on another machine.

    python launch/pack_partial.py RUNS_DIR ARCHIVE.tgz

For each run without ``results.json`` (finished runs are skipped: their small results are
copied elsewhere, launch/study_protocol.py's ``sync``): its files, but of its checkpoints only
the latest step (and that step's manifest), and no TensorBoard events or compilation cache, so
that the archive stays small. Unpacked into the same run directory elsewhere
(``tar xzf ARCHIVE.tgz -C RUNS_DIR``), the same protocol command resumes those runs.
"""

from __future__ import annotations

import os
import re
import sys
import tarfile

SKIP_DIRS = ("xla_cache", "tensorboard")


def _steps(checkpoints: str) -> list[int]:
    if not os.path.isdir(checkpoints):
        return []
    return sorted(int(d) for d in os.listdir(checkpoints) if d.isdigit())


def partial_files(runs: str) -> list[str]:
    """The paths (relative to ``runs``) that the archive holds."""
    out = []
    for root, dirs, files in os.walk(runs):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS)
        if "results.json" in files:  # finished
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
    if len(argv) != 2:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    runs, dest = argv
    files = partial_files(runs)
    with tarfile.open(dest, "w:gz") as tar:
        for f in files:
            tar.add(os.path.join(runs, f), arcname=f)
    print(f"{dest}: {len(files)} files of the unfinished runs in {runs}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
