"""Export a finished run: ``python -m invjax.export --workdir=RUN --out=DIR``.

Writes ``DIR/model.npz`` (the serialised program: raw images in, logits out) and
``DIR/manifest.json`` (its contract and guarantees; :mod:`invjax.export.artifact`). Prints what
was exported and the exported program's own test error beside the run's. Bad input (no such
run, an unfinished run, an ``--out`` that is empty, exists and is not an empty directory, is a
mount point, or cannot be created) is one message, exit status 2, before anything is computed;
a write that fails afterwards (a full disk) is one message, exit status 1, and leaves nothing.
"""

from __future__ import annotations

import argparse
import os
import sys


class _OneLineParser(argparse.ArgumentParser):
    """Usage errors as the one ``invjax.export: error: ...`` line (exit 2), not argparse's usage
    block."""

    def error(self, message):
        print(f"invjax.export: error: {message} (see --help)", file=sys.stderr)
        sys.exit(2)


def _outside_the_run(workdir: str, out: str) -> None:
    """``--out`` inside the run's checkpoint folders would become a checkpoint step (or a
    manifest's or a set-aside step's neighbour) of the run it exports: ValueError."""
    from invjax import run

    if not out or not out.strip() or "\0" in out:
        return  # artifact.check_destination names these
    target = os.path.realpath(out)
    for sub in (run.CHECKPOINTS_DIR, run.MANIFESTS_DIR, run.CORRUPT_DIR):
        held = os.path.realpath(os.path.join(workdir, sub))
        if os.path.commonpath([target, held]) == held:
            raise ValueError(
                f"--out={out} is inside the run's {sub}/ folder ({held}), which holds only what "
                "the run's checkpoints are: give a directory outside it, e.g. "
                f"--out={os.path.join(workdir, 'export')}"
            )


def main(argv=None) -> int:
    p = _OneLineParser(
        prog="python -m invjax.export",
        description=__doc__.split("\n")[0],
        epilog="Load it with invjax.export.load(DIR): a callable from raw images to logits.",
    )
    p.add_argument("--workdir", required=True, help="the run's directory (python -m invjax.main)")
    p.add_argument("--out", required=True, help="a new directory for the export")
    p.add_argument(
        "--platforms",
        default=None,
        help="comma list of jax.export platforms to lower for, e.g. cpu,cuda (default: this "
        "machine's backend)",
    )
    args = p.parse_args(argv)
    from invjax.export import artifact

    platforms = tuple(s.strip() for s in args.platforms.split(",")) if args.platforms else None
    try:
        _outside_the_run(args.workdir, args.out)
        artifact.check_destination(args.out)  # before the run is read or the model traced
        m = artifact.export_run(args.workdir, args.out, platforms)
    except ValueError as e:  # CheckpointError and DatasetNotPreparedError too
        print(f"invjax.export: error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(
            f"invjax.export: error: the export to {args.out} failed ({e}); nothing was written "
            "there: fix the problem (a full disk?) and run the same command again",
            file=sys.stderr,
        )
        return 1
    src, inp, err, inv = m["source"], m["input"], m["test_error"], m["invariance"]
    print(
        f"exported {src['workdir']} (step {src['step']}, {src['selected_by']}: epoch "
        f"{src['model_epoch']}'s model) to {args.out}"
    )
    print(
        f"input {inp['dtype']} {inp['shape']} in {inp['range']} (normalised inside the program); "
        f"{len(m['output']['classes'])} classes; precision {m['precision']['name']}"
    )
    print(
        f"test error of the export {err['export']:.2f}% on {err['n_test']} raw test images "
        f"(the run: {err['run']:.2f}%{'' if err['identical'] else ', DIFFERENT'})"
    )
    if inv["exact_elements"]:
        worst = max(inv["max_relative_error"].values())
        print(
            f"exact invariance to {', '.join(inv['exact_elements'])}: max relative change "
            f"{worst:.2g} (bound {inv['bound']:g}: {'holds' if inv['holds'] else 'FAILS'})"
        )
    else:
        print("no exact invariance guaranteed by this architecture")
    return 0 if err["identical"] else 1


if __name__ == "__main__":
    sys.exit(main())
