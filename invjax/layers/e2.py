"""Flax Linen modules for E(2)-equivariant networks (thin wrappers over :mod:`invjax.ops.e2`).

Shapes: trivial features ``[B, H, W, C]``; regular features of a group ``G`` with ``C`` fields
``[B, H, W, C * |G|]`` (channel ``c * |G| + g``). Parameters are only the basis coefficients;
the bases are float64 NumPy constants closed over at trace time.

Initialisation: coefficients ~ N(0, 2 / (fan_in * B)) with ``fan_in`` the number of input
channels and ``B`` the basis size, which gives the expanded filter He-normal variance
(basis functions have unit norm); e2cnn's generalised He init. (e2cnn_experiments runs
``--deltaorth``, a delta-orthogonal init; not implemented here, see docs/differences.md.)

Basis settings (``frequency_cutoff``, ``sigma``, ``rings``): those of
:func:`invjax.bases.e2.transformed_basis`; the defaults are e2cnn's ``R2Conv`` defaults and
:data:`invjax.bases.e2.E2CNN_EXPERIMENTS` are the values of e2cnn's experiments (the paper's
configs). ``downsample``: the stride-2 rule of :func:`invjax.ops.conv.conv2d`. ``precision``: the
arithmetic of the convolutions and kernel expansions (:mod:`invjax.precision`; None: JAX's).

Inference form (:mod:`invjax.export`): the convolutions and the BatchNorm define
``inference_arrays(x)`` (the expanded, box-folded kernel; the folded affine map) and
``inference_call(arrays, x)``; :class:`GroupPool` and :class:`Restrict` have no parameters and
are their own inference form.

Field types (:mod:`invjax.fields`): each layer's ``out_type(in_type)`` states what it takes and
gives (a lift: trivial -> regular G; a group convolution: regular G -> regular G or trivial; group
pooling: regular G -> trivial; restriction: regular G -> regular H; batch norm: regular fields of
any group whose order divides ``|G|``, kept) and raises one clear error otherwise. Called on a
:class:`~invjax.fields.Field` a layer checks its type and returns a Field; on a plain array it
checks only the channel count (a D4 and a C8 field both have 8 channels).
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from invjax import fields, initialise
from invjax.bases import e2 as e2_bases
from invjax.contract import Exact, Exportable, Precise, Typed
from invjax.fields import FieldType
from invjax.groups import Group, as_group_fields, check_chain, dihedral, is_subgroup
from invjax.ops import e2 as ops
from invjax.ops.conv import check_method, conv2d, inference_kernel, winograd_matrices
from invjax.ops.lowering import E2_LOWERINGS, choose_e2_lowering

D4 = dihedral(4)  # the layers' default group


def _he(fan_in: int, nbasis: int):
    std = (2.0 / (fan_in * nbasis)) ** 0.5

    def init(key, shape, dtype=jnp.float32):
        return std * initialise.normal(key, shape, dtype)

    return init


def _check_features(features, name):
    if not isinstance(features, int) or features < 1:
        raise ValueError(f"{name}: features={features!r} is invalid: it must be an integer >= 1")


def _check_channels(x, multiple: int, what: str):
    if x.ndim != 4:
        raise ValueError(f"{what}: expected NHWC input [B, H, W, C], got shape {x.shape}")
    if x.shape[-1] % multiple:
        raise ValueError(
            f"{what}: {x.shape[-1]} input channels is not a multiple of the group order {multiple}"
        )


def _conv_exact_group(module, input_shape) -> Group:
    """A convolution's group, unless a plain stride-2 sample of an even grid breaks the grid's
    symmetry (:mod:`invjax.ops.conv`): then none (:func:`invjax.equivariance.exact_group`)."""
    h, w = input_shape[-3], input_shape[-2]
    if module.stride == 2 and module.downsample == "strided" and (h % 2 == 0 or w % 2 == 0):
        return Group(1, False)
    return module.group


def _regular_in(module, in_type: FieldType, where: str) -> None:
    if in_type != FieldType.regular_type(module.group):
        raise fields.mismatch(where, f"regular {module.group.name} fields", in_type)


def lowering_choice(layer, x_shape, lift: bool | None = None) -> str:
    """The :func:`invjax.ops.conv.conv2d` method :class:`E2LiftConv` or :class:`E2Conv` ``layer``
    uses on an input of ``x_shape`` ``[B, H, W, C]`` on this backend, in its training form and
    its inference form alike (:func:`invjax.ops.lowering.choose_e2_lowering` with the layer's
    ``lowering``, kernel, stride, dilation, precision and the input's channels and batch).
    ``lift``: whether ``layer`` is a lifting convolution (default: it is an :class:`E2LiftConv`;
    the Flax NNX twins say so themselves)."""
    if layer.lowering not in E2_LOWERINGS:
        raise ValueError(
            f"{type(layer).__name__}: lowering={layer.lowering!r} is unknown: choose one of "
            f"{E2_LOWERINGS}"
        )
    return choose_e2_lowering(
        layer.lowering,
        in_channels=x_shape[-1],
        map_shape=(x_shape[1], x_shape[2]),
        kernel_size=layer.kernel_size,
        stride=layer.stride,
        dilation=layer.dilation,
        precision=layer.precision,
        lift=isinstance(layer, E2LiftConv) if lift is None else lift,
        batch=x_shape[0],
        downsample=layer.downsample,
    )


def call_method(layer, x_shape) -> str:
    """The method ``layer.__call__`` computes with: :func:`lowering_choice` (checked the same
    way), except ``'direct'`` while Flax's ``init`` runs the layer. ``init`` needs the forward
    pass only for the variables' shapes, and eagerly it compiles every operation of it on its
    own: the Winograd form's transforms are a hundred small ones, the direct form is one (a D8
    layer of 40 fields on 32x32 maps, first built in a process: 14 s -> 10 s, docs/benchmarks.md).
    The sums are the same to float32 rounding."""
    method = lowering_choice(layer, x_shape)
    if not layer.is_initializing():
        return method
    if method != "direct":  # what conv2d would refuse, refused at init as at apply
        check_method(method, layer.stride, 1, layer.dilation, layer.precision)
        if method == "winograd":
            winograd_matrices(layer.kernel_size)
    return "direct"


def _steerable_basis(module, g):
    """The sampled basis of an E(2) layer's settings (kernel, dilation, cutoff, sigma, rings)."""
    return e2_bases.transformed_basis(
        g, module.kernel_size, module.dilation, module.frequency_cutoff, module.sigma, module.rings
    )


