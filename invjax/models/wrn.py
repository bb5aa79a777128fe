"""One pre-activation Wide-ResNet for the three convolution families of the paper (``name='wrn'``).

``family='std'``: the baseline WRN (Zagoruyko & Komodakis 2016). ``family='e2'``: E(2)-steerable
convolutions over regular fields (E(2)-STCNN, Weiler & Cesa 2019; appendix Tables 9, 11, 14).
``family='scale'``: DISCO / SESN scale convolutions (appendix Tables 10, 12, 15). The head is
either Invariant Integration (``head='ii'``: E(2)-II eq. 5, Scale-II WS eq. 7 followed by
BatchNorm, translation-II for ``std``) or global average pooling (``head='pool'``, the "x" rows
of Tables 3 and 4).

Layout (``n = (depth - 4) / 6`` blocks per stage, widths ``[16, 16k, 32k, 64k]``)::

    stem (3 -> 16)  ->  stage 1 (n blocks, stride first_stride)  ->  [restrict]
                    ->  stage 2 (n blocks, stride 2)  ->  [restrict]  ->  stage 3 (stride 2)
                    ->  BN -> ReLU  ->  head (II | pool)  ->  Dense(num_classes)

Block (pre-activation, as both peers and the tables)::

    x_n = ReLU(BN(x));  y = conv1(x_n, stride);  y = ReLU(BN(y));  y = Dropout(y);  y = conv2(y)
    return y + (shortcut_1x1(x_n, stride) if width, stride or field type change else x)

Dropout therefore acts on the input of the second convolution of each block (the ticks in the
tables' Dropout column). The stride sits on the first convolution, as the tables list the reduced
size at ``Conv s.1`` (e2cnn strides the second one; the parameter count is the same).

Families
  ``e2``: stem ``E2LiftConv`` 5x5 (e2cnn always lifts with 5x5); block convolutions 3x3 where the
  rotation order is 1, 2 or 4, else 5x5 (e2cnn's rule). Per-stage groups, e.g. ``('D8', 'D4',
  'D1')`` for STL-10, with :class:`~invjax.layers.e2.Restrict` between stages (a channel
  relabelling). Widths by e2cnn's "fixparams" rule ``int(planes / |G| * sqrt(|G|))`` fields: 4 /
  40 / 113 / 226 for WRN28-10 with D8, D4, D4. The last convolution of stage 3 (and its 1x1
  shortcut) maps to *trivial* fields: the baseline width ``64k`` (``e2_out_width='baseline'``:
  640 for WRN28-10, 256 for WRN16-4, 512 for WRN16-8; the paper's E(2)-II tables) or e2cnn's
  ``int(64k sqrt(|G|))`` (``'e2cnn'``, its ``conv2triv``). BatchNorm shares statistics within
  each field (:class:`~invjax.layers.e2.E2BatchNorm`); the first one after a restriction over the
  larger group's fields, as e2cnn. The basis: ``e2_frequency_cutoff`` and ``e2_sigma`` of
  :mod:`invjax.bases.e2` (None: ``R2Conv``'s defaults; the paper's configs use e2cnn_experiments'
  ``F=1, sigma=0.45``, which makes every pooling row's count equal to e2cnn's). E(2)-II integrates over
  ``ii_group`` (default: the last stage's group; D8 for SVHN, D4 for CIFAR-10, D1 for STL-10).
  The network is then exactly invariant (float32 rounding) to every 90-degree rotation and flip
  that this group contains, on any square input whose sizes stay even at every stride-2 layer or
  odd throughout, with a grid-symmetric downsampling rule (``symmetric``, the E(2) default, or
  ``maxpool``): :func:`invjax.ops.conv.conv2d` folds a 2x2 box into stride-2 kernels on even
  grids so that the kept samples stay symmetric about the image centre.

Downsampling (``downsample``, None = the family's peer rule :data:`DEFAULT_DOWNSAMPLE`):
``strided`` (plain stride 2: the WRN paper's and e2cnn's own; not symmetric on even grids),
``symmetric`` (the box rule above) or ``maxpool`` (stride-1 convolution + 2x2 max pool: DISCO's).
Defaults: std ``strided``, scale ``maxpool``, e2 ``symmetric``.
  ``family='scale'``: features ``[B, H, W, S, C]``. Stem ``ScaleLiftConv``, blocks
  ``ScaleConv`` with ``scale_size=1`` (kernel 5, effective size 3, scales ``(1, sqrt 2, 2)`` as
  DISCO's STL-10 WRN), scale-shared BatchNorm, 1x1 shortcuts shared over scales; with
  ``relift[s]`` the first block of stage ``s`` max-projects and lifts again (DISCO's
  ``pools=[False, True, True]``). Stride 2 by default as DISCO: a stride-1 convolution and a 2x2
  max pool (conv1 and the shortcut). Final: scale max projection -> BN -> ReLU (DISCO's order) ->
  Scale-II WS -> BatchNorm (the paper: "to stabilize the gradients through the division") or
  average pooling.

Constant-parameter streams: ``width_divisor`` divides every channel / field count ``C`` into
``ceil(C / width_divisor)`` (``sqrt(2)`` dual, ``sqrt(3)`` triple network).

Outputs: ``module.apply(v, x, train=False)`` -> logits ``[B, num_classes]``;
``module.apply(v, x, method='features')`` (or ``features_only=True``) -> the invariant features
``[B, C]`` that enter the classifier (the multi-stream networks combine these).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import flax.linen as nn
import jax.numpy as jnp

from invjax import groups as G
from invjax import precision as P
from invjax.contract import Exact, Exportable, Precise
from invjax.layers import e2 as e2l
from invjax.layers import ii as iil
from invjax.models import register
from invjax.models.common import StdConv, divide_width, e2_fields
from invjax.ops.conv import check_downsample, conv2d, inference_kernel, max_pool2
from invjax.ops.scale import LOWERINGS

FAMILIES = ("std", "e2", "scale")
HEADS = ("ii", "pool")
DEPTHS = (10, 16, 22, 28, 34, 40)
BN_MOMENTUM = 0.9  # Flax convention: running = 0.9 running + 0.1 batch (PyTorch's 0.1)
BN_EPSILON = 1e-5
# The peers' own downsampling per family (see :mod:`invjax.ops.conv`): the WRN paper's strided
# convolutions, DISCO's stride-1 convolution + 2x2 max pooling, and for E(2) the grid-symmetric
# box rule that keeps the networks exactly invariant (e2cnn itself strides).
DEFAULT_DOWNSAMPLE = {"std": "strided", "e2": "symmetric", "scale": "maxpool"}
E2_OUT_WIDTHS = ("baseline", "e2cnn")


def _scale_layers():
    # Imported lazily so that the std / E(2) networks do not depend on the scale bases.
    from invjax.layers import scale as scale_layers

    return scale_layers


def e2_kernel_size(group: G.Group) -> int:
    """e2cnn's block kernel: 3x3 where the rotation order is 1, 2 or 4, else 5x5."""
    return 3 if group.n_rotations in (1, 2, 4) else 5


