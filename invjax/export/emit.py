"""Emit a model's eval-mode forward pass as a plain graph (bases expanded, nothing fused yet).

One emitter per model class mirrors its ``__call__`` in eval mode (BatchNorm with running
statistics, no dropout) and reads the variables by the same module names. Steerable filters are
expanded with the models' own functions (:mod:`invjax.ops.e2`, :mod:`invjax.ops.scale`), the
stride-2 box of :func:`invjax.ops.conv.conv2d` is folded into the kernel, BatchNorms become
``affine`` ops and the II layers their closed forms (a weight map = a dense layer on the
flattened map). :mod:`invjax.export.passes` then fuses. The tests compare every emitter with the
model it mirrors.
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import numpy as np

from invjax import groups as G
from invjax.export.graph import Graph
from invjax.ops import ii as ii_ops

BN_EPSILON = 1e-5  # every BatchNorm of the models (Flax's default, the WRN's BN_EPSILON)


def _np(a) -> np.ndarray:
    return np.asarray(a, np.float64)


def fold_box(kernel: np.ndarray) -> np.ndarray:
    """``[k, k, I, O] -> [k+1, k+1, I, O]``: the 2x2 box of :func:`invjax.ops.conv.fold_box`."""
    p = np.pad(kernel, ((1, 1), (1, 1), (0, 0), (0, 0)))
    return 0.25 * (p[1:, 1:] + p[:-1, 1:] + p[1:, :-1] + p[:-1, :-1])


@dataclasses.dataclass
class Features:
    """Invariant features ``name`` ``[B, N]`` (or a map that a dense layer flattens) and how the
    model orders them: the model's feature ``rows[j]`` is the tensor's flat index ``j`` times
    ``row_scale[j]``; ``width`` is the model's feature count (concatenation offsets)."""

    name: str
    width: int
    rows: np.ndarray | None = None
    row_scale: np.ndarray | None = None

    def dense(self, g: Graph, kernel, bias, name: str) -> str:
        """Emit the dense layer that reads these features with the model's ``kernel [width, O]``."""
        k = _np(kernel)
        if self.rows is not None:
            k = k[self.rows]
        if self.row_scale is not None:
            k = k * self.row_scale[:, None]
        params = {"kernel": k}
        if bias is not None:
            params["bias"] = _np(bias)
        return g.emit("dense", [self.name], name, params)