class E2LiftConv(Exact, Typed, Exportable, Precise, nn.Module):
    """Lifting convolution: trivial ``[B, H, W, Ci]`` -> regular ``[B, H', W', features * |G|]``.

    ``psi_g = L_g psi`` with ``psi`` a learnt combination of the steerable basis (eq. 2 with the
    input on Z^2).
    """

    features: int
    """Number of output fields ``C_out`` (an integer >= 1): the output has ``features * |G|``
    channels, one regular field of ``group`` per feature."""
    group: Group = D4
    """The symmetry group ``G``, ``C_N`` (N rotations) or ``D_N`` (N rotations and flips): a
    :class:`invjax.groups.Group` or its name, e.g. ``"D4"``, ``"C8"``, ``"D1"`` (parsed once
    when the layer is built). Default ``D4`` (``|G| = 8``)."""
    kernel_size: int = 3
    """Filter size ``k`` in taps (odd): the steerable basis is sampled on the ``K x K`` grid,
    ``K = dilation * (k - 1) + 1``."""
    stride: int = 1
    """1 (``SAME`` output, ``H x W``) or 2 (output ``ceil(H / 2) x ceil(W / 2)``, sampled by the
    ``downsample`` rule; :mod:`invjax.ops.conv` explains the grid symmetry)."""
    dilation: int = 1
    """Spread of the basis (an integer >= 1): the filter is a dense ``K x K`` kernel with
    ``K = dilation * (k - 1) + 1``, whose default ring radii and widths are multiplied by
    ``dilation`` (:mod:`invjax.bases.e2`)."""
    frequency_cutoff: float | None = None
    """The basis' band limit: ``None`` is e2cnn ``R2Conv``'s default per-ring rule; a float
    ``F`` keeps angular frequencies ``|m| <= F pi r`` at ring radius ``r`` (``1.0`` in the
    paper's configs, :data:`invjax.bases.e2.E2CNN_EXPERIMENTS`)."""
    sigma: float | tuple[float, ...] | None = None
    """Width of the basis' Gaussian rings in pixels: one float for every ring or one per ring;
    ``None`` is e2cnn's per-ring rule (0.6, 0.4 on the outer ring, 0.005 at the centre, times
    ``dilation``); ``0.45`` in the paper's configs."""
    rings: tuple[float, ...] | None = None
    """Radii of the basis' rings in pixels; ``None``: ``0, 1, ..., (k - 1) // 2`` times
    ``dilation``."""
    downsample: str = "symmetric"
    """The stride-2 rule on even grids, one of :data:`invjax.ops.conv.DOWNSAMPLE_RULES`:
    ``"symmetric"`` (2x2 box folded into the kernel: exact for 90-degree rotations and flips),
    ``"strided"`` (plain strided samples, as e2cnn; not exact on even grids) or ``"maxpool"``
    (stride 1, then 2x2 max pooling). Unused with ``stride=1``."""
    precision: str | None = None
    """The arithmetic of the convolution and the kernel expansion: a mode of
    :mod:`invjax.precision` (``"highest"``, ``"default"``, ``"bf16"``, ``"exact_fast"``, or a
    CPU emulation such as ``"exact_fast@tf32"``); ``None``: JAX's default matmul precision."""

    basis = _steerable_basis

    def __post_init__(self):
        as_group_fields(self, "group")
        super().__post_init__()

    exact_group = _conv_exact_group

    lowering: str = "auto"
    """How the convolution is computed: a name of :data:`invjax.ops.lowering.E2_LOWERINGS`
    (speed and memory only, the same sums to float32 rounding); ``'auto'`` chooses per layer
    and backend (:func:`lowering_choice`). Flax's ``init`` runs the direct form, one operation,
    whatever the choice (:func:`call_method`)."""

    def out_type(self, in_type: FieldType) -> FieldType:
        """trivial -> regular ``group`` (module docstring, "Field types")."""
        if in_type != fields.TRIVIAL:
            raise fields.mismatch(f"E2LiftConv({self.group.name})", "trivial fields", in_type)
        return FieldType.regular_type(self.group)

    def in_type(self) -> FieldType:
        return fields.TRIVIAL

    @nn.compact
    def __call__(self, x):
        g = self.group
        x, out = fields.accept(x, self.out_type, "E2LiftConv")
        _check_features(self.features, "E2LiftConv")
        _check_channels(x, 1, "E2LiftConv")
        phi = self.basis(g)
        nb = phi.shape[1]
        w = self.param("weight", _he(x.shape[-1], nb), (x.shape[-1], self.features, nb))
        method = call_method(self, x.shape)
        y = ops.lift_conv(x, w, phi, self.stride, self.downsample, self.precision, method)
        return fields.emit(y, out)

    def inference_arrays(self, x):
        """``{'kernel': [k', k', Ci, features * |G|]}``: ``K = sum_b w_b Phi_b`` expanded once
        (:func:`invjax.ops.e2.expand_lift`), the stride-2 box folded in where
        :func:`invjax.ops.conv.conv2d` folds it on ``x`` (``k' = k + 1``), else ``k' = k``."""
        w = self.get_variable("params", "weight")
        kernel = ops.expand_lift(w, self.basis(self.group), self.precision)
        return {"kernel": inference_kernel(kernel, x.shape, self.stride, self.downsample)}

    def inference_call(self, arrays, x):
        """The layer from :meth:`inference_arrays`: one plain convolution, lowered as the
        training form is (:func:`lowering_choice`)."""
        return conv2d(
            x,
            arrays["kernel"],
            self.stride,
            downsample=self.downsample,
            precision=self.precision,
            method=lowering_choice(self, x.shape),
        )


