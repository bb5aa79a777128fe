"""Fusion passes over a :class:`~invjax.export.graph.Graph` (all exact algebra, float64 NumPy).

* :func:`push_gathers`: a static channel permutation (an E(2) restriction) is moved past
  per-channel ops (``affine``: parameters permuted; ``relu``, ``clamp``) and folded into the rows
  of the convolutions that read it (``K'[.., idx[j], :] = K[.., j, :]``).
* :func:`fold_affine_backward`: ``affine(conv(x)) -> conv'(x)`` (output channels scaled, bias
  ``a b + s``); also into ``dense`` and ``scale_ii`` (linear before its bias), and through an
  ``add`` whose operands all come from such ops that nothing else reads (a residual sum of two
  convolutions). Needs the producer's output to have no other reader: a pre-activation BatchNorm
  whose input is also an identity shortcut stays an ``affine``.
* :func:`fold_affine_forward`: ``conv(affine(x)) -> conv'(x)``: input rows scaled and the shift
  pushed through the convolution as a bias. With zero padding the shift's image is position
  dependent near the border, so the bias is a ``[H', W', O]`` map (exact), per channel when the
  padding is zero. Same for ``dense`` (a flattened map).
* :func:`compose_dense`: ``dense(dense(x))``, ``dense(scale_ii(x))`` -> one matrix when that does
  not cost more multiplications (an II weight map and the classifier: yes; Scale-II's 95 outputs
  into a 256-wide hidden layer: no).
* :func:`merge_biases`: the biases of linear ops that only feed one ``add`` move into the
  ``add`` (one bias per residual sum; the multi-stream logits' single ``b``).
* :func:`merge_relu_clamp`: ``clamp(relu(x), eps) = clamp(x, eps)`` for ``eps > 0``.
"""

from __future__ import annotations

import numpy as np

from invjax.export.graph import Graph, Node

LINEAR_OUT = ("conv", "dense", "scale_ii")


def _remove(g: Graph, node: Node) -> None:
    g.nodes.remove(node)


def _scale_outputs(node: Node, a, s) -> None:
    """Replace ``node``'s output ``y`` by ``a * y + s`` (``a``, ``s`` per output channel)."""
    node.params["kernel"] = node.params["kernel"] * a
    if "bias" in node.params:
        node.params["bias"] = node.params["bias"] * a + s
    elif np.any(s != 0):
        node.params["bias"] = np.broadcast_to(s, np.shape(a)).copy()


# --------------------------------------------------------------------------- gathers


def push_gathers(g: Graph) -> bool:
    changed = False
    for node in list(g.nodes):
        if node.kind != "gather" or node not in g.nodes or node.output == g.output:
            continue
        idx = np.asarray(node.params["index"])
        if not np.array_equal(np.sort(idx), np.arange(idx.size)):
            continue  # not a permutation: keep it
        cons = g.consumers(node.output)
        movable = ("affine", "relu", "clamp")
        if not cons or not all(
            (c.kind in movable and c.inputs == [node.output])
            or (c.kind == "conv" and c.attrs["groups"] == 1 and c.inputs == [node.output])
            for c in cons
        ):
            continue
        src = node.inputs[0]
        for c in cons:
            if c.kind == "conv":
                k = c.params["kernel"]
                folded = np.zeros_like(k)
                folded[:, :, idx, :] = k
                c.params["kernel"] = folded
                c.inputs = [src]
                continue
            if c.kind == "affine":
                for key in ("scale", "shift"):
                    p = np.empty_like(c.params[key])
                    p[idx] = c.params[key]
                    c.params[key] = p
            # The per-channel op now reads the unpermuted tensor; the permutation follows it.
            old = c.output
            c.inputs = [src]
            c.output = g.unique(f"{c.name}:unpermuted")
            g.shapes[c.output] = g.shapes[old]
            after = Node("gather", g.unique(node.name), [c.output], old, {}, {"index": idx})
            g.nodes.insert(g.nodes.index(c) + 1, after)
        _remove(g, node)
        changed = True
    return changed


# --------------------------------------------------------------------------- affine folding


def fold_affine_backward(g: Graph) -> bool:
    changed = False
    for aff in list(g.nodes):
        if aff.kind != "affine" or aff not in g.nodes:
            continue
        src = g.producer(aff.inputs[0])
        if src is None or g.sole_consumer(src.output) is not aff:
            continue
        a, s = aff.params["scale"], aff.params["shift"]
        if src.kind in LINEAR_OUT:
            _scale_outputs(src, a, s)
        elif src.kind == "add":
            ops = [g.producer(t) for t in src.inputs]
            if len(set(src.inputs)) != len(src.inputs) or not all(
                p is not None and p.kind in LINEAR_OUT and g.sole_consumer(p.output) is src
                for p in ops
            ):
                continue
            for p in ops:
                _scale_outputs(p, a, 0.0)
            src.params["bias"] = src.params.get("bias", 0.0) * a + s
        else:
            continue
        src.output = aff.output
        _remove(g, aff)
        changed = True
    return changed


