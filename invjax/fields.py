"""Field types: which group a feature map's channels carry, checked where layers meet.

A feature map alone does not say which group acts on it: a D4 regular field and a C8 regular
field both have 8 channels, so a layer that only counts channels cannot tell them apart. As
escnn's ``FieldType``, a :class:`FieldType` names the representation (``trivial``: scalars that
only move with the image; ``regular``: ``|G|`` channels per field that the group permutes,
channel ``c * |G| + h``, :mod:`invjax.groups`) and a :class:`Field` carries it beside the array.

Every E(2) layer of :mod:`invjax.layers.e2` states the type it maps (``layer.out_type(in_type)``,
which raises one clear error for an input it cannot take) and, given a :class:`Field`, checks it
and returns a :class:`Field`; given a plain array it checks only the channel count, as before::

    x = Field.trivial(images)                             # [B, H, W, C]
    y = E2LiftConv(8, "D4")(x)                            # Field, regular D4
    y = y.map(nn.relu)                                    # pointwise maps keep the type
    E2Conv(8, "C8")(y)                                    # ValueError: expects regular C8 fields
    check_sequence([E2LiftConv(8, "D4"), E2Conv(8, "C8")])  # the same error, before any compute

:meth:`FieldType.transform` is the group's action on a map of this type (spatial permutation and,
for regular fields, the channel permutation), which :func:`invjax.equivariance.check_equivariance`
uses on inputs and outputs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import flax.struct
import jax.numpy as jnp

from invjax import groups as G
from invjax.contract import Typed

KINDS = ("trivial", "regular")
_TRIVIAL_GROUP = G.cyclic(1)


@dataclasses.dataclass(frozen=True)
class FieldType:
    """The representation of a feature map's channels: ``trivial`` or ``regular`` of ``group``.

    A trivial type's group is ``C1`` (its channels are scalars); a regular type of ``G`` has
    ``|G|`` channels per field.
    """

    kind: str
    group: G.Group = _TRIVIAL_GROUP

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"field kind {self.kind!r} is unknown: choose one of {KINDS}")
        object.__setattr__(self, "group", G.parse_group(self.group))
        if self.kind == "trivial":
            object.__setattr__(self, "group", _TRIVIAL_GROUP)

    @classmethod
    def trivial_type(cls) -> FieldType:
        return cls("trivial")

    @classmethod
    def regular_type(cls, group: G.Group | str) -> FieldType:
        return cls("regular", G.parse_group(group))

    @property
    def size(self) -> int:
        """Channels per field: ``|G|`` (regular) or 1 (trivial)."""
        return self.group.order if self.kind == "regular" else 1

    def __str__(self) -> str:
        return "trivial fields" if self.kind == "trivial" else f"regular {self.group.name} fields"

    def check_channels(self, x, where: str) -> None:
        """One clear error unless ``x`` is NHWC with whole fields of this type."""
        if x.ndim != 4:
            raise ValueError(f"{where}: expected NHWC input [B, H, W, C], got shape {x.shape}")
        if x.shape[-1] % self.size:
            raise ValueError(
                f"{where}: {x.shape[-1]} input channels is not a multiple of {self.size}, the "
                f"channels of one of its {self}"
            )

    def transform(self, x, group: G.Group, g: int):
        """``L_g x`` for element ``g`` of ``group`` (a subgroup of this type's group for regular
        fields): the spatial action on ``[..., H, W, C]`` and, for regular fields, the
        permutation of each field's channels by ``g`` embedded in this type's group."""
        y = G.transform(x, group, g)  # exact permutations for 90-degree elements, else bilinear
        if self.kind == "trivial":
            return y
        if not G.is_subgroup(group, self.group):
            raise ValueError(
                f"{group.name} does not act on {self}: it is not a subgroup of {self.group.name}"
            )
        h = int(G.subgroup_embedding(self.group, group)[g])
        c = y.shape[-1] // self.group.order
        y = y.reshape(y.shape[:-1] + (c, self.group.order))
        y = jnp.take(y, jnp.asarray(self.group.regular_permutation(h)), axis=-1)
        return y.reshape(y.shape[:-2] + (c * self.group.order,))


TRIVIAL = FieldType.trivial_type()


@flax.struct.dataclass
class Field:
    """A feature map with its :class:`FieldType` (a pytree: the type is static metadata, so a
    Field passes through ``jax.jit``, ``vmap`` and Flax's ``apply`` like its array)."""

    tensor: jnp.ndarray
    type: FieldType = flax.struct.field(pytree_node=False)

    @classmethod
    def trivial(cls, x) -> Field:
        """Images or scalar maps ``[B, H, W, C]`` (what a lifting convolution takes)."""
        return cls(jnp.asarray(x), TRIVIAL)

    @classmethod
    def regular(cls, x, group: G.Group | str) -> Field:
        """``[B, H, W, C * |G|]`` regular fields of ``group``."""
        return cls(jnp.asarray(x), FieldType.regular_type(group))

    @property
    def shape(self):
        return self.tensor.shape

    def map(self, fn: Callable) -> Field:
        """``fn`` applied to the array, the type kept: for pointwise maps (ReLU, dropout at
        eval, scaling), which commute with every permutation of pixels and channels."""
        return Field(fn(self.tensor), self.type)

    def __add__(self, other: Field) -> Field:
        if not isinstance(other, Field) or other.type != self.type:
            theirs = other.type if isinstance(other, Field) else "an untyped array"
            raise ValueError(f"cannot add {theirs} to {self.type}: a residual sum needs one type")
        return Field(self.tensor + other.tensor, self.type)


def accept(x, out_type: Callable[[FieldType], FieldType], where: str):
    """``(array, type of the output or None)`` for a layer's input ``x``: a :class:`Field` is
    checked by ``out_type`` (the layer's rule, which raises on a wrong type) and unwrapped; a
    plain array passes (None: the caller checks its channel count)."""
    if isinstance(x, Field):
        return x.tensor, out_type(x.type)
    return x, None


def emit(y, out: FieldType | None):
    """The layer's output: a :class:`Field` of type ``out`` where the input was one."""
    return y if out is None else Field(y, out)


def mismatch(where: str, expected: str, got: FieldType) -> ValueError:
    """The one message for an input of the wrong field type."""
    return ValueError(
        f"{where} expects {expected}, got {got}: the group chain is wrong (a restriction, lift "
        "or group pooling is missing or names another group)"
    )


def check_sequence(layers: Sequence, in_type: FieldType = TRIVIAL) -> FieldType:
    """The output type of ``layers`` applied one after the other to ``in_type`` (every layer
    with an ``out_type`` rule; others, e.g. pointwise maps, keep the type); raises the first
    layer's error when the chain is wrong. Nothing is computed."""
    t = in_type
    for layer in layers:
        if isinstance(layer, Typed):
            t = layer.out_type(t)
    return t


__all__ = ["KINDS", "TRIVIAL", "Field", "FieldType", "accept", "check_sequence", "emit", "mismatch"]