class Emitter:
    """Helpers shared by the model emitters (convolutions, BatchNorm, II weight maps)."""

    def __init__(self, g: Graph):
        self.g = g

    def conv(
        self,
        x: str,
        kernel,
        name: str,
        stride: int = 1,
        groups: int = 1,
        bias=None,
        downsample: str = "symmetric",
    ) -> str:
        """The convolution :func:`invjax.ops.conv.conv2d` computes (its ``downsample`` rule)."""
        kernel = _np(kernel)
        k = kernel.shape[0]
        if kernel.shape[1] != k or k % 2 != 1:
            raise ValueError(f"{name}: kernel shape {kernel.shape} is not square and odd")
        h, w = self.g.shapes[x][1:3]
        if stride == 2 and (h % 2 == 0 or w % 2 == 0):
            if h % 2 != w % 2:
                raise ValueError(f"{name}: stride 2 on a {h}x{w} grid: both even or both odd")
            if downsample == "symmetric":
                kernel = fold_box(kernel)
            elif downsample == "maxpool":
                y = self.conv(x, kernel, name, 1, groups, bias)
                return self.g.emit(
                    "max_pool", [y], name + "/pool", window=2, stride=2, padding=((0, 0), (0, 0))
                )
        p = (k - 1) // 2
        params = {"kernel": kernel}
        if bias is not None:
            params["bias"] = _np(bias)
        return self.g.emit(
            "conv", [x], name, params, stride=stride, padding=((p, p), (p, p)), groups=groups
        )

    def affine(self, x: str, scale, shift, name: str) -> str:
        return self.g.emit("affine", [x], name, {"scale": _np(scale), "shift": _np(shift)})

    def batch_norm(self, x: str, params, stats, name: str, repeat: int = 1, tile: int = 1) -> str:
        """Eval-mode BatchNorm as ``x * a + s`` with ``a = scale / sqrt(var + eps)``; ``repeat``
        spreads a field's parameters over its ``|G|`` channels, ``tile`` over ``S`` scales."""
        a = _np(params["scale"]) / np.sqrt(_np(stats["var"]) + BN_EPSILON)
        s = _np(params["bias"]) - _np(stats["mean"]) * a
        a, s = np.repeat(a, repeat), np.repeat(s, repeat)
        return self.affine(x, np.tile(a, tile), np.tile(s, tile), name)

    def relu(self, x: str, name: str) -> str:
        return self.g.emit("relu", [x], name)

    def ws_weight_map(self, x: str, kernel, group=None, interpolation="bilinear") -> np.ndarray:
        """The II weight map ``M`` of a WS kernel on the map ``x`` as a dense kernel ``[H W C, O]``
        (eq. 4, 5, 7: ``A = sum_y x(y) M(y)``, ``M = 1/(UV) sum_t Kbar(y - t)``)."""
        h, w = self.g.shapes[x][1:3]
        kbar = ii_ops.symmetrized_kernel(jnp.asarray(kernel, jnp.float32), group, interpolation)
        m = _np(ii_ops.ws_weight_map(kbar, h, w))
        return m.reshape(-1, m.shape[-1])


def _sub(variables, collection, *path):
    tree = variables.get(collection, {}) if hasattr(variables, "get") else {}
    for p in path:
        tree = tree.get(p, {}) if hasattr(tree, "get") else {}
    return tree


def stream_variables(variables, name: str) -> dict:
    """The variables of sub-module ``name`` (every collection that has it)."""
    out = {}
    for col, tree in variables.items():
        if hasattr(tree, "get") and name in tree:
            out[col] = tree[name]
    return out


# --------------------------------------------------------------------------- scale convolutions


def scale_conv(
    e: Emitter,
    x: str,
    p,
    name: str,
    stride: int,
    kind: str,
    basis_kind: str,
    kernel_size: int,
    effective_size: int,
    scales,
    base_sigma=None,
    downsample: str = "symmetric",
) -> str:
    """Scale lift (``kind='lift'``), scale conv (``'conv'``, ``scale_size = 1``) or the 1x1
    convolution shared over scales (``'shortcut'``) on flattened ``[B, H, W, S * C]`` maps."""
    from invjax.bases import scale as scale_bases
    from invjax.ops import scale as scale_ops

    n_scales = len(scales)
    if kind == "shortcut":
        # The same [C, F] kernel for every scale: a grouped conv with the kernel tiled S times.
        kern = np.tile(_np(p["kernel"]), (1, 1, 1, n_scales))
        return e.conv(x, kern, name, stride, n_scales, downsample=downsample)
    psi = np.asarray(
        scale_bases.basis(
            basis_kind, kernel_size, effective_size, tuple(float(s) for s in scales), base_sigma
        ),
        np.float32,
    )
    w = jnp.asarray(p["weight"], jnp.float32)
    bias = None if "bias" not in p else np.tile(_np(p["bias"]), n_scales)
    if kind == "lift":
        kern = scale_ops.expand_lift_kernel(w, jnp.asarray(psi))
        return e.conv(x, kern, name, stride, 1, bias, downsample)
    if w.shape[2] != 1:
        raise ValueError(
            f"{name}: scale_size={w.shape[2]} is not supported by export (the models use 1)"
        )
    kern = scale_ops.expand_scale_kernel(w, jnp.asarray(psi))
    return e.conv(x, kern, name, stride, n_scales, bias, downsample)


