"""The DISCO (PyTorch) side of ``benchmarks/peers/disco_bench.py``; runs in the peer's own venv.

    VENV/bin/python benchmarks/peers/disco_side.py --disco DIR   # then one JSON request per line

A small server, as ``e2cnn_side.py``: each stdin line is a JSON request ``{"op": ..., ...}``, each
answer one JSON line on stdout (anything torch prints goes to stderr), so that the driver can
alternate single repetitions of both frameworks. ``--disco DIR`` is a checkout of DISCO's own code
(github.com/ISosnovik/disco; its ``models`` package and ``precalculated_basis/``). This file
imports neither jax nor invjax, and nothing of DISCO's is copied: its modules are imported from
``DIR`` and used as they are.

Operations: ``info``; ``build`` (one case: a layer or the whole network, kept for the next ops;
answers the parameter count and the construction time); ``fwd_bwd`` (one timed forward+backward
of the kept case on a batch made at build time).

Cases, as DISCO's Scaled-MNIST network builds them (``models/mnist_disco_models.py``:
``mnist_disco(basis_min_scale=1.9, basis_save_dir, basis_mult=1.9)``, the values of its
``exp_mnist.sh``; the ``disco_b`` basis, kernel 15, effective size 7, scales ``2^(i/3)``,
``i < 4``, rounded to 2 decimals as DISCO does):

- ``lift``: ``SESConv_Z2_H(1, 32)`` on 56 x 56 (the upsampled 28 x 28 digit); gradient of
  ``sum(y^2)`` with respect to the parameters (the input is an image).
- ``conv2`` / ``conv3``: ``SESConv_H_H(32, 63, 1)`` on 28 x 28, ``SESConv_H_H(63, 95, 1)`` on
  14 x 14; gradient of ``sum(y^2)`` with respect to the parameters and the input (inside the
  network both are needed).
- ``net``: ``mnist_disco(...)`` itself in train mode (dropout, batch statistics); gradient of the
  cross-entropy of fixed random labels with respect to the parameters.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback

SCALES_4 = [2 ** (i / 3) for i in range(4)]
# exp_mnist.sh: train_scale_mnist "mnist_disco" 0.5 "./precalculated_basis" 1.9 1.9 0 0 0
BASIS_MIN_SCALE, BASIS_MULT, BASIS_MAX_ORDER = 1.9, 1.9, 4
KERNEL, EFFECTIVE = 15, 7
LAYERS = {  # name: (kind, in channels, out channels, map size)
    "lift": ("z2_h", 1, 32, 56),
    "conv2": ("h_h", 32, 63, 28),
    "conv3": ("h_h", 63, 95, 14),
}


class Peer:
    def __init__(self, disco_dir: str, threads: int):
        import torch

        torch.set_num_threads(threads)
        self.torch = torch
        self.dir = os.path.abspath(disco_dir)
        self.basis_dir = os.path.join(self.dir, "precalculated_basis")
        sys.path.insert(0, self.dir)
        import models  # DISCO's own package

        self.models = models
        from models import ses_conv

        self.ses_conv = ses_conv
        self.case = None

    def info(self, req):
        torch = self.torch
        return {
            "torch": torch.__version__,
            "threads": torch.get_num_threads(),
            "disco_dir": self.dir,
            "basis_files": sorted(os.listdir(self.basis_dir)),
        }

    def _basis_kwargs(self):
        scales = [round(s, 2) for s in SCALES_4]  # as mnist_disco
        return dict(
            scales=scales,
            padding=KERNEL // 2,
            bias=True,
            basis_type="disco_b",
            basis_save_dir=self.basis_dir,
            basis_mult=BASIS_MULT,
            basis_max_order=BASIS_MAX_ORDER,
            basis_min_scale=BASIS_MIN_SCALE,
        )

    def build(self, req):
        torch = self.torch
        torch.manual_seed(int(req.get("seed", 0)))
        name, batch = req["case"], int(req["batch"])
        t = time.perf_counter()
        if name == "net":
            module = self.models.mnist_disco(
                basis_min_scale=BASIS_MIN_SCALE,
                basis_save_dir=self.basis_dir,
                basis_mult=BASIS_MULT,
            )
            module.train()
            x = torch.randn(batch, 1, 28, 28)
            labels = torch.randint(0, 10, (batch,))

            def loss():
                return torch.nn.functional.cross_entropy(module(x), labels)

        else:
            kind, cin, cout, size = LAYERS[name]
            kw = self._basis_kwargs()
            if kind == "z2_h":
                module = self.ses_conv.SESConv_Z2_H(cin, cout, KERNEL, EFFECTIVE, **kw)
                x = torch.randn(batch, cin, size, size)
            else:
                module = self.ses_conv.SESConv_H_H(cin, cout, 1, KERNEL, EFFECTIVE, **kw)
                x = torch.randn(batch, cin, len(SCALES_4), size, size, requires_grad=True)

            def loss():
                return torch.sum(module(x) ** 2)

        build_s = time.perf_counter() - t
        self.case = (module, x, loss)
        params = sum(p.numel() for p in module.parameters() if p.requires_grad)
        return {"params": int(params), "build_s": build_s, "input_shape": list(x.shape)}

    def fwd_bwd(self, req):
        module, x, loss = self.case
        t = time.perf_counter()
        module.zero_grad(set_to_none=True)
        x.grad = None
        loss().backward()
        return {"seconds": time.perf_counter() - t}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--disco", required=True, help="a checkout of github.com/ISosnovik/disco")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    args = ap.parse_args()
    # Answers go to the real stdout; everything else printed (torch, DISCO) to stderr.
    out = os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1)
    sys.stdout = sys.stderr
    try:
        peer = Peer(args.disco, args.threads)
    except Exception as e:  # noqa: BLE001 (reported to the driver, which prints it)
        traceback.print_exc()
        peer, startup_error = None, f"{type(e).__name__}: {e}"
    for line in sys.stdin:
        req = json.loads(line)
        try:
            if peer is None:
                raise RuntimeError(f"DISCO did not load: {startup_error}")
            ans = {"ok": True, **getattr(peer, req["op"])(req)}
        except Exception as e:  # noqa: BLE001
            traceback.print_exc()
            ans = {"ok": False, "error": f"{type(e).__name__}: {e}"}
        out.write(json.dumps(ans) + "\n")


if __name__ == "__main__":
    main()
