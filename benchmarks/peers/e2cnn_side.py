"""The e2cnn (PyTorch) side of ``benchmarks/peers/e2cnn_bench.py``; runs in the peer's own venv.

    .venv-peers/bin/python benchmarks/peers/e2cnn_side.py   # then one JSON request per stdin line

A small server: each stdin line is a JSON request ``{"op": ..., ...}``, each answer one JSON line
on stdout (anything e2cnn or torch prints goes to stderr), so that the driver can alternate single
repetitions of both frameworks. Arrays travel as ``.npy`` files whose paths are in the messages.
This file imports neither jax nor invjax (the peer's venv has neither).

Operations: ``info``; ``build_layer`` / ``build_wrn`` (construction time, parameter and basis
counts; the module is kept for the next ops); ``fwd_bwd`` (one timed forward+backward of the kept
module on a batch of random images); ``piece`` (the same for the basis expansion or the
convolution of a kept layer alone); ``equivariance`` (a lifting conv followed by the D8 group
conv, evaluated on the photos in a ``.npy`` file; outputs written back as NHWC ``.npy``).

The E(2)-WRN16-4 is re-created here from the facts of e2cnn_experiments' ``Wide_ResNet(16, 4,
0.3, N=8, r=-1, f=True)`` (experiments/models/e2_wide_resnet.py, utils.py; read, not copied):
widths ``[16, 16k, 32k, 64k]``; regular fields ``int(planes / |G| * sqrt(|G|))``; a 5x5 lifting
conv to 4 fields; per stage 2 pre-activation blocks (InnerBatchNorm, ReLU, 5x5 conv, InnerBatchNorm,
ReLU, dropout, 5x5 conv with the stage's stride, 1x1 shortcut when stride or type change), the
last block mapping to ``int(64k * sqrt(|G|))`` trivial channels; InnerBatchNorm, ReLU, global
average pooling, a linear layer; every R2Conv with ``sigma=0.45, frequencies_cutoff=F * pi``
(F = 1) and delta-orthogonal initialisation, no bias.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
import traceback
import warnings


class _ModuleProxy:
    """A module seen through ``overrides`` (name -> object); every other name passes through."""

    def __init__(self, module, **overrides):
        self._module, self._overrides = module, overrides

    def __getattr__(self, name):
        return self._overrides[name] if name in self._overrides else getattr(self._module, name)


def _patch_uint8_masks() -> list[str]:
    """Make e2cnn 0.2.3 build whole networks on current PyTorch; returns what was patched.

    ``SingleBlockBasisExpansion.__init__`` (e2cnn/nn/modules/r2_conv/basisexpansion_singleblock.py)
    builds its basis mask as ``numpy.uint8`` -> ``torch.uint8`` (written for PyTorch < 1.2, which
    had no bool tensors) and assigns through it: ``full_mask[mask] = norms.to(torch.uint8)``.
    PyTorch deprecated uint8 masks in 1.2 and now rejects the assignment when it becomes a
    ``masked_fill_`` (``masked_fill_ only supports boolean masks, but got mask with dtype unsigned
    char``): some basis blocks of a whole network (the E(2)-WRN) fail, single 5x5 layers do not.
    The mask is only used as a mask (nothing reads its values), so that module sees ``bool``
    wherever it names ``uint8``: the same numbers, no copied code.
    """
    import numpy as np
    import torch
    from e2cnn.nn.modules.r2_conv import basisexpansion_singleblock as sb

    if not isinstance(sb.np, _ModuleProxy):
        sb.np = _ModuleProxy(sb.np, uint8=np.bool_)
        sb.torch = _ModuleProxy(torch, uint8=torch.bool)
    return ["e2cnn basisexpansion_singleblock: uint8 basis masks -> bool"]


def _patch_numpy2() -> list[str]:
    """Let e2cnn 0.2.3 run on NumPy 2 (a GPU image's torch and scipy need NumPy 2, so ``numpy<2``
    cannot be installed beside them); returns what was patched, nothing under NumPy 1.

    e2cnn uses three things NumPy 2 removed or changed, each given back its NumPy 1 meaning:
    ``np.float`` (o2group.py; the alias of the builtin ``float``); ``ndarray.tostring`` (the
    ``__hash__`` of four kernel-basis classes in kernels/irreps_basis.py, which hash the bytes of
    their ``mu`` / ``gamma`` arrays; ``tobytes`` returns the same bytes); and
    ``np.array(x, copy=False)`` in kernels/utils.py, which NumPy 1 read as "copy if needed" and
    NumPy 2 as "never copy" (an error for the lists and scalars passed there; NumPy 2 spells the
    old meaning ``copy=None``).
    """
    import numpy as np

    if int(np.__version__.split(".")[0]) < 2:
        return []
    np.float = float  # noqa: NPY001 (the removed alias, given back; no other name touched)
    from e2cnn.kernels import irreps_basis as ib
    from e2cnn.kernels import utils as ku

    def as_bytes(a):
        return a.tobytes() if isinstance(a, np.ndarray) else a

    def basis_hash(self):
        return (
            hash(self.in_irrep)
            + hash(self.out_irrep)
            + hash(as_bytes(self.mu))
            + hash(as_bytes(self.gamma))
        )

    names = (
        "R2FlipsSolution",
        "R2ContinuousRotationsSolution",
        "R2FlipsDiscreteRotationsSolution",
        "R2FlipsContinuousRotationsSolution",
    )
    for name in names:
        getattr(ib, name).__hash__ = basis_hash

    def array(obj, *args, copy=True, **kwargs):
        return np.array(obj, *args, copy=None if copy is False else copy, **kwargs)

    if not isinstance(ku.np, _ModuleProxy):
        ku.np = _ModuleProxy(ku.np, array=array)
    return [
        "NumPy 2: np.float -> float",
        f"NumPy 2: {', '.join(names)}.__hash__ with tobytes() for tostring()",
        "NumPy 2: kernels/utils np.array(copy=False) -> copy=None",
    ]


class Peer:
    def __init__(self, patch: bool):
        import numpy as np
        import torch

        self.np, self.torch = np, torch
        self.patched = _patch_numpy2() + _patch_uint8_masks() if patch else []
        from e2cnn import gspaces
        from e2cnn import nn as enn

        self.gspaces, self.enn = gspaces, enn
        self.module = None
        self.x = None

    # -- operations ----------------------------------------------------------------------------

    def info(self, req):
        import e2cnn

        return {
            "torch": self.torch.__version__,
            "numpy": self.np.__version__,
            "e2cnn": getattr(e2cnn, "__version__", "0.2.3"),
            "python": sys.version.split()[0],
            "threads": self.torch.get_num_threads(),
            "cuda": self.torch.cuda.is_available(),
            "patched": self.patched,
        }

    def _device(self, req):
        return "cuda" if req.get("gpu") and self.torch.cuda.is_available() else "cpu"

    def _conv(self, fin, fout, k, stride=1, basis="default"):
        kw = {}
        if basis == "experiments":  # e2cnn_experiments' --F=1. --sigma=0.45
            kw = {"sigma": 0.45, "frequencies_cutoff": 1.0 * math.pi}
        elif basis != "default":
            raise ValueError(f"basis={basis!r}: choose default or experiments")
        return self.enn.R2Conv(
            fin, fout, k, padding=(k - 1) // 2, stride=stride, bias=False, initialize=False, **kw
        )

    def _basis_per_pair(self, conv):
        """Basis coefficients per (input field, output field) pair of an R2Conv."""
        return conv.basisexpansion.dimension() / (len(conv.in_type) * len(conv.out_type))

    def _clear_cache(self, req):
        """Forget e2cnn's sampled bases (its module-level cache), for a construction from scratch."""
        if req.get("clear_cache"):
            from e2cnn.nn.modules.r2_conv import basisexpansion_singleblock as sb

            sb._stored_filters.clear()

    def build_layer(self, req):
        enn, gs = self.enn, self.gspaces.FlipRot2dOnR2(8)
        torch = self.torch
        self._clear_cache(req)
        torch.manual_seed(req.get("seed", 0))
        t = time.perf_counter()
        ft = enn.FieldType(gs, req["fields"] * [gs.regular_repr])
        conv = self._conv(ft, ft, req["kernel"], basis=req.get("basis", "default"))
        enn.init.generalized_he_init(conv.weights.data, conv.basisexpansion)
        seconds = time.perf_counter() - t
        self.module = conv.to(self._device(req))
        self.input_type = ft
        self._filter = None
        return {
            "seconds": seconds,
            "params": sum(p.numel() for p in conv.parameters()),
            "basis_per_field_pair": self._basis_per_pair(conv),
        }

    def build_wrn(self, req):
        torch = self.torch
        self._clear_cache(req)
        torch.manual_seed(req.get("seed", 0))
        t = time.perf_counter()
        net = WideResNetE2(
            self, depth=16, widen=4, dropout=0.3, num_classes=10, basis="experiments"
        )
        seconds = time.perf_counter() - t
        self.module = net.to(self._device(req))
        self.input_type = None
        per_pair = sorted(
            {
                (m.kernel_size, self._basis_per_pair(m))
                for m in net.modules()
                if isinstance(m, self.enn.R2Conv)
                and m.in_type.representations[0].name == "regular"
                and m.out_type.representations[0].name == "regular"
            }
        )
        return {
            "seconds": seconds,
            "params": sum(p.numel() for p in net.parameters() if p.requires_grad),
            "basis_per_field_pair": [[k, b] for k, b in per_pair],
        }

    def fwd_bwd(self, req):
        """One forward+backward of the kept module on a fixed random batch (built on first call)."""
        torch = self.torch
        dev = self._device(req)
        shape = tuple(req["shape"])  # NCHW
        if self.x is None or tuple(self.x.shape) != shape:
            g = torch.Generator().manual_seed(0)
            self.x = torch.randn(*shape, generator=g).to(dev)
        self.module.train()
        self.module.zero_grad(set_to_none=True)
        if dev == "cuda":
            torch.cuda.synchronize()
        t = time.perf_counter()
        x = self.x
        if self.input_type is not None:
            x = self.enn.GeometricTensor(x, self.input_type)
        y = self.module(x)
        y = y.tensor if hasattr(y, "tensor") else y
        (y**2).sum().backward()
        if dev == "cuda":
            torch.cuda.synchronize()
        return {"seconds": time.perf_counter() - t}

    def piece(self, req):
        """One timed forward+backward of a piece of the kept layer (``build_layer`` first), on the
        batch of ``fwd_bwd``: ``expand``, the basis expansion alone (R2Conv's ``basisexpansion``,
        run in training mode on every step, then the gradient of ``sum(filter^2)``); ``conv``,
        the convolution alone (``torch.nn.functional.conv2d`` with the expanded filter as a
        fixed leaf tensor: forward, then the filter's gradient of ``sum(y^2)``); ``conv_fwd``, its
        forward alone (no gradient)."""
        torch = self.torch
        dev = self._device(req)
        conv = self.module
        if req["piece"] in ("conv", "conv_fwd") and getattr(self, "_filter", None) is None:
            with torch.no_grad():
                k = conv.kernel_size
                f = conv.basisexpansion(conv.weights)
                f = f.reshape(f.shape[0], f.shape[1], k, k).contiguous()
            self._filter = f.requires_grad_(True)
        shape = tuple(req["shape"])
        if self.x is None or tuple(self.x.shape) != shape:
            g = torch.Generator().manual_seed(0)
            self.x = torch.randn(*shape, generator=g).to(dev)
        conv.train()
        conv.zero_grad(set_to_none=True)
        if dev == "cuda":
            torch.cuda.synchronize()
        t = time.perf_counter()
        if req["piece"] == "expand":
            (conv.basisexpansion(conv.weights) ** 2).sum().backward()
        elif req["piece"] == "conv_fwd":
            with torch.no_grad():
                torch.nn.functional.conv2d(self.x, self._filter, padding=conv.padding)
        elif req["piece"] == "conv":
            self._filter.grad = None
            y = torch.nn.functional.conv2d(self.x, self._filter, padding=conv.padding)
            (y**2).sum().backward()
        else:
            raise ValueError(f"piece={req['piece']!r}: choose expand, conv_fwd or conv")
        if dev == "cuda":
            torch.cuda.synchronize()
        return {"seconds": time.perf_counter() - t}

    def equivariance(self, req):
        """Lift (trivial -> regular) then group conv; outputs of every photo as NHWC ``.npy``.

        Also returns the 16 x 16 regular-representation matrices of every D8 element (e2cnn's
        labels ``(flip, rotation)``), so that the driver permutes channels by e2cnn's own action.
        """
        np, torch, enn = self.np, self.torch, self.enn
        gs = self.gspaces.FlipRot2dOnR2(8)
        torch.manual_seed(req.get("seed", 0))
        basis = req.get("basis", "default")
        trivial = enn.FieldType(gs, [gs.trivial_repr])
        reg = enn.FieldType(gs, req["fields"] * [gs.regular_repr])
        lift = self._conv(trivial, reg, req["kernel"], basis=basis)
        conv = self._conv(reg, reg, req["kernel"], basis=basis)
        for m in (lift, conv):
            enn.init.generalized_he_init(m.weights.data, m.basisexpansion)
        # e2cnn shares basis-expansion modules between equal layers, so an earlier layer moved
        # to the GPU takes these along: run on the same device as every other part.
        dev = self._device(req)
        lift, conv = lift.to(dev).eval(), conv.to(dev).eval()
        x = np.load(req["images"])  # [N, H, W, 1]
        # Exact float32 (cuDNN and cuBLAS TF32 off; the driver measures invjax at 'highest'),
        # so that the 90-degree row checks exactness on a GPU as it does on a CPU.
        tf32 = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
        torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
        try:
            with torch.no_grad():
                xt = enn.GeometricTensor(
                    torch.from_numpy(x).permute(0, 3, 1, 2).float().to(dev), trivial
                )
                y1 = lift(xt)
                y2 = conv(y1)
        finally:
            torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = tf32
        for name, y in (("lift", y1), ("conv", y2)):
            np.save(req["out_prefix"] + name + ".npy", y.tensor.permute(0, 2, 3, 1).cpu().numpy())
        elements = list(gs.fibergroup.elements)
        mats = np.stack([gs.regular_repr(e) for e in elements]).astype(np.float64)
        np.save(req["out_prefix"] + "rep.npy", mats)
        return {
            "elements": [list(map(int, e)) for e in elements],
            "basis_per_field_pair": self._basis_per_pair(conv),
            "lift_basis_per_field": lift.basisexpansion.dimension() / len(reg),
        }