def check_config(
    family: str,
    depth: int,
    widen_factor: int,
    groups: Sequence[G.Group | str],
    head: str,
    first_stride: int,
    dropout: float,
    width_divisor: float,
) -> None:
    """One clear ValueError for an impossible WRN configuration (before any compute)."""
    if family not in FAMILIES:
        raise ValueError(f"WRN family={family!r} is unknown: choose one of {FAMILIES}")
    if not isinstance(depth, int) or depth < 10 or (depth - 4) % 6:
        raise ValueError(f"WRN depth={depth!r} is invalid: it must be 6n+4 >= 10, e.g. {DEPTHS}")
    if not isinstance(widen_factor, int) or widen_factor < 1:
        raise ValueError(f"WRN widen_factor={widen_factor!r} is invalid: it must be an int >= 1")
    if head not in HEADS:
        raise ValueError(f"WRN head={head!r} is unknown: choose one of {HEADS}")
    if first_stride not in (1, 2):
        raise ValueError(f"WRN first_stride={first_stride!r} is invalid: choose 1 or 2")
    if not 0.0 <= dropout < 1.0:
        raise ValueError(f"WRN dropout={dropout!r} is invalid: it must be in [0, 1)")
    divide_width(1, width_divisor)
    if family == "e2":
        if len(groups) != 3:
            raise ValueError(
                f"WRN groups={tuple(groups)!r} is invalid: give one group per stage, e.g. "
                "('D8', 'D4', 'D4')"
            )
        G.check_chain(groups)