class E2Conv(Exact, Typed, Exportable, Precise, nn.Module):
    """Group convolution on regular fields: ``[B, H, W, Ci * |G|]`` -> ``[B, H', W', features * |G|]``.

    With ``trivial_out=True`` the output fields are invariant: ``[B, H', W', features]``.
    """

    features: int
    """Number of output fields ``C_out`` (an integer >= 1): ``features * |G|`` channels of
    regular fields, or ``features`` invariant channels with ``trivial_out``."""
    group: Group = D4
    """The symmetry group ``G``, ``C_N`` (N rotations) or ``D_N`` (N rotations and flips): a
    :class:`invjax.groups.Group` or its name, e.g. ``"D4"``, ``"C8"``, ``"D1"`` (parsed once
    when the layer is built). Default ``D4`` (``|G| = 8``)."""
    kernel_size: int = 3
    """Filter size ``k`` in taps (odd): the steerable basis is sampled on the ``K x K`` grid,
    ``K = dilation * (k - 1) + 1``."""
    stride: int = 1
    """1 (``SAME`` output, ``H x W``) or 2 (output ``ceil(H / 2) x ceil(W / 2)``, sampled by the
    ``downsample`` rule; :mod:`invjax.ops.conv` explains the grid symmetry)."""
    dilation: int = 1
    """Spread of the basis (an integer >= 1): the filter is a dense ``K x K`` kernel with
    ``K = dilation * (k - 1) + 1``, whose default ring radii and widths are multiplied by
    ``dilation`` (:mod:`invjax.bases.e2`)."""
    trivial_out: bool = False
    """If true, the output fields are invariant (the trivial representation),
    ``[B, H', W', features]``, instead of regular: the paper's last E(2) layer
    (``n_r = 1, n_F = 1``)."""
    frequency_cutoff: float | None = None
    """The basis' band limit: ``None`` is e2cnn ``R2Conv``'s default per-ring rule; a float
    ``F`` keeps angular frequencies ``|m| <= F pi r`` at ring radius ``r`` (``1.0`` in the
    paper's configs, :data:`invjax.bases.e2.E2CNN_EXPERIMENTS`)."""
    sigma: float | tuple[float, ...] | None = None
    """Width of the basis' Gaussian rings in pixels: one float for every ring or one per ring;
    ``None`` is e2cnn's per-ring rule (0.6, 0.4 on the outer ring, 0.005 at the centre, times
    ``dilation``); ``0.45`` in the paper's configs."""
    rings: tuple[float, ...] | None = None
    """Radii of the basis' rings in pixels; ``None``: ``0, 1, ..., (k - 1) // 2`` times
    ``dilation``."""
    downsample: str = "symmetric"
    """The stride-2 rule on even grids, one of :data:`invjax.ops.conv.DOWNSAMPLE_RULES`:
    ``"symmetric"`` (2x2 box folded into the kernel: exact for 90-degree rotations and flips),
    ``"strided"`` (plain strided samples, as e2cnn; not exact on even grids) or ``"maxpool"``
    (stride 1, then 2x2 max pooling). Unused with ``stride=1``."""
    precision: str | None = None
    """The arithmetic of the convolution and the kernel expansion: a mode of
    :mod:`invjax.precision` (``"highest"``, ``"default"``, ``"bf16"``, ``"exact_fast"``, or a
    CPU emulation such as ``"exact_fast@tf32"``); ``None``: JAX's default matmul precision."""

    basis = _steerable_basis

    def __post_init__(self):
        as_group_fields(self, "group")
        super().__post_init__()

    exact_group = _conv_exact_group

    lowering: str = "auto"
    """How the convolution is computed: a name of :data:`invjax.ops.lowering.E2_LOWERINGS`
    (speed and memory only, the same sums to float32 rounding); ``'auto'`` chooses per layer
    and backend (:func:`lowering_choice`). Flax's ``init`` runs the direct form, one operation,
    whatever the choice (:func:`call_method`)."""

    def out_type(self, in_type: FieldType) -> FieldType:
        """regular ``group`` -> regular ``group`` (trivial with ``trivial_out``)."""
        _regular_in(self, in_type, f"E2Conv({self.group.name})")
        return fields.TRIVIAL if self.trivial_out else in_type

    def in_type(self) -> FieldType:
        return FieldType.regular_type(self.group)

    @nn.compact
    def __call__(self, x):
        g = self.group
        x, out = fields.accept(x, self.out_type, "E2Conv")
        _check_features(self.features, "E2Conv")
        _check_channels(x, g.order, f"E2Conv({g.name})")
        ci = x.shape[-1] // g.order
        phi = self.basis(g)
        nb = phi.shape[1]
        init = _he(ci * g.order, nb)
        method = call_method(self, x.shape)
        conv_args = (self.stride, self.downsample, self.precision, method)
        if self.trivial_out:
            w = self.param("weight", init, (ci, self.features, nb))
            return fields.emit(ops.trivial_conv(x, w, phi, *conv_args), out)
        w = self.param("weight", init, (ci, self.features, g.order, nb))
        return fields.emit(ops.group_conv(x, w, phi, g, *conv_args), out)

    def inference_arrays(self, x):
        """``{'kernel': [k', k', Ci |G|, features * |G|]}`` (``[.., features]`` with
        ``trivial_out``): the expanded kernel (:func:`invjax.ops.e2.expand_regular` /
        ``expand_to_trivial``), box-folded as in :meth:`E2LiftConv.inference_arrays`."""
        g = self.group
        w = self.get_variable("params", "weight")
        phi = self.basis(g)
        p = self.precision
        kernel = (
            ops.expand_to_trivial(w, phi, p)
            if self.trivial_out
            else ops.expand_regular(w, phi, g, p)
        )
        return {"kernel": inference_kernel(kernel, x.shape, self.stride, self.downsample)}

    def inference_call(self, arrays, x):
        """The layer from :meth:`inference_arrays`: one plain convolution, lowered as the
        training form is (:func:`lowering_choice`)."""
        return conv2d(
            x,
            arrays["kernel"],
            self.stride,
            downsample=self.downsample,
            precision=self.precision,
            method=lowering_choice(self, x.shape),
        )