def WideResNetE2(peer, depth, widen, dropout, num_classes, basis):  # noqa: N802 (a class factory)
    """e2cnn_experiments' E(2)-WRN (D8 everywhere, r=-1, fixparams), written in e2cnn's API."""
    torch, enn = peer.torch, peer.enn
    gs = peer.gspaces.FlipRot2dOnR2(8)
    order = gs.fibergroup.order()

    def regular(planes):
        return enn.FieldType(gs, int(planes / order * math.sqrt(order)) * [gs.regular_repr])

    def trivial(planes):
        return enn.FieldType(gs, int(planes * math.sqrt(order)) * [gs.trivial_repr])

    class Block(enn.EquivariantModule):
        def __init__(self, fin, inner, fout, stride):
            super().__init__()
            self.in_type, self.out_type = fin, fout
            self.bn1 = enn.InnerBatchNorm(fin)
            self.relu1 = enn.ReLU(fin, inplace=True)
            self.conv1 = peer._conv(fin, inner, 5, basis=basis)
            self.bn2 = enn.InnerBatchNorm(inner)
            self.relu2 = enn.ReLU(inner, inplace=True)
            self.drop = enn.PointwiseDropout(inner, p=dropout)
            self.conv2 = peer._conv(inner, fout, 5, stride=stride, basis=basis)
            self.shortcut = None
            if stride != 1 or fin != fout:
                self.shortcut = peer._conv(fin, fout, 1, stride=stride, basis=basis)

        def forward(self, x):
            h = self.relu1(self.bn1(x))
            out = self.conv2(self.drop(self.relu2(self.bn2(self.conv1(h)))))
            return out + (self.shortcut(h) if self.shortcut is not None else x)

        def evaluate_output_shape(self, input_shape):
            raise NotImplementedError

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            n = (depth - 4) // 6
            planes = [16, 16 * widen, 32 * widen, 64 * widen]
            self.in_type = enn.FieldType(gs, 3 * [gs.trivial_repr])
            cur = regular(planes[0])
            self.stem = peer._conv(self.in_type, cur, 5, basis=basis)
            blocks = []
            for stage, stride in zip((1, 2, 3), (1, 2, 2)):
                main = regular(planes[stage])
                for b in range(n):
                    last = stage == 3 and b == n - 1
                    out = trivial(planes[stage]) if last else main
                    blocks.append(Block(cur, main, out, stride if b == 0 else 1))
                    cur = out
            self.blocks = enn.SequentialModule(*blocks)
            self.bn = enn.InnerBatchNorm(cur, momentum=0.9)
            self.relu = enn.ReLU(cur, inplace=True)
            self.linear = torch.nn.Linear(cur.size, num_classes)
            for m in self.modules():
                if isinstance(m, enn.R2Conv):
                    enn.init.deltaorthonormal_init(m.weights.data, m.basisexpansion)
                elif isinstance(m, torch.nn.Linear):
                    m.bias.data.zero_()

        def forward(self, x):
            x = enn.GeometricTensor(x, self.in_type)
            y = self.relu(self.bn(self.blocks(self.stem(x)))).tensor
            return self.linear(y.mean(dim=(2, 3)))

    return Net()


def main():
    patch = "--no-patch" not in sys.argv
    # Answers go to the real stdout; everything else printed (e2cnn, torch) to stderr.
    out = os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1)
    sys.stdout = sys.stderr
    warnings.simplefilter("ignore")
    if "--threads" in sys.argv:
        import torch

        torch.set_num_threads(int(sys.argv[sys.argv.index("--threads") + 1]))
    peer = Peer(patch)
    for line in sys.stdin:
        if not line.strip():
            continue
        req = json.loads(line)
        try:
            ans = {"ok": True, **getattr(peer, req["op"])(req)}
        except Exception as e:  # the driver reports what failed and goes on with the rest
            traceback.print_exc()
            ans = {"ok": False, "error": f"{type(e).__name__}: {e}"}
        out.write(json.dumps(ans) + "\n")


if __name__ == "__main__":
    main()