def wrn_widths(
    family: str,
    widen_factor: int,
    groups: Sequence[G.Group] = (),
    stem_width: int = 16,
    width_divisor: float = 1.0,
    e2_out_width: str = "baseline",
) -> dict:
    """Channel counts (fields for ``e2``): ``{'stem', 'stages': (3,), 'out'}``.

    ``out`` is the width of the invariant features (the trivial fields of the last E(2) layer):
    the baseline's ``64k`` (``e2_out_width='baseline'``, the paper's E(2)-II tables) or e2cnn's
    ``int(64k sqrt(|G|))`` trivial fields of the last group (``'e2cnn'``, its ``conv2triv``).
    """
    k = widen_factor
    planes = (16 * k, 32 * k, 64 * k)
    if family == "e2":
        stem = e2_fields(stem_width, groups[0])
        stages = tuple(e2_fields(p, g) for p, g in zip(planes, groups))
    else:
        stem, stages = stem_width, planes
    out = planes[2]
    if family == "e2" and e2_out_width == "e2cnn":
        out = int(planes[2] * math.sqrt(groups[-1].order))
    d = width_divisor
    return {
        "stem": divide_width(stem, d),
        "stages": tuple(divide_width(c, d) for c in stages),
        "out": divide_width(out, d),
    }


class ScalePointwiseConv(Exportable, Precise, nn.Module):
    """1x1 convolution shared over scales (SESN's ``SESConv_H_H_1x1``), via :func:`conv2d`.

    Shapes: ``[B, H, W, S, C_in] -> [B, H', W', S, features]``.
    """

    features: int
    stride: int = 1
    downsample: str = "symmetric"
    precision: str | None = None  # arithmetic of the products (invjax.precision; None: JAX's)

    @nn.compact
    def __call__(self, x):
        kernel = self.param(
            "kernel",
            nn.initializers.variance_scaling(2.0, "fan_in", "normal"),
            (1, 1, x.shape[-1], self.features),
        )
        return self._apply(x, kernel)

    def _apply(self, x, kernel):
        b, h, w, s, c = x.shape
        y = jnp.moveaxis(x, 3, 1).reshape(b * s, h, w, c)
        y = conv2d(y, kernel, self.stride, downsample=self.downsample, precision=self.precision)
        y = y.reshape(b, s, y.shape[1], y.shape[2], self.features)
        return jnp.moveaxis(y, 1, 3)

    def inference_arrays(self, x):
        """``{'kernel': [k', k', C_in, features]}``: box-folded where :func:`conv2d` folds it on
        ``x`` (``k' = 2`` for stride 2 on an even grid with the symmetric rule, else 1)."""
        kernel = self.get_variable("params", "kernel")
        return {"kernel": inference_kernel(kernel, x.shape, self.stride, self.downsample)}

    def inference_call(self, arrays, x):
        """The layer from :meth:`inference_arrays`."""
        return self._apply(x, arrays["kernel"])