def channel_major_rows(shape) -> np.ndarray:
    """Model feature index of each NHWC-flattened entry of a ``[1, H, W, C]`` map that the model
    flattens channel-major (PyTorch's ``view`` of ``[B, C, H, W]``): ``c * HW + p``."""
    _, h, w, c = shape
    return (np.arange(c)[None, :] * (h * w) + np.arange(h * w)[:, None]).reshape(-1)


# --------------------------------------------------------------------------- Wide-ResNet


def wrn_features(e: Emitter, m, v, x: str, prefix: str = "") -> Features:
    """:class:`invjax.models.wrn.WideResNet` up to its invariant features (eval mode)."""
    from invjax.bases import e2 as e2_bases
    from invjax.models.wrn import e2_kernel_size
    from invjax.ops import e2 as e2_ops

    g = e.g
    params, stats = v["params"], v.get("batch_stats", {})
    fam = m.family
    n_scales = len(m.scales)
    groups = tuple(m.groups) if fam == "e2" else (None, None, None)

    def bn(x, p, s, name, group):
        if fam == "e2":
            return e.batch_norm(x, p, s, name, repeat=G.parse_group(group).order)
        return e.batch_norm(x, p, s, name, tile=n_scales if fam == "scale" else 1)

    rule = m.downsample_rule

    def conv(x, p, name, stride, group, kind):
        if fam == "std":
            return e.conv(x, p["kernel"], name, stride, bias=p.get("bias"), downsample=rule)
        if fam == "scale":
            return scale_conv(
                e,
                x,
                p,
                name,
                stride,
                kind,
                m.scale_basis,
                m.scale_kernel_size,
                m.scale_effective_size,
                m.scales,
                downsample=rule,
            )
        grp = G.parse_group(group)
        w = jnp.asarray(p["weight"], jnp.float32)
        k = {"lift": 5, "shortcut": 1}.get(kind) or e2_kernel_size(grp)
        phi = e2_bases.transformed_basis(grp, k, 1, m.e2_frequency_cutoff, m.e2_sigma)
        if kind == "lift":
            kern = e2_ops.expand_lift(w, phi)
        elif w.ndim == 3:  # trivial (invariant) output fields
            kern = e2_ops.expand_to_trivial(w, phi)
        else:
            kern = e2_ops.expand_regular(w, phi, grp)
        return e.conv(x, kern, name, stride, downsample=rule)

    x = conv(x, params["stem"], f"{prefix}stem", 1, groups[0], "lift")
    n = m.blocks_per_stage
    for s in range(3):
        if s and fam == "e2" and groups[s] != groups[s - 1]:
            big, sub = G.parse_group(groups[s - 1]), G.parse_group(groups[s])
            idx = e2_ops.restriction_gather(big, sub, g.shapes[x][-1] // big.order)
            x = g.emit("gather", [x], f"{prefix}restrict{s}", {"index": idx.astype(np.int32)})
        for b in range(n):
            blk = f"block{s + 1}_{b + 1}"
            bp, bs, name = params[blk], stats.get(blk, {}), f"{prefix}{blk}/"
            stride = (m.first_stride if s == 0 else 2) if b == 0 else 1
            relift = bool(m.relift[s]) and b == 0 and fam == "scale"
            in_group = groups[s - 1] if s and b == 0 else groups[s]  # as WRNBlock.in_group
            x_n = e.relu(bn(x, bp["bn1"], bs["bn1"], name + "bn1", in_group), name + "relu1")
            if relift:
                y = g.emit("scale_max", [x_n], name + "projection", scales=n_scales)
                y = conv(y, bp["conv1"], name + "conv1", stride, None, "lift")
            else:
                y = conv(x_n, bp["conv1"], name + "conv1", stride, groups[s], "conv")
            y = e.relu(bn(y, bp["bn2"], bs["bn2"], name + "bn2", groups[s]), name + "relu2")
            y = conv(y, bp["conv2"], name + "conv2", 1, groups[s], "conv")
            if "shortcut" in bp:
                short = conv(x_n, bp["shortcut"], name + "shortcut", stride, groups[s], "shortcut")
            else:
                short = x
            x = g.emit("add", [y, short], name + "add")
    if fam == "scale":
        x = g.emit("scale_max", [x], f"{prefix}projection", scales=n_scales)
    x = e.batch_norm(x, params["bn"], stats["bn"], f"{prefix}bn")
    x = e.relu(x, f"{prefix}relu")
    c = g.shapes[x][-1]
    if m.head == "pool":
        return Features(g.emit("mean", [x], f"{prefix}pool"), c)
    kernel = params["ii"]["kernel"]
    if fam == "scale":
        xc = g.emit("clamp", [x], f"{prefix}ii_clamp", epsilon=ii_ops.DEFAULT_EPSILON)
        mk = e.ws_weight_map(xc, kernel)
        y = g.emit("scale_ii", [xc], f"{prefix}ii", {"kernel": mk})
        y = e.batch_norm(y, params["ii_bn"], stats["ii_bn"], f"{prefix}ii_bn")
        return Features(y, kernel.shape[-1])
    group = None
    if fam == "e2":
        group = G.parse_group(m.ii_group or m.groups[-1])
    mk = e.ws_weight_map(x, kernel, group, m.ii_interpolation)
    return Features(g.emit("dense", [x], f"{prefix}ii", {"kernel": mk}), kernel.shape[-1])


# --------------------------------------------------------------------------- Scaled-MNIST


def mnist_features(e: Emitter, m, v, x: str, prefix: str = "") -> Features:
    """:class:`invjax.models.mnist.ScaledMNISTNet` up to its invariant features (eval mode)."""
    from invjax.layers import ii as iil

    g = e.g
    params, stats = v["params"], v.get("batch_stats", {})
    fam = m.family
    n_scales = len(m.scales)
    tile = n_scales if fam == "scale" else 1

    def conv(x, name, lift):
        p = params[name]
        if fam == "std":
            return e.conv(x, p["kernel"], prefix + name, 1, bias=p.get("bias"))
        kind = "lift" if lift else "conv"
        return scale_conv(
            e, x, p, prefix + name, 1, kind, m.basis, m.kernel_size, m.effective_size, m.scales
        )

    def bn(x, name, tile=tile):
        return e.batch_norm(x, params[name], stats[name], prefix + name, tile=tile)

    def project(x):
        if fam == "scale":
            return g.emit("scale_max", [x], prefix + "projection", scales=n_scales)
        return x

    def max_pool(x, window, stride, pad, name):
        return g.emit(
            "max_pool", [x], prefix + name, window=window, stride=stride, padding=((pad, pad),) * 2
        )

    if m.upsample != "none":
        x = g.emit("upsample", [x], prefix + "upsample", factor=2, method=m.upsample)
    for i in range(2):
        x = conv(x, f"conv{i + 1}", i == 0)
        x = e.relu(x, f"{prefix}relu{i + 1}")
        if m.spatial_pool == "max":
            x = max_pool(x, 2, 2, 0, f"pool{i + 1}")
        else:
            x = g.emit("avg_pool", [x], f"{prefix}pool{i + 1}", window=2, stride=2)
        x = bn(x, f"bn{i + 1}")
    x = conv(x, "conv3", False)
    if m.head == "mixed":
        mp = iil.MixedPooling()
        x = e.relu(project(x), prefix + "relu3")
        x = max_pool(x, mp.max_window, 1, 0, "pool/max")
        x = g.emit("avg_pool", [x], prefix + "pool/avg", window=mp.avg_window, stride=mp.avg_stride)
        p, s = params["pool"]["BatchNorm_0"], stats["pool"]["BatchNorm_0"]
        x = e.batch_norm(x, p, s, prefix + "pool/bn")
        return Features(x, int(np.prod(g.shapes[x])), rows=channel_major_rows(g.shapes[x]))
    if m.head == "maxpool":
        x = e.relu(project(x), prefix + "relu3")
        x = max_pool(x, 8, 8, 2, "maxpool")  # sesn_max_pool: MaxPool2d(8, padding=2)
        x = bn(x, "bn3", tile=1)
        return Features(x, int(np.prod(g.shapes[x])), rows=channel_major_rows(g.shapes[x]))
    x = e.relu(project(bn(x, "bn3")), prefix + "relu3")
    c = g.shapes[x][-1]
    if m.head == "pool":
        return Features(g.emit("mean", [x], prefix + "pool"), c)
    if m.head == "ii":
        layer = iil.ScaleInvariantIntegration(c, m.ii_kernel_size)
        xc = g.emit("clamp", [x], prefix + "ii_clamp", epsilon=layer.epsilon)
        mk = e.ws_weight_map(xc, params["ii"]["kernel"])
        return Features(g.emit("scale_ii", [xc], prefix + "ii", {"kernel": mk}), c)
    layer = iil.ScaleMonomialInvariantIntegration(
        m.n_pairs,
        kernel_size=m.ii_kernel_size,
        seed=m.monomial_seed,
        placement=m.monomial_placement,
    )
    pairs = layer.pairs(c)
    mask = np.asarray(v[iil.MASK_COLLECTION]["ii"]["mask"], np.float64)
    active = np.flatnonzero(mask != 0)
    if active.size == 0:  # every pair pruned: the features are zeros; keep one, weighted 0
        active = np.array([0])
    cols = np.stack([2 * active, 2 * active + 1], axis=-1).reshape(-1)
    ek = pairs.exponent_kernel(c)[..., cols]
    log = {"log": True} if m.monomial_output == "log" else {}  # the model reads log A
    y = g.emit("monomial_ii", [x], prefix + "ii", {"exponents": ek}, epsilon=layer.epsilon, **log)
    return Features(y, m.n_pairs, rows=active, row_scale=mask[active])


def mnist_classifier(e: Emitter, m, v, feats: Features, prefix: str = "") -> str:
    params, stats = v["params"], v.get("batch_stats", {})
    y = feats.dense(e.g, params["fc1"]["kernel"], params["fc1"].get("bias"), prefix + "fc1")
    y = e.batch_norm(y, params["bn_fc1"], stats["bn_fc1"], prefix + "bn_fc1")
    y = e.relu(y, prefix + "relu_fc1")
    cls = params["classifier"]
    return e.g.emit(
        "dense",
        [y],
        prefix + "classifier",
        {"kernel": _np(cls["kernel"]), "bias": _np(cls["bias"])},
    )


# --------------------------------------------------------------------------- dispatch


def check_supported(m) -> None:
    """ValueError unless ``m`` (and every stream of a multi-stream network) can be exported."""
    from invjax.models.mnist import ScaledMNISTNet
    from invjax.models.multistream import MultiStreamNetwork
    from invjax.models.simple import SimpleCNN
    from invjax.models.wrn import WideResNet

    if isinstance(m, MultiStreamNetwork):
        for n in m.stream_names():
            s = getattr(m, n)
            if not isinstance(s, WideResNet | ScaledMNISTNet):
                raise ValueError(
                    f"export: stream {n!r} is a {type(s).__name__}, which is not supported: "
                    "streams must be WideResNet or ScaledMNISTNet"
                )
        return
    if not isinstance(m, WideResNet | ScaledMNISTNet | SimpleCNN):
        raise ValueError(
            f"export: model {type(m).__name__} is not supported: choose WideResNet, "
            "ScaledMNISTNet, MultiStreamNetwork or SimpleCNN"
        )


def features(e: Emitter, m, v, x: str, prefix: str = "") -> Features:
    from invjax.models.mnist import ScaledMNISTNet
    from invjax.models.wrn import WideResNet

    if isinstance(m, WideResNet):
        return wrn_features(e, m, v, x, prefix)
    if isinstance(m, ScaledMNISTNet):
        return mnist_features(e, m, v, x, prefix)
    raise ValueError(
        f"export: stream model {type(m).__name__} is not supported: streams must be WideResNet or "
        "ScaledMNISTNet"
    )


def logits(e: Emitter, m, v, x: str = "images") -> str:
    """Emit the whole network; returns the logits tensor."""
    from invjax.models.mnist import ScaledMNISTNet
    from invjax.models.multistream import MultiStreamNetwork
    from invjax.models.simple import SimpleCNN
    from invjax.models.wrn import WideResNet

    if isinstance(m, MultiStreamNetwork):
        return multistream_logits(e, m, v, x)
    if isinstance(m, ScaledMNISTNet):
        return mnist_classifier(e, m, v, mnist_features(e, m, v, x))
    if isinstance(m, WideResNet):
        f = wrn_features(e, m, v, x)
        cls = v["params"]["classifier"]
        return f.dense(e.g, cls["kernel"], cls["bias"], "classifier")
    if isinstance(m, SimpleCNN):
        return simple_cnn_logits(e, m, v, x)
    raise ValueError(
        f"export: model {type(m).__name__} is not supported: choose WideResNet, ScaledMNISTNet, "
        "MultiStreamNetwork or SimpleCNN"
    )


def multistream_logits(e: Emitter, m, v, x: str) -> str:
    """Streams, then the head collapsed: ``logits = sum_j A_j x_j + b`` (see the package doc)."""
    from invjax.layers.heads import ordered

    names = m.stream_names()
    if not names:
        raise ValueError("export: MultiStreamNetwork has no streams")
    feats = {n: features(e, getattr(m, n), stream_variables(v, n), x, f"{n}/") for n in names}
    names = ordered(feats)
    head = v["params"].get("head", {})
    cls = v["params"]["classifier"]
    w_cls = _np(cls["kernel"])
    maps = {}
    if m.head == "concat":
        offset = 0
        for n in names:
            maps[n] = w_cls[offset : offset + feats[n].width]
            offset += feats[n].width
    else:
        target = m.head[4:]
        weights = {n: _np(head[f"weight_{n}"]) for n in names}
        total = sum(weights.values())
        for n in names:
            share = (weights[n] / total)[:, None] * w_cls  # diag(w_n / sum_k w_k) W_cls
            maps[n] = share if n == target else _np(head[f"map_{n}"]["kernel"]) @ share
    outs = [feats[n].dense(e.g, maps[n], None, f"{n}/head") for n in names]
    return e.g.emit("add", outs, "logits", {"bias": _np(cls["bias"])})


def simple_cnn_logits(e: Emitter, m, v, x: str) -> str:
    """:class:`invjax.models.simple.SimpleCNN` (Flax ``nn.Conv`` with ``'SAME'`` padding)."""
    from jax import lax

    g = e.g
    params, stats = v["params"], v.get("batch_stats", {})
    for i in range(2):
        kernel = _np(params[f"Conv_{i}"]["kernel"])
        stride = 1 + i
        h, w = g.shapes[x][1:3]
        pads = lax.padtype_to_pads((h, w), kernel.shape[:2], (stride, stride), "SAME")
        x = g.emit(
            "conv",
            [x],
            f"Conv_{i}",
            {"kernel": kernel},
            stride=stride,
            padding=tuple(tuple(int(q) for q in p) for p in pads),
            groups=1,
        )
        x = e.batch_norm(x, params[f"BatchNorm_{i}"], stats[f"BatchNorm_{i}"], f"BatchNorm_{i}")
        x = e.relu(x, f"relu{i}")
    x = g.emit("mean", [x], "pool")
    d = params["Dense_0"]
    return g.emit("dense", [x], "Dense_0", {"kernel": _np(d["kernel"]), "bias": _np(d["bias"])})
