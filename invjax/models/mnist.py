"""The Scaled-MNIST networks of Table 2 and appendix Table 7 (``name='mnist'``).

Three convolutions (32 / 63 / 95 channels) and two dense layers (256, 10), after a x2
upsampling of the 28 x 28 digits ("an upsampling layer to double the input size", Table 2)::

    upsample x2 -> conv1 -> ReLU -> pool 2x2 -> BN -> conv2 -> ReLU -> pool 2x2 -> BN -> conv3
      -> head -> Dense(256, no bias) -> BN -> ReLU -> Dropout -> Dense(10)

========================  ==================================================================
variant (config)          convolutions and head
========================  ==================================================================
CNN                       ``family='std'``: 7x7 convolutions with bias, max pooling; head
                          ``'maxpool'``: ReLU -> MaxPool 8 (padding 2) -> BN (SESN's CNN)
SES-CNN                   ``family='scale', basis='hermite'``: SESN scale convolutions
                          (kernel 15, effective size 7, 4 scales ``2**(i/3)``), max pooling,
                          head ``'maxpool'`` after the scale max projection (SESN)
DISCO                     ``basis='disco'``, average pooling between layers, head ``'mixed'``:
                          max projection, ReLU, MaxPool 7 stride 1, AvgPool 2 stride 4, BN
                          (:class:`~invjax.layers.ii.MixedPooling`, DISCO's code)
II-DISCO WS               ``head='ii'``: conv3 -> BN -> ReLU -> max projection -> Scale-II WS
                          (eq. 7, ``k = 3``, 95 -> 95), max pooling (Table 7); its clamp is
                          ``ii_epsilon``, and ``ii_divide=False`` keeps eq. 7's numerator alone
                          (an ablation, not scale-invariant)
II-DISCO monomials        ``head='ii_monomials'``: Scale-II with monomials (eq. 6) on each
                          channel's map, 95 -> 95 (Table 7; ``monomial_layout='channels'``),
                          25 shared pairs pruned to 12 and 5 during training (``on_epoch_end``);
                          ``ii_batchnorm`` adds BatchNorm after the II layer
========================  ==================================================================

Choices and discrepancies (documented, not hidden):

* Bases: ``basis`` is any kind of :mod:`invjax.bases.scale` (49 functions each, so the same
  parameter count). The Table 2 configs use the peers' type B: ``'hermite_b'`` for SES-CNN
  (SESN's ``mnist_ses_vector_56``), ``'disco_b_plus'`` for DISCO and II-DISCO (DISCO's
  ``disco_b`` as ``exp_mnist.sh`` runs it with scale augmentation); this class's default
  ``'disco'`` is the type-A DISCO basis (docs/differences.md, "Scale bases of the Scaled-MNIST
  networks").
* Scales: the text says ``n_S = 4`` scales (SESN/DISCO's ``2**(i/3)``, ``i < 4``), Table 7 lists
  ``n_S = 3``. The default is 4 (the shipped 15 x 15 DISCO basis has scales 1, 1.26, 1.59, 2);
  ``scales`` is a config key.
* Upsampling: ``'nearest'`` (default) is DISCO/SESN's ``nn.Upsample(scale_factor=2)``;
  ``'bicubic'`` uses :func:`invjax.groups.resize`; ``'none'`` keeps 28 x 28.
* Order in the last layer of the II variants: BatchNorm before ReLU, so that Scale-II reads the
  output of a ReLU as Section 4.3 requires (Table 7 ticks ReLU and BN without giving the order);
  the ReLU commutes with the max projection. The baselines keep SESN/DISCO's order
  (conv -> ReLU -> pool -> BN).
* Pooling between layers: max (SESN, CNN and Table 7) or average (DISCO's code): ``spatial_pool``.

Shapes: ``[B, 28, 28, 1] -> [B, 10]``; ``features``: ``[B, F]`` (``F = 380`` for the pooling heads,
95 for Scale-II WS and the per-channel monomials, ``n_pairs`` for ``monomial_layout='pairs'``).
"""

from __future__ import annotations

import flax.linen as nn
import jax.numpy as jnp
from jax import lax

from invjax import groups as G
from invjax import precision as P
from invjax.contract import EpochHooks, Precise
from invjax.layers import ii as iil
from invjax.models import register
from invjax.models.common import StdConv, divide_width, upsample

