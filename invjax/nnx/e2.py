"""The E(2) layers as Flax NNX modules, over the same ops as :mod:`invjax.layers.e2`.

Each module takes its input's channel count ``in_features`` when it is constructed (as
``flax.nnx.Conv`` does) and creates its parameters then, from ``rngs``; everything else (the
settings, their defaults, the shapes, the initialisation, the field-type rules and the group a
layer is exact for) is the Linen layer's: the rules are the Linen classes' own methods, and the
products are :mod:`invjax.ops.e2`'s. Parameters carry the Linen names: ``weight``; the batch
norm's ``scale``, ``bias`` (:class:`flax.nnx.Param`) and ``mean``, ``var``
(:class:`flax.nnx.BatchStat`).

Shapes: trivial features ``[B, H, W, C]``; regular features of a group ``G`` with ``C`` fields
``[B, H, W, C * |G|]``. Called on a :class:`~invjax.fields.Field` a layer checks its type and
returns a Field, as the Linen one does.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from flax import nnx

from invjax import fields
from invjax.contract import Exact, Precise, Typed
from invjax.groups import Group, check_chain, parse_group
from invjax.layers import e2 as linen
from invjax.ops import e2 as ops

D4 = linen.D4


def _group(value):
    return None if value is None else parse_group(value)


def check_in_features(in_features, what: str, multiple: int = 1) -> None:
    """One clear error unless ``in_features``, the channels a layer is built for, is an integer
    >= 1 that holds whole fields of ``multiple`` channels (the Linen layers' check of their
    input, made when an NNX layer is constructed)."""
    if not isinstance(in_features, int | np.integer) or in_features < 1:
        raise ValueError(
            f"{what}: in_features={in_features!r} is invalid: it must be an integer >= 1"
        )
    if in_features % multiple:
        raise ValueError(
            f"{what}: in_features={in_features} is not a multiple of the group order {multiple}"
        )


class _SteerableConv(Exact, Typed, Precise, nnx.Module):
    """The settings every E(2) convolution shares (those of :class:`invjax.layers.e2.E2Conv`)."""

    def __init__(
        self,
        features,
        group,
        kernel_size,
        stride,
        dilation,
        frequency_cutoff,
        sigma,
        rings,
        downsample,
        precision,
    ):
        self.features, self.group = features, parse_group(group)
        self.kernel_size, self.stride, self.dilation = kernel_size, stride, dilation
        self.frequency_cutoff, self.sigma, self.rings = frequency_cutoff, sigma, rings
        self.downsample, self.precision = downsample, precision
        self.lowering = "auto"  # the Linen layers' default: chosen per layer and backend

    exact_group = linen.E2Conv.exact_group
    basis = linen.E2Conv.basis


class E2LiftConv(_SteerableConv):
    """Lifting convolution (:class:`invjax.layers.e2.E2LiftConv`): trivial ``[B, H, W, Ci]`` ->
    regular ``[B, H', W', features * |G|]``, ``psi_g = L_g psi``.

    Args:
      in_features: ``Ci``, the input's channels.
      features: output fields (``features * |G|`` channels).
      group, kernel_size, stride, dilation, frequency_cutoff, sigma, rings, downsample,
        precision: as :class:`invjax.layers.e2.E2LiftConv`.
      rngs: draws ``weight [Ci, features, B]`` (He-normal over the basis, ``B`` functions).
    """

    def __init__(
        self,
        in_features: int,
        features: int,
        group: Group | str = D4,
        kernel_size: int = 3,
        stride: int = 1,
        dilation: int = 1,
        frequency_cutoff: float | None = None,
        sigma: float | tuple[float, ...] | None = None,
        rings: tuple[float, ...] | None = None,
        downsample: str = "symmetric",
        precision: str | None = None,
        *,
        rngs: nnx.Rngs,
    ):
        super().__init__(
            features,
            group,
            kernel_size,
            stride,
            dilation,
            frequency_cutoff,
            sigma,
            rings,
            downsample,
            precision,
        )
        linen._check_features(features, "E2LiftConv")
        check_in_features(in_features, "E2LiftConv")
        nb = self.basis(self.group).shape[1]
        init = linen._he(in_features, nb)
        self.weight = nnx.Param(init(rngs.params(), (in_features, features, nb)))

    out_type = linen.E2LiftConv.out_type
    in_type = linen.E2LiftConv.in_type

    def __call__(self, x):
        x, out = fields.accept(x, self.out_type, "E2LiftConv")
        linen._check_channels(x, 1, "E2LiftConv")
        phi = self.basis(self.group)
        method = linen.lowering_choice(self, x.shape, lift=True)
        w = self.weight[...]
        y = ops.lift_conv(x, w, phi, self.stride, self.downsample, self.precision, method)
        return fields.emit(y, out)


class E2Conv(_SteerableConv):
    """Group convolution on regular fields (:class:`invjax.layers.e2.E2Conv`): ``[B, H, W, Ci *
    |G|]`` -> ``[B, H', W', features * |G|]`` (``[.., features]`` with ``trivial_out``).

    Args:
      in_features: the input's channels ``Ci * |G|``.
      features, group, kernel_size, stride, dilation, trivial_out, frequency_cutoff, sigma,
        rings, downsample, precision: as :class:`invjax.layers.e2.E2Conv`.
      rngs: draws ``weight [Ci, features, |G|, B]`` (``[Ci, features, B]`` with
        ``trivial_out``), He-normal over the basis.
    """

    def __init__(
        self,
        in_features: int,
        features: int,
        group: Group | str = D4,
        kernel_size: int = 3,
        stride: int = 1,
        dilation: int = 1,
        trivial_out: bool = False,
        frequency_cutoff: float | None = None,
        sigma: float | tuple[float, ...] | None = None,
        rings: tuple[float, ...] | None = None,
        downsample: str = "symmetric",
        precision: str | None = None,
        *,
        rngs: nnx.Rngs,
    ):
        super().__init__(
            features,
            group,
            kernel_size,
            stride,
            dilation,
            frequency_cutoff,
            sigma,
            rings,
            downsample,
            precision,
        )
        self.trivial_out = trivial_out
        g = self.group
        linen._check_features(features, "E2Conv")
        check_in_features(in_features, f"E2Conv({g.name})", g.order)
        ci = in_features // g.order
        nb = self.basis(g).shape[1]
        shape = (ci, features, nb) if trivial_out else (ci, features, g.order, nb)
        self.weight = nnx.Param(linen._he(in_features, nb)(rngs.params(), shape))

    out_type = linen.E2Conv.out_type
    in_type = linen.E2Conv.in_type

    def __call__(self, x):
        g = self.group
        x, out = fields.accept(x, self.out_type, "E2Conv")
        linen._check_channels(x, g.order, f"E2Conv({g.name})")
        phi, w, p = self.basis(g), self.weight[...], self.precision
        method = linen.lowering_choice(self, x.shape, lift=False)
        if self.trivial_out:
            y = ops.trivial_conv(x, w, phi, self.stride, self.downsample, p, method)
        else:
            y = ops.group_conv(x, w, phi, g, self.stride, self.downsample, p, method)
        return fields.emit(y, out)


class GroupPool(Exact, Typed, nnx.Module):
    """Max (or mean) over each field's group channels, ``[..., C * |G|] -> [..., C]``
    (:class:`invjax.layers.e2.GroupPool`; no parameters).

    Args:
      group: the input fields' group.
      reduce: ``'max'`` or ``'mean'``.
    """

    def __init__(self, group: Group | str = D4, reduce: str = "max"):
        self.group, self.reduce = parse_group(group), reduce

    exact_group = linen.GroupPool.exact_group
    out_type = linen.GroupPool.out_type
    in_type = linen.GroupPool.in_type

    def __call__(self, x):
        g = self.group
        x, out = fields.accept(x, self.out_type, "GroupPool")
        linen._check_channels(x, g.order, f"GroupPool({g.name})")
        return fields.emit(ops.group_pool(x, g.order, self.reduce), out)


class Restrict(Exact, Typed, nnx.Module):
    """Restriction of regular fields from ``group`` to ``subgroup``, a static channel relabelling
    (:class:`invjax.layers.e2.Restrict`; no parameters).

    Args:
      group: the input fields' group.
      subgroup: the output fields' group (a subgroup of ``group``: one clear error otherwise).
    """

    def __init__(self, group: Group | str, subgroup: Group | str):
        self.group, self.subgroup = parse_group(group), parse_group(subgroup)
        check_chain((self.group, self.subgroup))

    exact_group = linen.Restrict.exact_group
    out_type = linen.Restrict.out_type
    in_type = linen.Restrict.in_type

    def __call__(self, x):
        g, h = self.group, self.subgroup
        x, out = fields.accept(x, self.out_type, "Restrict")
        linen._check_channels(x, g.order, f"Restrict({g.name}->{h.name})")
        return fields.emit(ops.restrict(x, g, h), out)


class E2BatchNorm(Exact, Typed, nnx.Module):
    """Batch norm with statistics, scale and bias shared within each field
    (:class:`invjax.layers.e2.E2BatchNorm`).

    Args:
      in_features: the input's channels ``C * |G|``.
      group: the fields' group (None or ``C1``: per-channel batch norm).
      momentum, epsilon: as the Linen layer (``running = momentum * running + (1 - momentum) *
        batch``).
      use_running_average: eval mode (``model.eval()`` sets it, ``model.train()`` clears it, as
        for ``flax.nnx.BatchNorm``); a call may override it.
      rngs: unused (no random initialisation); accepted as every NNX layer's.
    """

    def __init__(
        self,
        in_features: int,
        group: Group | str | None = D4,
        momentum: float = 0.9,
        epsilon: float = 1e-5,
        use_running_average: bool = False,
        *,
        rngs: nnx.Rngs | None = None,
    ):
        del rngs
        self.group, self.momentum, self.epsilon = _group(group), momentum, epsilon
        self.use_running_average = use_running_average
        order = 1 if self.group is None else self.group.order
        check_in_features(in_features, "E2BatchNorm", order)
        c = in_features // order
        self.scale, self.bias = nnx.Param(jnp.ones((c,))), nnx.Param(jnp.zeros((c,)))
        self.mean, self.var = nnx.BatchStat(jnp.zeros((c,))), nnx.BatchStat(jnp.ones((c,)))

    exact_group = linen.E2BatchNorm.exact_group
    out_type = linen.E2BatchNorm.out_type
    in_type = linen.E2BatchNorm.in_type

    def __call__(self, x, use_running_average: bool | None = None):
        order = 1 if self.group is None else self.group.order
        x, out = fields.accept(x, self.out_type, "E2BatchNorm")
        linen._check_channels(x, order, "E2BatchNorm")
        if use_running_average is None:
            use_running_average = self.use_running_average
        if use_running_average:
            mean, var = self.mean[...], self.var[...]
        else:
            mean, var = ops.field_moments(x, order)
            m = self.momentum
            self.mean[...] = m * self.mean[...] + (1 - m) * mean
            self.var[...] = m * self.var[...] + (1 - m) * var
        scale, bias = self.scale[...], self.bias[...]
        y = ops.field_batch_norm(x, mean, var, scale, bias, self.epsilon, order)
        return fields.emit(y, out)
