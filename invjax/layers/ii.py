"""Invariant Integration layers (paper Sections 3.4, 4.1-4.3): thin Linen modules over :mod:`invjax.ops.ii`.

Every layer maps a feature map ``[B, H, W, C]`` (after group pooling or scale max projection) to
invariant features ``[B, C_out]`` and sows that output as
``intermediates/<layer path>/invariant_features`` (collected only when a caller makes
``'intermediates'`` mutable; :mod:`invjax.invariance` uses it to measure a model's invariant
features, the monomial pruning uses it to rank pairs).

==================================  ==========================================  =================
module                              paper                                       parameters
==================================  ==========================================  =================
``RotationInvariantIntegration``    eq. (4), rotation-II WS over ``C_N``          ``psi`` [k,k,C,O]
``E2InvariantIntegration``          eq. (5), E(2)-II WS over ``C_N``/``D_N``      ``psi`` [k,k,C,O]
``TranslationInvariantIntegration`` translation-II WS (conv + average pooling)  ``psi`` [k,k,C,O]
``ScaleInvariantIntegration``       eq. (7), Scale-II WS                        ``psi`` [k,k,C,O]
``ScaleMonomialInvariantIntegration`` eq. (6), Scale-II monomial ratios          none (mask)
``MixedPooling``                    DISCO's pooling baseline                    BN
``AveragePooling``                  global average pooling                      none
==================================  ==========================================  =================

Inference form (:mod:`invjax.export`): the WS layers define ``inference_arrays(x)`` (the weight
map ``M`` on ``x``'s grid, flattened: a dense layer) and ``inference_call(arrays, x)``; the
monomial layer keeps only its unpruned pairs' exponent columns.

``method`` selects ``"fast"`` (the closed forms, default) or ``"reference"`` (convolve with every
transformed kernel, then average); the WS layers also take ``"weight_map"``. All give the same
numbers up to float32 rounding (tests/test_ii_layers.py).

Monomial pruning (Section 5, "n_m = {25, 12, 5} monomial pairs after 0, 5 and 10 epochs")
  The active pairs are a ``{0, 1}`` mask ``ii_mask/<layer path>/mask`` of shape ``[P]`` in its own
  variable collection (never in ``params``, so optimisers and weight decay do not see it); pruned
  pairs output 0. The relevance of pair ``j`` is ``std_batch(a_j) * ||W_j||_2``: how much feature
  ``j`` varies over a batch times the norm of its row in the next dense layer's kernel
  ``W [P, D]`` (without ``W``, the std alone). A feature that does not vary carries no
  information, and one the classifier ignores has a small row. :func:`prune_monomials` keeps the
  ``keep`` most relevant active pairs (ties go to the lower index: deterministic), ranked by
  :func:`measured_relevance`. When to prune is the model's business (the schedule of the
  Scaled-MNIST monomial network: :meth:`invjax.models.mnist.ScaledMNISTNet.on_epoch_end`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import flax.linen as nn
import jax.numpy as jnp
import numpy as np
from flax.core import freeze, unfreeze

from invjax import groups as G
from invjax import precision as P
from invjax.contract import Exact, Exportable, Precise
from invjax.ops import ii as ops

MASK_COLLECTION = "ii_mask"
FEATURES_NAME = "invariant_features"
TERMS_NAME = "monomial_terms"
MONOMIAL_LAYOUTS = ("pairs", "channels")

_METHODS = ("fast", "reference", "weight_map")


def _check_positive_int(value, name: str, owner: str):
    if not isinstance(value, int | np.integer) or value < 1:
        raise ValueError(f"{owner}: {name}={value!r} is invalid: it must be an integer >= 1")


def _check_kernel_size(k, owner: str):
    if not isinstance(k, int | np.integer) or k < 1 or k % 2 != 1:
        raise ValueError(f"{owner}: kernel_size={k!r} is invalid: it must be an odd integer >= 1")


def _check_method(method: str, owner: str, allowed=_METHODS):
    if method not in allowed:
        raise ValueError(f"{owner}: method={method!r} is unknown: choose one of {allowed}")


def _check_input(x, owner: str):
    if getattr(x, "ndim", None) != 4:
        raise ValueError(
            f"{owner}: input shape {getattr(x, 'shape', None)} is invalid: expected [B, H, W, C] "
            "(group-pooled / scale-max-projected features)"
        )


def _ws_kernel(module: nn.Module, x, features: int, kernel_size: int, kernel_init):
    return module.param("kernel", kernel_init, (kernel_size, kernel_size, x.shape[-1], features))


#: The group / translation WS integration of each ``method`` (``x, kernel, group,
#: interpolation, precision -> [B, O]``).
WS_METHODS = {
    "fast": ops.ws_integrate,
    "reference": ops.ws_integrate_reference,
    "weight_map": ops.ws_integrate_weight_map,
}


def check_ws_settings(module, interpolation: str) -> None:
    """One clear error for a WS layer's ``features``, ``kernel_size``, ``method`` or
    ``interpolation`` (any object with those attributes: the Linen and the NNX layers)."""
    owner = type(module).__name__
    _check_positive_int(module.features, "features", owner)
    _check_kernel_size(module.kernel_size, owner)
    _check_method(module.method, owner)
    if interpolation not in G.INTERPOLATIONS:
        raise ValueError(
            f"{owner}: interpolation={interpolation!r} is unknown: choose one of {G.INTERPOLATIONS}"
        )


def _ws_ii(module: nn.Module, x, group: G.Group, interpolation: str):
    """Shared body of the group / translation WS layers (flat ``params/kernel``)."""
    check_ws_settings(module, interpolation)
    _check_input(x, type(module).__name__)
    kernel = _ws_kernel(module, x, module.features, module.kernel_size, module.kernel_init)
    fn = WS_METHODS[module.method]
    y = fn(x, kernel.astype(x.dtype), group, interpolation, module.precision)
    module.sow("intermediates", FEATURES_NAME, y)
    return y


def _ws_inference_arrays(module: nn.Module, x, group: G.Group, interpolation: str) -> dict:
    """``{'kernel': [H W C_in, O]}``: the weight map of a WS layer on ``x``'s ``H x W`` grid,
    flattened (eq. 4, 5: ``A = sum_y x(y) M(y)``, ``M = 1/(UV) sum_t Kbar(y - t)`` with ``Kbar``
    the group-symmetrised kernel, :func:`invjax.ops.ii.ws_weight_map`)."""
    p = module.precision
    kbar = ops.symmetrized_kernel(module.get_variable("params", "kernel"), group, interpolation, p)
    m = ops.ws_weight_map(kbar, x.shape[1], x.shape[2], p)
    return {"kernel": m.reshape(-1, m.shape[-1])}


def _ws_inference_call(arrays, x, precision: str | None):
    """A WS layer from :func:`_ws_inference_arrays`: one dense layer on the flattened map."""
    return P.einsum("bn,no->bo", x.reshape(x.shape[0], -1), arrays["kernel"], precision)


class E2InvariantIntegration(Exact, Exportable, Precise, nn.Module):
    """E(2)-II with a weighted sum, equation (5) (equation (4) when ``group`` has no flips).

    ``A_o = 1/(|G| U V) sum_{g, t} sum_{y, i} x_i(y) (L_g psi_{i,o})(y - t)`` with a learnable
    ``psi`` of shape ``[k, k, C_in, features]`` over all input channels, transformed by every
    element of ``group`` (multiples of 90 degrees exactly, other angles by bilinear interpolation
    on the ``k x k`` grid). Invariant to the group's 90-degree rotations and flips to float32
    rounding for square inputs, and to translations that keep the content inside the image.

    Shapes: ``[B, H, W, C_in] -> [B, features]``.
    """

    features: int
    """Number of invariant output features ``C_out`` (an integer >= 1): the learnt kernels
    ``psi [k, k, C_in, features]``, one weighted sum per feature."""
    group: G.Group = G.dihedral(4)
    """The group ``G`` integrated over, ``C_N`` (eq. 4) or ``D_N`` (eq. 5): a
    :class:`invjax.groups.Group` or a name such as ``"D4"``, ``"C8"``. Default ``D4``."""
    kernel_size: int = 3
    """Size ``k`` of the learnt kernel ``psi`` in taps (odd)."""
    interpolation: str = "bilinear"
    """How ``psi`` is resampled for the rotations that are not multiples of 90 degrees, one of
    :data:`invjax.groups.INTERPOLATIONS` (``"nearest"``, ``"bilinear"``, ``"bicubic"``); the
    multiples of 90 degrees and the flips permute the grid exactly."""
    method: str = "fast"
    """How the integral is computed: ``"fast"`` (the closed form), ``"reference"`` (convolve with
    every transformed kernel, then average) or ``"weight_map"`` (the literal form
    ``sum_y x(y) M(y)``); the same numbers up to float32 rounding."""
    kernel_init: Callable = nn.initializers.lecun_normal()
    """Initialiser of ``psi`` (a Flax initializer ``(key, shape, dtype) -> array``); default
    LeCun-normal."""
    precision: str | None = None
    """The arithmetic of the products: a mode of :mod:`invjax.precision` (``"highest"``,
    ``"default"``, ``"bf16"``, ``"exact_fast"``, or a CPU emulation); ``None``: JAX's default
    matmul precision."""

    def __post_init__(self):
        G.as_group_fields(self, "group")
        super().__post_init__()

    @nn.compact
    def __call__(self, x, train: bool = False):
        del train
        return _ws_ii(self, x, self.group, self.interpolation)

    def exact_group(self, input_shape) -> G.Group:
        """Invariant to ``group`` (:func:`invjax.equivariance.exact_group`)."""
        del input_shape
        return self.group

    def inference_arrays(self, x):
        """The weight map ``[H W C_in, features]`` (:func:`_ws_inference_arrays`)."""
        return _ws_inference_arrays(self, x, self.group, self.interpolation)

    def inference_call(self, arrays, x):
        """``A = flatten(x) M``: ``[B, features]``."""
        return _ws_inference_call(arrays, x, self.precision)


class RotationInvariantIntegration(Exportable, Precise, nn.Module):
    """Rotation-II with a weighted sum, equation (4): E(2)-II over ``C_N`` (``n_rotations``).

    Shapes: ``[B, H, W, C_in] -> [B, features]``.
    """

    features: int
    """Number of invariant output features ``C_out`` (an integer >= 1): the learnt kernels
    ``psi [k, k, C_in, features]``, one weighted sum per feature."""
    n_rotations: int = 4
    """``N`` of the rotation group ``C_N`` integrated over (an integer >= 1): rotations by
    multiples of ``360 / N`` degrees."""
    kernel_size: int = 3
    """Size ``k`` of the learnt kernel ``psi`` in taps (odd)."""
    interpolation: str = "bilinear"
    """How ``psi`` is resampled for the rotations that are not multiples of 90 degrees, one of
    :data:`invjax.groups.INTERPOLATIONS` (``"nearest"``, ``"bilinear"``, ``"bicubic"``); the
    multiples of 90 degrees and the flips permute the grid exactly."""
    method: str = "fast"
    """How the integral is computed: ``"fast"`` (the closed form), ``"reference"`` (convolve with
    every transformed kernel, then average) or ``"weight_map"`` (the literal form
    ``sum_y x(y) M(y)``); the same numbers up to float32 rounding."""
    kernel_init: Callable = nn.initializers.lecun_normal()
    """Initialiser of ``psi`` (a Flax initializer ``(key, shape, dtype) -> array``); default
    LeCun-normal."""
    precision: str | None = None
    """The arithmetic of the products: a mode of :mod:`invjax.precision` (``"highest"``,
    ``"default"``, ``"bf16"``, ``"exact_fast"``, or a CPU emulation); ``None``: JAX's default
    matmul precision."""

    @nn.compact
    def __call__(self, x, train: bool = False):
        del train
        _check_positive_int(self.n_rotations, "n_rotations", type(self).__name__)
        return _ws_ii(self, x, G.cyclic(self.n_rotations), self.interpolation)

    def inference_arrays(self, x):
        """The weight map ``[H W C_in, features]`` (:func:`_ws_inference_arrays`)."""
        return _ws_inference_arrays(self, x, G.cyclic(self.n_rotations), self.interpolation)

    def inference_call(self, arrays, x):
        """``A = flatten(x) M``: ``[B, features]``."""
        return _ws_inference_call(arrays, x, self.precision)


class TranslationInvariantIntegration(Exportable, Precise, nn.Module):
    """Translation-II with a weighted sum: a bias-free ``k x k`` convolution, then average pooling.

    The standard stream's II (Section 4.4); E(2)-II over the trivial group.
    Shapes: ``[B, H, W, C_in] -> [B, features]``.
    """

    features: int
    """Number of invariant output features ``C_out`` (an integer >= 1): the learnt kernels
    ``psi [k, k, C_in, features]``, one weighted sum per feature."""
    kernel_size: int = 3
    """Size ``k`` of the learnt kernel ``psi`` in taps (odd)."""
    method: str = "fast"
    """How the integral is computed: ``"fast"`` (the closed form), ``"reference"`` (convolve,
    then average) or ``"weight_map"`` (the literal form ``sum_y x(y) M(y)``); the same numbers
    up to float32 rounding."""
    kernel_init: Callable = nn.initializers.lecun_normal()
    """Initialiser of ``psi`` (a Flax initializer ``(key, shape, dtype) -> array``); default
    LeCun-normal."""
    precision: str | None = None
    """The arithmetic of the products: a mode of :mod:`invjax.precision` (``"highest"``,
    ``"default"``, ``"bf16"``, ``"exact_fast"``, or a CPU emulation); ``None``: JAX's default
    matmul precision."""

    @nn.compact
    def __call__(self, x, train: bool = False):
        del train
        return _ws_ii(self, x, G.cyclic(1), "bilinear")

    def inference_arrays(self, x):
        """The weight map ``[H W C_in, features]`` (:func:`_ws_inference_arrays`)."""
        return _ws_inference_arrays(self, x, G.cyclic(1), "bilinear")

    def inference_call(self, arrays, x):
        """``A = flatten(x) M``: ``[B, features]``."""
        return _ws_inference_call(arrays, x, self.precision)


class ScaleInvariantIntegration(Exportable, Precise, nn.Module):
    """Scale-II with a weighted sum, equation (7).

    ``A_o = mean_t (x' * psi_o)(t) / mean_{y, i} x'_i(y)`` with ``x' = max(x, epsilon)`` (ReLU
    clamped to ``epsilon > 0``, :data:`invjax.ops.ii.DEFAULT_EPSILON`). Numerator and divisor are
    both homogeneous of degree 2 in a scaling of the image plane, so the ratio is scale-invariant
    (up to interpolation and the image border).

    With ``divide=False`` the layer is the numerator alone, ``A_o = mean_t (x' * psi_o)(t)``:
    translation-II of the clamped input, homogeneous of degree 2 in a scaling of the plane, so
    **not** scale-invariant (an ablation that isolates what the division by the mean does).

    Shapes: ``[B, H, W, C_in] -> [B, features]``.
    """

    features: int
    """Number of invariant output features ``C_out`` (an integer >= 1): the learnt kernels
    ``psi [k, k, C_in, features]``, one weighted sum per feature."""
    kernel_size: int = 3
    """Size ``k`` of the learnt kernel ``psi`` in taps (odd)."""
    epsilon: float = ops.DEFAULT_EPSILON
    """The clamp ``x' = max(x, epsilon)`` of the input (a float > 0; default
    :data:`invjax.ops.ii.DEFAULT_EPSILON` ``= 1e-6``): keeps every divisor positive."""
    divide: bool = True
    """Divide the weighted sum by the mean of the clamped input, eq. (7) (default, the
    scale-invariant layer); ``False`` keeps the numerator alone, ``mean_t (x' * psi)(t)``, which
    is not scale-invariant (an ablation)."""
    method: str = "fast"
    """How the integral is computed: ``"fast"`` (the closed form) or ``"reference"`` (the
    equation as written); the same numbers up to float32 rounding."""
    kernel_init: Callable = nn.initializers.lecun_normal()
    """Initialiser of ``psi`` (a Flax initializer ``(key, shape, dtype) -> array``); default
    LeCun-normal."""
    precision: str | None = None
    """The arithmetic of the products: a mode of :mod:`invjax.precision` (``"highest"``,
    ``"default"``, ``"bf16"``, ``"exact_fast"``, or a CPU emulation); ``None``: JAX's default
    matmul precision."""

    @nn.compact
    def __call__(self, x, train: bool = False):
        del train
        owner = type(self).__name__
        _check_positive_int(self.features, "features", owner)
        _check_kernel_size(self.kernel_size, owner)
        _check_method(self.method, owner, ("fast", "reference"))
        ops.check_epsilon(self.epsilon)
        _check_input(x, owner)
        kernel = _ws_kernel(self, x, self.features, self.kernel_size, self.kernel_init)
        if self.divide:
            fn = ops.scale_ws_integrate if self.method == "fast" else ops.scale_ws_reference
            y = fn(x, kernel.astype(x.dtype), self.epsilon, self.precision)
        else:  # the numerator of eq. (7) alone: translation-II of the clamped input
            xc = ops.clamp(x, self.epsilon)
            y = WS_METHODS[self.method](
                xc, kernel.astype(x.dtype), None, "bilinear", self.precision
            )
        self.sow("intermediates", FEATURES_NAME, y)
        return y

    def inference_arrays(self, x):
        """The numerator's weight map ``[H W C_in, features]`` (translation-II, eq. 7)."""
        return _ws_inference_arrays(self, x, None, "bilinear")

    def inference_call(self, arrays, x):
        """``A = flatten(x') M / mean(x')`` with ``x' = max(x, epsilon)`` (without the division
        when ``divide=False``): ``[B, features]``."""
        xc = ops.clamp(x, self.epsilon)
        y = _ws_inference_call(arrays, xc, self.precision)
        return y / xc.mean(axis=(1, 2, 3))[:, None] if self.divide else y


class ScaleMonomialInvariantIntegration(Exportable, Precise, nn.Module):
    """Scale-II with monomials, equation (6): ``n_pairs`` ratios of translation-averaged monomials.

    Each monomial has ``n_factors`` factors ``x_c(t + o)^b`` with channel ``c``, offset ``o`` in the
    ``k x k`` neighbourhood and exponent ``b in [1, max_exponent]`` drawn from ``seed`` at trace
    time (static, not parameters, see :func:`invjax.ops.ii.draw_monomial_pairs`); the divisor's
    exponents are normalised to the dividend's order. The input passes ``max(x, epsilon)``. The
    fast path is computed in log space. Pruned pairs (mask 0, collection ``ii_mask``) output 0.

    Shapes: ``[B, H, W, C_in] -> [B, n_pairs]`` (``layout='pairs'``) or ``[B, C_in]``
    (``layout='channels'``, whose per-pair terms ``[B, C_in, n_pairs]`` are sown as
    ``intermediates/.../monomial_terms`` for the pruning's relevance).
    """

    n_pairs: int = 25
    """Number ``n_m`` of monomial pairs (ratios), an integer >= 1: 25 before the paper's pruning
    to 12 and 5 (Section 5). The mask ``ii_mask/mask`` is ``[n_pairs]``."""
    n_factors: int = 3
    """Factors per monomial (an integer >= 1), each ``x_c(t + o)^b``; 3 is our choice (the paper
    gives none)."""
    kernel_size: int = 3
    """Size ``k`` of the neighbourhood the factors' offsets ``o`` are drawn from (odd); every
    offset is 0 with ``placement='pointwise'``."""
    max_exponent: int = 2
    """Largest exponent ``b`` of a factor: exponents are drawn uniformly from
    ``1 .. max_exponent``; the divisor's are then scaled to the dividend's order."""
    epsilon: float = ops.DEFAULT_EPSILON
    """The clamp ``x' = max(x, epsilon)`` of the input (a float > 0; default
    :data:`invjax.ops.ii.DEFAULT_EPSILON` ``= 1e-6``): keeps every monomial positive and its log
    finite."""
    seed: int = 0
    """Seed of the pairs' draw (:func:`invjax.ops.ii.draw_monomial_pairs`): the channels,
    offsets and exponents are static, fixed by ``seed`` at trace time, not parameters."""
    method: str = "fast"
    """``"fast"`` (in log space) or ``"reference"`` (eq. 6 as written); the same numbers up to
    float32 rounding."""
    placement: str = "neighbourhood"
    """Where a monomial's factors sit, one of :data:`invjax.ops.ii.MONOMIAL_PLACEMENTS`:
    ``"neighbourhood"`` (offsets in the ``k x k`` neighbourhood, the paper's reading of eq. (6)
    after Rath et al.) or ``"pointwise"`` (all factors at one position, channels only: the
    exactly scale-invariant variant; needs ``C_in >= 2``)."""
    output: str = "ratio"
    """What each pair outputs, one of :data:`invjax.ops.ii.MONOMIAL_OUTPUTS`: ``"ratio"`` (eq.
    6's ``A``) or ``"log"`` (``log A``: exact where ``A`` is, per pair ``A``'s relative change
    otherwise; what a following dense layer can learn from). Pruned pairs output 0 either
    way."""
    precision: str | None = None
    """The arithmetic of the products: a mode of :mod:`invjax.precision` (``"highest"``,
    ``"default"``, ``"bf16"``, ``"exact_fast"``, or a CPU emulation); ``None``: JAX's default
    matmul precision."""
    layout: str = "pairs"
    """One of :data:`MONOMIAL_LAYOUTS`. ``"pairs"``: ``n_pairs`` pairs whose factors read any
    channel, one feature per pair, ``[B, n_pairs]``. ``"channels"`` (Table 7's "Scale-II 95 ->
    95"): eq. (6) as written, a monomial of one map, applied to each channel's map with
    ``n_pairs`` one-channel pairs shared by all channels; channel ``c``'s feature is the mean
    over the active pairs ``j`` of its ``log A_cj`` (``A_cj`` for ``output='ratio'``),
    ``[B, C_in]``, and pruning removes pairs from every channel's mean (``docs/monomials.md``)."""
    divisor: str = "random"
    """How a pair's divisor is drawn, one of :data:`invjax.ops.ii.MONOMIAL_DIVISORS`:
    ``"random"`` (like the dividend, then normalised to its order) or ``"power"`` (``x_c(t)^K``,
    the dividend's first channel at one position raised to its order ``K``)."""

    def pairs(self, n_channels: int) -> ops.MonomialPairs:
        """The pairs this layer draws for ``n_channels`` inputs (one-channel pairs for
        ``layout='channels'``, whatever ``n_channels``)."""
        return ops.draw_monomial_pairs(
            self.n_pairs,
            1 if self.layout == "channels" else n_channels,
            self.n_factors,
            self.kernel_size,
            self.max_exponent,
            self.seed,
            self.placement,
            self.divisor,
        )

    def _channels(self, x, pairs, mask):
        """``layout='channels'``: ``[B, C]`` masked means of the ``[B, C, P]`` per-pair terms,
        and those terms."""
        if self.method == "fast":
            terms = ops.channel_monomial_log_ratios(
                x, pairs.exponent_kernel(1).astype(np.float32), self.epsilon, self.precision
            )
            terms = terms if self.output == "log" else jnp.exp(terms)
        else:
            terms = ops.scale_monomial_channel_reference(x, pairs, self.epsilon)
            terms = jnp.log(terms) if self.output == "log" else terms
        terms = terms * mask.astype(terms.dtype)
        return terms.sum(-1) / jnp.maximum(mask.sum(), 1.0).astype(terms.dtype), terms

    def check_settings(self) -> None:
        """One clear error for an invalid setting (before any compute)."""
        owner = type(self).__name__
        _check_positive_int(self.n_pairs, "n_pairs", owner)
        _check_kernel_size(self.kernel_size, owner)
        _check_method(self.method, owner, ("fast", "reference"))
        ops.check_epsilon(self.epsilon)
        ops.check_monomial_output(self.output)
        if self.layout not in MONOMIAL_LAYOUTS:
            raise ValueError(
                f"{owner}: layout={self.layout!r} is unknown: choose one of {MONOMIAL_LAYOUTS}"
            )

    def integrate(self, x, mask):
        """``(y, terms)``: the layer's output for ``x [B, H, W, C_in]`` with the pairs'
        ``mask [P]``, and for ``layout='channels'`` the per-pair terms ``[B, C_in, P]`` (else
        None)."""
        pairs = self.pairs(int(x.shape[-1]))
        if self.layout == "channels":
            return self._channels(x, pairs, mask)
        if self.method == "fast" and self.output == "log":
            y = ops.scale_monomial_log_integrate(x, pairs, self.epsilon, self.precision)
        elif self.method == "fast":
            y = ops.scale_monomial_integrate(x, pairs, self.epsilon, self.precision)
        else:
            y = ops.scale_monomial_reference(x, pairs, self.epsilon)
            y = jnp.log(y) if self.output == "log" else y
        return y * mask.astype(y.dtype), None

    @nn.compact
    def __call__(self, x, train: bool = False):
        del train
        self.check_settings()
        _check_input(x, type(self).__name__)
        mask = self.variable(
            MASK_COLLECTION, "mask", lambda: jnp.ones((self.n_pairs,), jnp.float32)
        )
        y, terms = self.integrate(x, mask.value)
        if terms is not None:
            self.sow("intermediates", TERMS_NAME, terms)
        self.sow("intermediates", FEATURES_NAME, y)
        return y

    def inference_arrays(self, x):
        """The unpruned pairs only: ``{'exponents': [k, k, C_in, 2A]}`` (the columns of the
        active pairs in :meth:`invjax.ops.ii.MonomialPairs.exponent_kernel`), ``'index' [A]``
        (int32, their positions) and ``'weight' [A]`` (their mask values), ``A`` active pairs."""
        mask = np.asarray(self.get_variable(MASK_COLLECTION, "mask"))
        active = np.flatnonzero(mask != 0)
        cols = np.stack([2 * active, 2 * active + 1], axis=-1).reshape(-1)
        n_in = 1 if self.layout == "channels" else x.shape[-1]
        return {
            "exponents": self.pairs(int(x.shape[-1])).exponent_kernel(n_in)[..., cols],
            "index": active.astype(np.int32),
            "weight": mask[active].astype(np.float32),
        }

    def inference_call(self, arrays, x):
        """The active pairs' ``log A`` (:func:`invjax.ops.ii.monomial_log_ratios`; ``exp`` of it
        for ``output='ratio'``) scattered into ``[B, n_pairs]``; pruned pairs stay 0 as in the
        training form. ``layout='channels'``: the active pairs' weighted mean per channel,
        ``[B, C]``."""
        if self.layout == "channels":
            w = arrays["weight"]
            if w.shape[0] == 0:
                return jnp.zeros((x.shape[0], x.shape[-1]), x.dtype)
            a = ops.channel_monomial_log_ratios(
                x, arrays["exponents"], self.epsilon, self.precision
            )
            a = a if self.output == "log" else jnp.exp(a)
            return (a * w).sum(-1) / jnp.maximum(w.sum(), 1.0)
        y = jnp.zeros((x.shape[0], self.n_pairs), x.dtype)
        if arrays["index"].shape[0] == 0:  # every pair pruned
            return y
        a = ops.monomial_log_ratios(x, arrays["exponents"], self.epsilon, self.precision)
        a = a if self.output == "log" else jnp.exp(a)
        return y.at[:, arrays["index"]].set(a * arrays["weight"])


class MixedPooling(nn.Module):
    """DISCO's pooling baseline on a max-projected map (ISosnovik/disco): ReLU, MaxPool ``max_window``
    stride 1, AvgPool ``avg_window`` stride ``avg_stride``, BatchNorm per channel, flattened
    channel-major (feature ``c * H'W' + position``, as PyTorch's ``view`` of ``[B, C, H', W']``).

    Shapes: ``[B, H, W, C] -> [B, C * H' * W']`` (``C * 4`` for the 14 x 14 Scaled-MNIST maps).
    """

    max_window: int = 7
    """Window of the stride-1 max pooling (no padding), in pixels (an integer >= 1; DISCO's
    7)."""
    avg_window: int = 2
    """Window of the average pooling (no padding), in pixels (an integer >= 1; DISCO's 2)."""
    avg_stride: int = 4
    """Stride of the average pooling, in pixels (an integer >= 1; DISCO's 4)."""
    momentum: float = 0.9
    """Decay of the batch norm's running statistics, in Flax's convention
    ``running = momentum * running + (1 - momentum) * batch``; 0.9 is PyTorch's default (its
    ``momentum=0.1`` weighs the batch)."""
    epsilon: float = 1e-5
    """Added to the batch norm's variance before the square root; 1e-5 is PyTorch's default."""

    @nn.compact
    def __call__(self, x, train: bool = False):
        owner = type(self).__name__
        for name in ("max_window", "avg_window", "avg_stride"):
            _check_positive_int(getattr(self, name), name, owner)
        _check_input(x, owner)
        y = ops.mixed_pool(x, self.max_window, self.avg_window, self.avg_stride)
        y = nn.BatchNorm(
            use_running_average=not train, momentum=self.momentum, epsilon=self.epsilon
        )(y)
        y = jnp.moveaxis(y, -1, 1).reshape(y.shape[0], -1)
        self.sow("intermediates", FEATURES_NAME, y)
        return y


class AveragePooling(Exact, nn.Module):
    """Global average pooling over the spatial axes. Shapes: ``[B, H, W, C] -> [B, C]``."""

    def exact_group(self, input_shape) -> G.Group:
        """Invariant to every permutation of the pixels (:func:`invjax.equivariance.exact_group`)."""
        del input_shape
        return G.dihedral(4)

    @nn.compact
    def __call__(self, x, train: bool = False):
        del train
        _check_input(x, type(self).__name__)
        y = ops.average_pool(x)
        self.sow("intermediates", FEATURES_NAME, y)
        return y


# --------------------------------------------------------------------------- monomial pruning


def monomial_relevance(features, next_kernel=None):
    """Relevance ``[P]`` of monomial pairs: ``std_batch(features) * ||next_kernel rows||_2``.

    Args:
      features: ``[B, P]`` outputs of a :class:`ScaleMonomialInvariantIntegration` on a batch
        (``layout='pairs'``), or its per-pair terms ``[B, C, P]`` (``layout='channels'``: pair
        ``j`` enters feature ``c`` of every channel, so its relevance is
        ``sum_c std_batch(terms[:, c, j]) * ||next_kernel[c]||_2``).
      next_kernel: ``[P, D]`` (``[C, D]`` for terms) kernel of the dense layer reading them, or
        ``None`` (std only).
    """
    features = jnp.asarray(features)
    if features.ndim not in (2, 3):
        raise ValueError(
            f"monomial features have shape {features.shape}: expected [B, P] or terms [B, C, P]"
        )
    rel = jnp.std(features, axis=0)  # [P] or [C, P]
    if next_kernel is not None:
        next_kernel = jnp.asarray(next_kernel)
        if next_kernel.ndim != 2 or next_kernel.shape[0] != features.shape[1]:
            raise ValueError(
                f"next_kernel has shape {next_kernel.shape}: expected [{features.shape[1]}, D]"
            )
        norms = jnp.linalg.norm(next_kernel, axis=1)
        rel = rel * (norms if features.ndim == 2 else norms[:, None])
    return rel if features.ndim == 2 else rel.sum(axis=0)


def scaled_prune_epochs(prune_epochs, scale: float) -> tuple[int, int]:
    """Two pruning epochs ``(e_1, e_2)`` at the same shares of a run ``scale`` times as long:
    ``e_1' = max(1, round(e_1 scale))``, ``e_2' = max(e_1' + 1, round(e_2 scale))`` (the second
    at least one epoch after the first). The one rule of the monomial pruning schedule: a network
    that prunes (:meth:`invjax.models.mnist.ScaledMNISTNet.scaled_schedule`) and a study that
    sets its epochs from a run's length (``scale = epochs / 60``, the paper's 5 and 10 of 60)
    both use it. Unscaled, a run of ``train.epochs_scale = 0.1`` would train 6 epochs and never
    reach the pruning after epoch 10."""
    first, second = tuple(prune_epochs)
    first = max(1, round(first * scale))
    return first, max(first + 1, round(second * scale))


def prune_mask(mask, relevance, keep: int) -> np.ndarray:
    """New ``{0, 1}`` mask keeping the ``keep`` most relevant *active* pairs of ``mask``.

    Deterministic: ranks by relevance (NaN counts as least relevant), ties to the lower index.
    ``keep`` must not exceed the number of active pairs (pruning never revives a pair).
    """
    mask = np.asarray(mask)
    rel = np.nan_to_num(np.asarray(relevance, np.float64), nan=-np.inf)
    if mask.shape != rel.shape or mask.ndim != 1:
        raise ValueError(f"mask shape {mask.shape} and relevance shape {rel.shape} must be [P]")
    active = np.flatnonzero(mask > 0)
    if not isinstance(keep, int | np.integer) or keep < 1 or keep > active.size:
        raise ValueError(
            f"keep={keep!r} is invalid: it must be an integer in [1, {active.size}] "
            "(the number of active monomial pairs)"
        )
    order = sorted(active.tolist(), key=lambda j: (-rel[j], j))
    new = np.zeros_like(mask, dtype=np.float32)
    new[np.asarray(order[:keep], np.int64)] = 1.0
    return new


def _mask_paths(variables) -> list[tuple[str, ...]]:
    masks = variables.get(MASK_COLLECTION, {}) if hasattr(variables, "get") else {}
    paths = []

    def walk(tree, path):
        for key, val in tree.items():
            if key == "mask" and not hasattr(val, "items"):
                paths.append(path)
            elif hasattr(val, "items"):
                walk(val, path + (key,))

    walk(masks, ())
    return paths


def _get(tree, path):
    for key in path:
        tree = tree[key]
    return tree


def prune_monomials(variables, relevance, keep: int):
    """Return ``variables`` with each monomial layer's mask pruned to ``keep`` pairs.

    Args:
      variables: a Linen variable dict holding ``ii_mask/.../mask`` (one or more layers).
      relevance: ``[P]`` array if there is exactly one monomial layer, else a mapping
        ``{layer path tuple: [P]}`` (paths as in ``variables['ii_mask']``, e.g. ``('head', 'ii')``).
      keep: pairs to keep per layer.
    Returns:
      A new variable dict (same container type); only ``ii_mask`` changes.
    """
    paths = _mask_paths(variables)
    if not paths:
        raise ValueError(f"variables hold no '{MASK_COLLECTION}' masks: nothing to prune")
    if not isinstance(relevance, Mapping):
        if len(paths) != 1:
            raise ValueError(
                f"{len(paths)} monomial layers found ({paths}): pass relevance as "
                "{layer path: [P]}"
            )
        relevance = {paths[0]: relevance}
    frozen = not isinstance(variables, dict)
    out = unfreeze(variables) if frozen else dict(variables)
    out[MASK_COLLECTION] = unfreeze(out[MASK_COLLECTION])
    for path, rel in relevance.items():
        path = tuple(path)
        if path not in paths:
            raise ValueError(f"no monomial mask at {path}: masks are at {paths}")
        holder = _get(out[MASK_COLLECTION], path)
        holder["mask"] = jnp.asarray(prune_mask(holder["mask"], rel, keep))
    return freeze(out) if frozen else out


def sown_features(intermediates, name: str = FEATURES_NAME) -> dict:
    """``{layer path tuple: [B, F]}`` of the ``invariant_features`` sown in ``intermediates``
    (or of another sown ``name``, e.g. :data:`TERMS_NAME`)."""
    found = {}

    def walk(tree, path):
        for key, val in tree.items():
            if key == name:
                found[path] = val[-1] if isinstance(val, tuple | list) else val
            elif hasattr(val, "items"):
                walk(val, path + (key,))

    walk(intermediates, ())
    return found


def collect_invariant_features(apply_fn, variables, images, **kwargs) -> dict:
    """Run ``apply_fn(variables, images, mutable=['intermediates'], **kwargs)`` and return
    ``{layer path tuple: [B, F] features}`` of every II / pooling layer (their sown outputs)."""
    _, state = apply_fn(variables, images, mutable=["intermediates"], **kwargs)
    return sown_features(state.get("intermediates", {}))


def measured_relevance(
    apply_fn, variables, images, next_kernels: Mapping | None = None, **apply_kwargs
) -> dict:
    """``{layer path: [P] relevance}`` of every monomial layer of ``variables``, measured once.

    Args:
      apply_fn: ``model.apply``; called once on ``images`` (with ``train=False`` unless
        ``apply_kwargs`` says otherwise) to measure each pair's spread.
      variables: the model's variables (``params``, ``batch_stats``, ``ii_mask``, ...).
      images: a batch ``[B, H, W, C]`` (a training batch is fine; B >= 2).
      next_kernels: ``{layer path: [P, D] kernel}`` of the dense layer after each monomial
        layer; a layer without one is ranked by the std alone (:func:`monomial_relevance`).
    Returns:
      The relevance per layer path, as :func:`prune_monomials` takes it.
    """
    apply_kwargs.setdefault("train", False)
    _, state = apply_fn(variables, images, mutable=["intermediates"], **apply_kwargs)
    inter = state.get("intermediates", {})
    # per-channel layers rank their pairs by the sown per-pair terms [B, C, P]
    feats = {**sown_features(inter), **sown_features(inter, TERMS_NAME)}
    kernels = next_kernels or {}
    relevance = {}
    for path in _mask_paths(variables):
        if path not in feats:
            raise ValueError(f"monomial layer {path} sowed no features: was it called?")
        relevance[path] = monomial_relevance(feats[path], kernels.get(path))
    return relevance