class GroupPool(Exact, Typed, nn.Module):
    """Max (or mean) over each field's group channels: ``[..., C * |G|] -> [..., C]``."""

    group: Group = D4
    """The input fields' group ``G`` (``C_N`` or ``D_N``): a :class:`invjax.groups.Group` or a
    name such as ``"D4"``; the input has ``C * |G|`` channels. Default ``D4``."""
    reduce: str = "max"
    """``"max"`` (group max pooling, e2cnn's ``GroupPooling``) or ``"mean"`` over each field's
    ``|G|`` channels."""

    def __post_init__(self):
        as_group_fields(self, "group")
        super().__post_init__()

    def exact_group(self, input_shape) -> Group:
        del input_shape
        return self.group

    def out_type(self, in_type: FieldType) -> FieldType:
        """regular ``group`` -> trivial."""
        _regular_in(self, in_type, f"GroupPool({self.group.name})")
        return fields.TRIVIAL

    def in_type(self) -> FieldType:
        return FieldType.regular_type(self.group)

    @nn.compact
    def __call__(self, x):
        g = self.group
        x, out = fields.accept(x, self.out_type, "GroupPool")
        _check_channels(x, g.order, f"GroupPool({g.name})")
        return fields.emit(ops.group_pool(x, g.order, self.reduce), out)