@dataclasses.dataclass(frozen=True)
class ConvSpec:
    """Static settings of a convolution family (hashable: a field of the Linen modules)."""

    family: str = "std"
    scales: tuple[float, ...] = G.DEFAULT_SCALES
    scale_kernel_size: int = 5
    scale_effective_size: int = 3
    scale_basis: str = "disco"
    downsample: str = "symmetric"
    e2_frequency_cutoff: float | None = None
    e2_sigma: float | None = None
    precision: str | None = None
    scale_lowering: str = "auto"

    def width(self, x, group) -> int:
        """Channels (std, scale) or fields (e2) of a feature map."""
        if self.family == "e2":
            return x.shape[-1] // group.order
        return x.shape[-1]

    def bn(self, group, name):
        """BatchNorm of the family: per channel, shared within fields (e2) or over scales."""
        if self.family == "std":
            return lambda x, train: nn.BatchNorm(
                use_running_average=not train,
                momentum=BN_MOMENTUM,
                epsilon=BN_EPSILON,
                name=name,
            )(x)
        if self.family == "e2":
            return lambda x, train: e2l.E2BatchNorm(
                group, momentum=BN_MOMENTUM, epsilon=BN_EPSILON, name=name
            )(x, train)
        sl = _scale_layers()
        return lambda x, train: sl.ScaleBatchNorm(
            momentum=BN_MOMENTUM, epsilon=BN_EPSILON, name=name
        )(x, train)

    def _e2(self):
        return dict(
            frequency_cutoff=self.e2_frequency_cutoff,
            sigma=self.e2_sigma,
            downsample=self.downsample,
            precision=self.precision,
        )

    def conv(self, features, stride, group, name, trivial_out=False, lift=False):
        """Stem (``lift``) or block convolution of the family."""
        if self.family == "std":
            return StdConv(
                features, 3, stride, downsample=self.downsample, precision=self.precision, name=name
            )
        if self.family == "e2":
            if lift:
                return e2l.E2LiftConv(features, group, 5, stride, name=name, **self._e2())
            return e2l.E2Conv(
                features,
                group,
                e2_kernel_size(group),
                stride,
                trivial_out=trivial_out,
                name=name,
                **self._e2(),
            )
        sl = _scale_layers()

        def make(s):
            common = dict(
                kernel_size=self.scale_kernel_size,
                effective_size=self.scale_effective_size,
                scales=tuple(self.scales),
                basis=self.scale_basis,
                stride=s,
                precision=self.precision,
                name=name,
            )
            if lift:
                return sl.ScaleLiftConv(features, **common)
            return sl.ScaleConv(features, scale_size=1, lowering=self.scale_lowering, **common)

        return self._pooled(make, stride)

    def _pooled(self, make, stride):
        """Scale layers stride by :func:`conv2d`'s symmetric rule; DISCO's ``maxpool`` rule is a
        stride-1 layer and a 2x2 max pool over ``H, W`` of ``[B, H, W, S, C]`` (even grids)."""
        if stride == 1 or self.downsample == "symmetric":
            return make(stride)

        def apply(x):
            if x.shape[1] % 2:  # odd grid: the plain strided layer is already symmetric
                return make(stride)(x)
            return max_pool2(make(1)(x), axes=(1, 2))

        return apply

    def shortcut(self, features, stride, group, name, trivial_out=False):
        """1x1 projection shortcut of the family."""
        if self.family == "std":
            return StdConv(
                features, 1, stride, downsample=self.downsample, precision=self.precision, name=name
            )
        if self.family == "e2":
            return e2l.E2Conv(
                features, group, 1, stride, trivial_out=trivial_out, name=name, **self._e2()
            )
        return ScalePointwiseConv(features, stride, self.downsample, self.precision, name=name)


class WRNBlock(nn.Module):
    """Pre-activation residual block of :class:`WideResNet` (see the module docstring).

    ``group``: the E(2) group of the block (None otherwise); ``in_group``: the group whose fields
    the input BatchNorm shares over (the previous stage's after a restriction, as e2cnn);
    ``trivial_out`` (E(2) only) makes the
    output invariant fields (``conv1`` keeps ``inner_features`` regular fields, e2cnn's
    ``inner_fiber``); ``relift`` (scale only) max-projects before ``conv1`` and lifts again.
    """

    spec: ConvSpec
    features: int
    group: G.Group | None = None
    inner_features: int | None = None
    stride: int = 1
    dropout: float = 0.0
    trivial_out: bool = False
    relift: bool = False
    in_group: G.Group | None = None

    @nn.compact
    def __call__(self, x, train: bool = False):
        spec = self.spec
        in_width = spec.width(x, self.group)
        inner = self.inner_features or self.features
        # After a restriction e2cnn keeps each field of the larger group as one field (its
        # DisentangleModule), so the first BatchNorm shares statistics over those |G| channels.
        x_n = nn.relu(spec.bn(self.in_group or self.group, "bn1")(x, train))
        if self.relift:
            y = _scale_layers().ScaleMaxProjection()(x_n)
            y = spec.conv(inner, self.stride, None, "conv1", lift=True)(y)
        else:
            y = spec.conv(inner, self.stride, self.group, "conv1")(x_n)
        y = nn.relu(spec.bn(self.group, "bn2")(y, train))
        y = nn.Dropout(self.dropout, deterministic=not train)(y)
        y = spec.conv(self.features, 1, self.group, "conv2", trivial_out=self.trivial_out)(y)
        if self.stride != 1 or in_width != self.features or self.trivial_out:
            short = spec.shortcut(
                self.features, self.stride, self.group, "shortcut", self.trivial_out
            )(x_n)
        else:
            short = x
        return y + short