HEADS = ("maxpool", "mixed", "ii", "ii_monomials", "pool")
FAMILIES = ("std", "scale")
UPSAMPLING = ("nearest", "bicubic", "none")
PRUNING_KEEP = (12, 5)
"""Monomial pairs kept by the two prunings of ``head='ii_monomials'`` (25 at the start)."""
PRUNE_EPOCHS = (5, 10)
"""Epochs after which the paper prunes (Section 5: ``n_m = {25, 12, 5}`` after 0, 5 and 10 of
its 60 epochs); a model's ``prune_epochs`` may move them (the study scales them with its length)."""
PRUNING_SCHEDULE: dict[int, int] = dict(zip(PRUNE_EPOCHS, PRUNING_KEEP))
"""The paper's ``{epochs completed: monomial pairs kept}``."""


def _spatial_pool(x, kind: str, window: int = 2):
    """Non-overlapping ``window x window`` pooling of the two spatial axes (axes 1, 2)."""
    dims = (1, window, window) + (1,) * (x.ndim - 3)
    if kind == "max":
        return lax.reduce_window(x, -jnp.inf, lax.max, dims, dims, "VALID")
    return lax.reduce_window(x, 0.0, lax.add, dims, dims, "VALID") / (window * window)


def sesn_max_pool(x, window: int = 8, padding: int = 2):
    """``nn.MaxPool2d(window, padding=padding)`` of PyTorch (stride = window, -inf padding)."""
    pads = ((0, 0), (padding, padding), (padding, padding), (0, 0))
    dims = (1, window, window, 1)
    return lax.reduce_window(x, -jnp.inf, lax.max, dims, dims, pads)