def _valid_taps(size: int, out: int, k: int, stride: int, pad_lo: int) -> np.ndarray:
    """``[out, k]``: 1 where output ``r``'s tap ``a`` reads a pixel inside ``[0, size)``."""
    pos = np.arange(out)[:, None] * stride + np.arange(k)[None, :] - pad_lo
    return ((pos >= 0) & (pos < size)).astype(np.float64)


def _fold_into_conv(g: Graph, conv: Node, a, s, in_shape) -> None:
    k = conv.params["kernel"]
    kh, kw, ci_g, o = k.shape
    groups = conv.attrs["groups"]
    o_g = o // groups
    # Per (input row, output) factor: the input channel of row i for output o is
    # (o // o_g) * ci_g + i.
    grp = np.arange(o) // o_g
    a_io = a.reshape(groups, ci_g).T[:, grp]  # [ci_g, O]
    s_io = s.reshape(groups, ci_g).T[:, grp]
    shift_taps = np.einsum("abio,io->abo", k, s_io)  # the shift's contribution per tap
    (ph_lo, ph_hi), (pw_lo, pw_hi) = conv.attrs["padding"]
    out_h, out_w = g.shapes[conv.output][1:3]
    stride = conv.attrs["stride"]
    vr = _valid_taps(in_shape[1], out_h, kh, stride, ph_lo)
    vc = _valid_taps(in_shape[2], out_w, kw, stride, pw_lo)
    bias_map = np.einsum("ra,cb,abo->rco", vr, vc, shift_taps)
    if np.all(bias_map == bias_map[:1, :1]):
        bias_map = bias_map[0, 0]  # no border effect: a per-channel bias
    conv.params["kernel"] = k * a_io
    conv.params["bias"] = conv.params.get("bias", 0.0) + bias_map


def _fold_into_dense(dense: Node, a, s) -> None:
    k = dense.params["kernel"]
    reps = k.shape[0] // a.size
    a_flat, s_flat = np.tile(a, reps), np.tile(s, reps)  # channel-last flatten order
    dense.params["bias"] = dense.params.get("bias", 0.0) + s_flat @ k
    dense.params["kernel"] = k * a_flat[:, None]


def fold_affine_forward(g: Graph) -> bool:
    changed = False
    for aff in list(g.nodes):
        if aff.kind != "affine" or aff not in g.nodes or aff.output == g.output:
            continue
        cons = g.consumers(aff.output)
        if not cons or not all(
            c.kind in ("conv", "dense") and c.inputs == [aff.output] for c in cons
        ):
            continue
        a, s = aff.params["scale"], aff.params["shift"]
        in_shape = g.shapes[aff.inputs[0]]
        for c in cons:
            if c.kind == "conv":
                _fold_into_conv(g, c, a, s, in_shape)
            else:
                _fold_into_dense(c, a, s)
            c.inputs = [aff.inputs[0]]
        _remove(g, aff)
        changed = True
    return changed


# --------------------------------------------------------------------------- linear algebra


def compose_dense(g: Graph) -> bool:
    changed = False
    for d in list(g.nodes):
        if d.kind != "dense" or d not in g.nodes:
            continue
        src = g.producer(d.inputs[0])
        if src is None or src.kind not in ("dense", "scale_ii"):
            continue
        if g.sole_consumer(src.output) is not d:
            continue
        k1, k2 = src.params["kernel"], d.params["kernel"]
        n, m = k1.shape
        o = k2.shape[1]
        if n * o > n * m + m * o:
            continue  # composing would cost more multiplications than it saves
        src.params["bias"] = src.params.get("bias", np.zeros(m)) @ k2 + d.params.get("bias", 0.0)
        src.params["kernel"] = k1 @ k2
        src.output = d.output
        _remove(g, d)
        changed = True
    return changed


def merge_biases(g: Graph) -> bool:
    changed = False
    for add in [n for n in g.nodes if n.kind == "add"]:
        for t in add.inputs:
            p = g.producer(t)
            if (
                p is not None
                and p.kind in LINEAR_OUT
                and "bias" in p.params
                and g.sole_consumer(t) is add
            ):
                add.params["bias"] = add.params.get("bias", 0.0) + p.params.pop("bias")
                changed = True
    return changed


def merge_relu_clamp(g: Graph) -> bool:
    changed = False
    for c in list(g.nodes):
        if c.kind != "clamp" or c.attrs["epsilon"] <= 0:
            continue
        r = g.producer(c.inputs[0])
        if r is not None and r.kind == "relu" and g.sole_consumer(r.output) is c:
            c.inputs = list(r.inputs)
            _remove(g, r)
            changed = True
    return changed


PASSES = (
    push_gathers,
    merge_relu_clamp,
    fold_affine_backward,
    fold_affine_forward,
    compose_dense,
    merge_biases,
)


def fuse(g: Graph) -> Graph:
    """Run every pass until none changes the graph.

    No pass changes the shape of a tensor (they rename outputs, permute, rescale), so the shapes
    inferred while emitting stay valid.
    """
    while True:
        changed = False
        for p in PASSES:
            changed |= p(g)
        if not changed:
            return g