class WideResNet(Exact, Precise, nn.Module):
    """Pre-activation Wide-ResNet ``WRN{depth}-{widen_factor}`` of one convolution family.

    Shapes: ``[B, H, W, C] -> [B, num_classes]`` (``features``: ``[B, C_out]``). See the module
    docstring for the layout, the width rule and the exactness conditions.
    """

    family: str = "std"
    depth: int = 16
    widen_factor: int = 4
    num_classes: int = 10
    dropout: float = 0.0
    head: str = "ii"
    first_stride: int = 1
    width_divisor: float = 1.0
    stem_width: int = 16
    ii_kernel_size: int = 3
    # E(2)
    groups: tuple[G.Group, ...] = (G.dihedral(8),) * 3
    ii_group: G.Group | None = None
    ii_interpolation: str = "bilinear"
    # scale
    scales: tuple[float, ...] = G.DEFAULT_SCALES
    scale_kernel_size: int = 5
    scale_effective_size: int = 3
    scale_basis: str = "disco"
    relift: tuple[bool, bool, bool] = (False, False, False)
    # peer parity: the downsampling rule (None: the family's peer rule, DEFAULT_DOWNSAMPLE), the
    # E(2) basis (None: e2cnn's R2Conv defaults; the configs use e2cnn_experiments' F=1,
    # sigma=0.45) and the width of the last E(2) layer ('baseline' 64k or 'e2cnn').
    downsample: str | None = None
    e2_frequency_cutoff: float | None = None
    e2_sigma: float | None = None
    e2_out_width: str = "baseline"
    # Arithmetic of every product (invjax.precision; None: JAX's default_matmul_precision) and
    # how scale convolutions are lowered (invjax.ops.scale.LOWERINGS; same results).
    precision: str | None = None
    scale_lowering: str = "auto"

    def __post_init__(self):
        # Group names ('D8', from a config) become Group objects once, here; the layers take them.
        G.as_group_fields(self, "groups", "ii_group")
        check_config(
            self.family,
            self.depth,
            self.widen_factor,
            self.groups,
            self.head,
            self.first_stride,
            self.dropout,
            self.width_divisor,
        )
        if self.downsample is not None:
            check_downsample(self.downsample)
            if self.family == "scale" and self.downsample == "strided":
                raise ValueError(
                    "WRN downsample='strided' is not available for family='scale': choose "
                    "'maxpool' (DISCO's) or 'symmetric'"
                )
        if self.e2_out_width not in E2_OUT_WIDTHS:
            raise ValueError(
                f"WRN e2_out_width={self.e2_out_width!r} is unknown: choose one of {E2_OUT_WIDTHS}"
            )
        P.check(self.precision, "WRN precision", allow_none=True)
        if self.scale_lowering not in LOWERINGS:
            raise ValueError(
                f"WRN scale_lowering={self.scale_lowering!r} is unknown: choose one of {LOWERINGS}"
            )
        if len(self.relift) != 3:
            raise ValueError(
                f"WRN relift={self.relift!r} is invalid: give one flag per stage, e.g. "
                "(False, True, True)"
            )
        super().__post_init__()

    @property
    def widths(self) -> dict:
        return wrn_widths(
            self.family,
            self.widen_factor,
            self.groups,
            self.stem_width,
            self.width_divisor,
            self.e2_out_width,
        )

    @property
    def blocks_per_stage(self) -> int:
        return (self.depth - 4) // 6

    @property
    def downsample_rule(self) -> str:
        return self.downsample or DEFAULT_DOWNSAMPLE[self.family]

    @property
    def spec(self) -> ConvSpec:
        return ConvSpec(
            self.family,
            tuple(self.scales),
            self.scale_kernel_size,
            self.scale_effective_size,
            self.scale_basis,
            self.downsample_rule,
            self.e2_frequency_cutoff,
            self.e2_sigma,
            self.precision,
            self.scale_lowering,
        )

    def _check_input(self, x):
        if x.ndim != 4:
            raise ValueError(f"WideResNet: expected NHWC images [B, H, W, C], got shape {x.shape}")

    @nn.compact
    def __call__(self, x, train: bool = False, features_only: bool = False):
        self._check_input(x)
        spec = self.spec
        w = self.widths
        groups = tuple(self.groups) if self.family == "e2" else (None, None, None)
        x = spec.conv(w["stem"], 1, groups[0], "stem", lift=True)(x)
        n = self.blocks_per_stage
        for s in range(3):
            if s and self.family == "e2" and groups[s] != groups[s - 1]:
                x = e2l.Restrict(groups[s - 1], groups[s], name=f"restrict{s}")(x)
            for b in range(n):
                last = s == 2 and b == n - 1
                trivial = last and self.family == "e2"
                x = WRNBlock(
                    spec,
                    w["out"] if trivial else w["stages"][s],
                    groups[s],
                    inner_features=w["stages"][s],
                    stride=(self.first_stride if s == 0 else 2) if b == 0 else 1,
                    dropout=self.dropout,
                    trivial_out=trivial,
                    relift=bool(self.relift[s]) and b == 0 and self.family == "scale",
                    in_group=groups[s - 1] if s and b == 0 else None,
                    name=f"block{s + 1}_{b + 1}",
                )(x, train)
        feats = self._head(x, train)
        if features_only:
            return feats
        dot = P.dense_dot_general(self.precision)
        return nn.Dense(self.num_classes, dot_general=dot, name="classifier")(feats)

    def _head(self, x, train):
        c = x.shape[-1]
        if self.family == "scale":
            x = _scale_layers().ScaleMaxProjection(name="projection")(x)
        # Trivial fields (E(2)) and max-projected maps (scale) take a per-channel BatchNorm.
        x = nn.BatchNorm(
            use_running_average=not train, momentum=BN_MOMENTUM, epsilon=BN_EPSILON, name="bn"
        )(x)
        x = nn.relu(x)
        k = self.ii_kernel_size
        if self.head == "pool":
            return iil.AveragePooling(name="pool")(x, train)
        prec = self.precision
        if self.family == "std":
            return iil.TranslationInvariantIntegration(c, k, precision=prec, name="ii")(x, train)
        if self.family == "e2":
            group = self.ii_group or self.groups[-1]
            return iil.E2InvariantIntegration(
                c, group, k, self.ii_interpolation, precision=prec, name="ii"
            )(x, train)
        y = iil.ScaleInvariantIntegration(c, k, precision=prec, name="ii")(x, train)
        return nn.BatchNorm(
            use_running_average=not train,
            momentum=BN_MOMENTUM,
            epsilon=BN_EPSILON,
            name="ii_bn",
        )(y)

    def features(self, x, train: bool = False):
        """Invariant features ``[B, C_out]`` (the classifier's input)."""
        return self(x, train, features_only=True)

    def exact_group(self, input_shape) -> G.Group:
        """The group whose elements the logits and features are invariant to on images of
        ``input_shape`` (:func:`invjax.equivariance.exact_group`): for ``e2``, the last stage's
        group (its trivial fields), met with the II group for ``head='ii'`` (the integral); none
        for the other families, or where a plain stride-2 sample meets an even grid."""
        if self.family != "e2":
            return G.cyclic(1)
        group = self.groups[-1]
        if self.head == "ii" and self.ii_group is not None:
            group = G.intersect(group, self.ii_group)
        if self.downsample_rule == "strided":
            h, w = input_shape[-3], input_shape[-2]
            for stride in (self.first_stride, 2, 2):
                if stride == 2:
                    if h % 2 == 0 or w % 2 == 0:
                        return G.cyclic(1)
                    h, w = -(-h // 2), -(-w // 2)
        return group


def _tuple(v):
    return tuple(v) if isinstance(v, list | tuple) else v


def from_config(config) -> WideResNet:
    """``config.model`` (name ``'wrn'``) -> :class:`WideResNet`; missing keys take the defaults.

    The config's group names (``groups``, ``ii_group``: ``'D8'`` ...) become :class:`Group`
    objects once, when the network is constructed; every layer below takes those objects. The
    arithmetic is not read here: the trainer sets it per step (``config.precision``,
    ``config.eval_precision``) with :func:`invjax.precision.configure`.
    """
    get = config.get
    kwargs = {}
    for field in (
        "family",
        "depth",
        "widen_factor",
        "dropout",
        "head",
        "first_stride",
        "width_divisor",
        "stem_width",
        "ii_kernel_size",
        "groups",
        "ii_group",
        "ii_interpolation",
        "scales",
        "scale_kernel_size",
        "scale_effective_size",
        "scale_basis",
        "relift",
        "downsample",
        "e2_frequency_cutoff",
        "e2_sigma",
        "e2_out_width",
        "scale_lowering",
    ):
        val = get(field, None)
        if val is not None:
            kwargs[field] = _tuple(val)
    kwargs["num_classes"] = get("num_classes", None) or 10
    return WideResNet(**kwargs)


@register("wrn")
def _build(config):
    return from_config(config)


__all__ = [
    "ConvSpec",
    "ScalePointwiseConv",
    "WRNBlock",
    "WideResNet",
    "e2_kernel_size",
    "from_config",
    "wrn_widths",
]