class Restrict(Exact, Typed, nn.Module):
    """Restriction of regular fields from ``group`` to a subgroup (D8 -> D4 -> D1, C8 -> C4 ...).

    ``[..., C * |G|] -> [..., C * [G:H] * |H|]``: a static channel relabelling, so the channel count
    is unchanged and the layer is exactly equivariant to the subgroup.
    """

    group: Group
    """The input fields' group ``G`` (``C_N`` or ``D_N``): a :class:`invjax.groups.Group` or a
    name such as ``"D8"``."""
    subgroup: Group
    """The output fields' group ``H``, a subgroup of ``group`` (``D4`` or ``C8`` of ``D8``,
    ``D1`` of ``D4``, ...): a :class:`invjax.groups.Group` or a name; one clear error
    otherwise."""

    def __post_init__(self):
        as_group_fields(self, "group", "subgroup")
        check_chain((self.group, self.subgroup))  # one clear error for a non-subgroup
        super().__post_init__()

    def exact_group(self, input_shape) -> Group:
        del input_shape
        return self.subgroup

    def out_type(self, in_type: FieldType) -> FieldType:
        """regular ``group`` -> regular ``subgroup``."""
        _regular_in(self, in_type, f"Restrict({self.group.name}->{self.subgroup.name})")
        return FieldType.regular_type(self.subgroup)

    def in_type(self) -> FieldType:
        return FieldType.regular_type(self.group)

    @nn.compact
    def __call__(self, x):
        g, h = self.group, self.subgroup
        x, out = fields.accept(x, self.out_type, "Restrict")
        _check_channels(x, g.order, f"Restrict({g.name}->{h.name})")
        return fields.emit(ops.restrict(x, g, h), out)