class ScaledMNISTNet(EpochHooks, Precise, nn.Module):
    """CNN / SES-CNN / DISCO / II-DISCO (see the module docstring). ``[B, H, W, C] -> [B, 10]``."""

    family: str = "scale"
    basis: str = "disco"
    head: str = "ii"
    upsample: str = "nearest"
    widths: tuple[int, int, int] = (32, 63, 95)
    kernel_size: int = 15
    effective_size: int = 7
    scales: tuple[float, ...] = G.MNIST_SCALES
    spatial_pool: str = "max"
    hidden: int = 256
    dropout: float = 0.7
    num_classes: int = 10
    bn_momentum: float = 0.9
    ii_kernel_size: int = 3
    n_pairs: int = 25
    monomial_seed: int = 0
    monomial_placement: str = "neighbourhood"  # or "pointwise" (exactly scale-invariant, eq. 6)
    monomial_output: str = "ratio"  # or "log": log A, what fc1 can learn from (ops.ii docstring)
    # Table 7's "Scale-II 95 -> 95": eq. 6 per channel, one feature per channel ("channels"), or
    # one feature per pair of factors across channels ("pairs"); docs/monomials.md
    monomial_layout: str = "channels"
    monomial_divisor: str = "random"  # or "power": x_c(t)^K (ops.ii.MONOMIAL_DIVISORS)
    monomial_max_exponent: int = 2
    ii_epsilon: float = iil.ops.DEFAULT_EPSILON  # the Scale-II clamp (both heads)
    # head 'ii': False drops eq. 7's division by the mean (the WS alone; not scale-invariant)
    ii_divide: bool = True
    ii_batchnorm: bool = False  # BatchNorm after the II layer (the paper's Scale-II WRNs)
    # epochs after which the monomials are pruned to PRUNING_KEEP pairs (paper: PRUNE_EPOCHS)
    prune_epochs: tuple[int, int] = PRUNE_EPOCHS
    width_divisor: float = 1.0
    use_bias: bool = True
    precision: str | None = None  # arithmetic of every product (invjax.precision; None: JAX's)

    def __post_init__(self):
        if self.family not in FAMILIES:
            raise ValueError(f"mnist family={self.family!r} is unknown: choose one of {FAMILIES}")
        if self.head not in HEADS:
            raise ValueError(f"mnist head={self.head!r} is unknown: choose one of {HEADS}")
        if self.family == "std" and self.head not in ("maxpool", "pool"):
            raise ValueError(
                f"mnist head={self.head!r} needs scale features: the std CNN takes 'maxpool' or "
                "'pool'"
            )
        if self.upsample not in UPSAMPLING:
            raise ValueError(
                f"mnist upsample={self.upsample!r} is unknown: choose one of {UPSAMPLING}"
            )
        if self.spatial_pool not in ("max", "avg"):
            raise ValueError(f"mnist spatial_pool={self.spatial_pool!r}: choose 'max' or 'avg'")
        if len(self.widths) != 3:
            raise ValueError(f"mnist widths={self.widths!r}: give three channel counts")
        if self.head == "ii_monomials":
            iil.ops.check_monomial_output(self.monomial_output)
            if self.monomial_layout not in iil.MONOMIAL_LAYOUTS:
                raise ValueError(
                    f"mnist monomial_layout={self.monomial_layout!r} is unknown: choose one of "
                    f"{iil.MONOMIAL_LAYOUTS}"
                )
            if self.monomial_layout == "channels" and self.monomial_placement == "pointwise":
                raise ValueError(
                    "mnist monomial_placement='pointwise' needs monomial_layout='pairs': on one "
                    "channel's map every pointwise pair of equal orders is the constant 1"
                )
            e = tuple(self.prune_epochs)
            if len(e) != 2 or not all(isinstance(v, int) for v in e) or not 1 <= e[0] < e[1]:
                raise ValueError(
                    f"mnist prune_epochs={self.prune_epochs!r} is invalid: give two epochs "
                    "1 <= first < second (pruning to 12, then to 5 monomial pairs)"
                )
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"mnist dropout={self.dropout!r} is invalid: it must be in [0, 1)")
        divide_width(1, self.width_divisor)
        super().__post_init__()

    def _bn(self, name=None):
        if self.family == "scale":
            from invjax.layers.scale import ScaleBatchNorm

            return lambda x, train: ScaleBatchNorm(self.bn_momentum, name=name)(x, train)
        return lambda x, train: nn.BatchNorm(
            use_running_average=not train, momentum=self.bn_momentum, name=name
        )(x)

    def _conv(self, features, lift, name):
        if self.family == "std":
            return StdConv(
                features,
                self.kernel_size,
                use_bias=self.use_bias,
                precision=self.precision,
                name=name,
            )
        from invjax.layers import scale as sl

        kw = dict(
            kernel_size=self.kernel_size,
            effective_size=self.effective_size,
            scales=tuple(self.scales),
            basis=self.basis,
            use_bias=self.use_bias,
            precision=self.precision,
            name=name,
        )
        return sl.ScaleLiftConv(features, **kw) if lift else sl.ScaleConv(features, 1, **kw)

    @nn.compact
    def __call__(self, x, train: bool = False, features_only: bool = False):
        if x.ndim != 4:
            raise ValueError(f"ScaledMNISTNet: expected NHWC images [B, H, W, C], got {x.shape}")
        if self.upsample != "none":
            x = upsample(x, 2, self.upsample)
        widths = [divide_width(c, self.width_divisor) for c in self.widths]
        for i in range(2):
            x = self._conv(widths[i], i == 0, f"conv{i + 1}")(x)
            x = nn.relu(x)
            x = _spatial_pool(x, self.spatial_pool)
            x = self._bn(f"bn{i + 1}")(x, train)
        x = self._conv(widths[2], False, "conv3")(x)
        feats = self._head(x, train, widths[2])
        if features_only:
            return feats
        dot = P.dense_dot_general(self.precision)
        hidden = divide_width(self.hidden, self.width_divisor)
        y = nn.Dense(hidden, use_bias=False, dot_general=dot, name="fc1")(feats)
        y = nn.BatchNorm(use_running_average=not train, momentum=self.bn_momentum, name="bn_fc1")(y)
        y = nn.relu(y)
        y = nn.Dropout(self.dropout, deterministic=not train)(y)
        return nn.Dense(self.num_classes, dot_general=dot, name="classifier")(y)

    def acts_at_epoch_end(self, epochs_done: int) -> bool:
        """Whether :meth:`on_epoch_end` changes anything after ``epochs_done`` epochs: only the
        monomial head, only at ``prune_epochs``. The trainer skips the call (and K vmapped
        models keep their stacked state) at every other epoch end (:mod:`invjax.training.loop`).
        """
        return self.head == "ii_monomials" and epochs_done in tuple(self.prune_epochs)

    def on_epoch_end(self, variables, epochs_done: int, images):
        """The trainer's epoch-end call (:mod:`invjax.training.loop`): with the monomial head,
        prune the Scale-II pairs 25 -> 12 -> 5 after the epochs ``prune_epochs``.

        The relevance of a pair weighs its spread on ``images`` (a fixed normalised training
        batch ``[B, H, W, C]``) by the norm of its row in ``fc1``, the dense layer that reads the
        monomial features (:func:`invjax.layers.ii.measured_relevance`). Returns ``variables``
        itself where nothing is pruned, else new variables with a pruned ``ii_mask``.
        """
        if not self.acts_at_epoch_end(epochs_done):
            return variables
        schedule = dict(zip(self.prune_epochs, PRUNING_KEEP))
        fc1 = {("ii",): variables["params"]["fc1"]["kernel"]}
        relevance = iil.measured_relevance(self.apply, variables, images, fc1)
        return iil.prune_monomials(variables, relevance, schedule[epochs_done])

    def scaled_schedule(self, scale: float) -> ScaledMNISTNet:
        """With the monomial head, this network pruning at the same shares of a run ``scale``
        times as long (:func:`invjax.layers.ii.scaled_prune_epochs`: the paper's 5 and 10 of 60
        epochs become 1 and 2 of 6 at ``train.epochs_scale = 0.1``); any other head has no
        schedule and is returned as it is."""
        if self.head != "ii_monomials" or scale == 1.0:
            return self
        return self.clone(prune_epochs=iil.scaled_prune_epochs(self.prune_epochs, scale))

    def schedule_warning(self, num_epochs: int) -> str | None:
        """With the monomial head, one line when a run of ``num_epochs`` epochs ends before the
        last pruning (after epoch ``prune_epochs[1]``): it would train and be evaluated with more
        monomial pairs than the paper's 5."""
        epochs = tuple(self.prune_epochs)
        if self.head != "ii_monomials" or epochs[-1] <= num_epochs:
            return None
        kept = self.n_pairs if epochs[0] > num_epochs else PRUNING_KEEP[0]
        return (
            f"model prune_epochs={epochs} with {num_epochs} training epochs: the monomial head "
            f"prunes to {PRUNING_KEEP[-1]} pairs only after epoch {epochs[-1]}, so this run keeps "
            f"{kept}; train at least {epochs[-1]} epochs or set model.prune_epochs"
        )

    def _project(self, x):
        if self.family == "scale":
            from invjax.layers.scale import ScaleMaxProjection

            return ScaleMaxProjection(name="projection")(x)
        return x

    def _head(self, x, train, c):
        if self.head == "mixed":
            return iil.MixedPooling(momentum=self.bn_momentum, name="pool")(self._project(x), train)
        if self.head == "maxpool":
            y = sesn_max_pool(nn.relu(self._project(x)))
            y = nn.BatchNorm(use_running_average=not train, momentum=self.bn_momentum, name="bn3")(
                y
            )
            # Channel-major flattening, as PyTorch's view of [B, C, H', W'].
            return jnp.moveaxis(y, -1, 1).reshape(y.shape[0], -1)
        if self.head == "pool":
            y = nn.relu(self._project(self._bn("bn3")(x, train)))
            return iil.AveragePooling(name="pool")(y, train)
        # Scale-II: BN -> ReLU -> max projection -> II (see the module docstring).
        y = nn.relu(self._project(self._bn("bn3")(x, train)))
        if self.head == "ii":
            ii = iil.ScaleInvariantIntegration(
                c,
                self.ii_kernel_size,
                epsilon=self.ii_epsilon,
                divide=self.ii_divide,
                precision=self.precision,
                name="ii",
            )
        else:
            ii = iil.ScaleMonomialInvariantIntegration(
                self.n_pairs,
                kernel_size=self.ii_kernel_size,
                max_exponent=self.monomial_max_exponent,
                epsilon=self.ii_epsilon,
                seed=self.monomial_seed,
                placement=self.monomial_placement,
                output=self.monomial_output,
                precision=self.precision,
                layout=self.monomial_layout,
                divisor=self.monomial_divisor,
                name="ii",
            )
        y = ii(y, train)
        if self.ii_batchnorm:
            y = nn.BatchNorm(
                use_running_average=not train, momentum=self.bn_momentum, name="bn_ii"
            )(y)
        return y

    def features(self, x, train: bool = False):
        return self(x, train, features_only=True)


_FIELDS = (
    "family",
    "basis",
    "head",
    "upsample",
    "widths",
    "kernel_size",
    "effective_size",
    "scales",
    "spatial_pool",
    "hidden",
    "dropout",
    "bn_momentum",
    "ii_kernel_size",
    "n_pairs",
    "monomial_seed",
    "monomial_placement",
    "monomial_output",
    "monomial_layout",
    "monomial_divisor",
    "monomial_max_exponent",
    "ii_epsilon",
    "ii_divide",
    "ii_batchnorm",
    "prune_epochs",
    "width_divisor",
    "use_bias",
)


def from_config(config) -> ScaledMNISTNet:
    kwargs = {}
    for field in _FIELDS:
        val = config.get(field, None)
        if val is not None:
            kwargs[field] = tuple(val) if isinstance(val, list | tuple) else val
    kwargs["num_classes"] = config.get("num_classes", None) or 10
    return ScaledMNISTNet(**kwargs)


@register("mnist")
def _build(config):
    return from_config(config)