class E2BatchNorm(Exact, Typed, Exportable, nn.Module):
    """Batch normalisation with statistics, scale and bias shared within each field.

    Sharing over the ``|G|`` channels of a field keeps the layer equivariant (the group permutes
    those channels). Statistics are taken over batch, space and the ``|G|`` channels of each
    field: ``mean``, ``var``, ``scale`` and ``bias`` are ``[C]`` for ``C * |G|`` channels.
    """

    group: Group | None = D4
    """The fields' group ``G`` (a :class:`invjax.groups.Group` or a name such as ``"D4"``):
    statistics are shared within each block of ``|G|`` channels. ``None`` or ``"C1"``: ordinary
    per-channel batch norm. Default ``D4``."""
    momentum: float = 0.9
    """Decay of the running statistics, as Flax's:
    ``running = momentum * running + (1 - momentum) * batch``."""
    epsilon: float = 1e-5
    """Added to the variance before the square root:
    ``y = (x - mean) / sqrt(var + epsilon) * scale + bias``."""

    def __post_init__(self):
        as_group_fields(self, "group")
        super().__post_init__()

    def exact_group(self, input_shape) -> Group:
        del input_shape
        return Group(1, False) if self.group is None else self.group

    def out_type(self, in_type: FieldType) -> FieldType:
        """Any type whose fields the statistics' blocks of ``|G|`` channels hold whole (regular
        H with ``|H|`` dividing ``|G|``, e.g. the fields of a restriction; or trivial), kept:
        each block is then a union of fields that the group only permutes within."""
        order = 1 if self.group is None else self.group.order
        if order % in_type.size or (
            in_type.kind == "regular" and order > 1 and not is_subgroup(in_type.group, self.group)
        ):
            name = "C1" if self.group is None else self.group.name
            raise fields.mismatch(
                f"E2BatchNorm({name})", f"regular fields of a subgroup of {name}", in_type
            )
        return in_type

    def in_type(self) -> FieldType:
        return fields.TRIVIAL  # any type it accepts; trivial is the one every group takes

    @nn.compact
    def __call__(self, x, train: bool = False):
        order = 1 if self.group is None else self.group.order
        x, out = fields.accept(x, self.out_type, "E2BatchNorm")
        _check_channels(x, order, "E2BatchNorm")
        c = x.shape[-1] // order
        ra_mean = self.variable("batch_stats", "mean", lambda: jnp.zeros((c,), jnp.float32))
        ra_var = self.variable("batch_stats", "var", lambda: jnp.ones((c,), jnp.float32))
        scale = self.param("scale", nn.initializers.ones, (c,))
        bias = self.param("bias", nn.initializers.zeros, (c,))
        if train:
            mean, var = ops.field_moments(x, order)
            if not self.is_initializing():
                ra_mean.value = self.momentum * ra_mean.value + (1 - self.momentum) * mean
                ra_var.value = self.momentum * ra_var.value + (1 - self.momentum) * var
        else:
            mean, var = ra_mean.value, ra_var.value
        y = ops.field_batch_norm(x, mean, var, scale, bias, self.epsilon, order)
        return fields.emit(y, out)

    def inference_arrays(self, x):
        """Eval mode folded into one per-channel affine map ``y = x * a + s`` (``[C |G|]`` each):
        ``a = scale / sqrt(var + eps)``, ``s = bias - mean * a``, repeated over each field."""
        del x
        order = 1 if self.group is None else self.group.order
        mean = self.get_variable("batch_stats", "mean")
        var = self.get_variable("batch_stats", "var")
        mul = self.get_variable("params", "scale") * jax.lax.rsqrt(var + self.epsilon)
        add = self.get_variable("params", "bias") - mean * mul
        return {"scale": jnp.repeat(mul, order), "shift": jnp.repeat(add, order)}

    def inference_call(self, arrays, x):
        """``x * a + s`` (eval mode only)."""
        return x * arrays["scale"] + arrays["shift"]
