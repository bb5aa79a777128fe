"""The module contract: what a layer or network can do, declared by type.

Each ability is an abstract base class. A module has the ability when its class derives from it
(every invjax layer and network does) or is registered with it (``Exact.register(MyNet)`` for a
class that defines the methods but cannot change its bases). The rest of invjax asks
``isinstance(module, Exact)``, never ``hasattr(module, "exact_group")``, so a misspelt method
is an error at class creation (an abstract method left unimplemented) rather than an ability
silently missing.

===================  =========================================  ==================================
ability              methods                                    used by
===================  =========================================  ==================================
:class:`Exact`       ``exact_group(input_shape) -> Group``      :mod:`invjax.equivariance`, the
                                                                certificate, export's manifest
:class:`Typed`       ``out_type(in_type) -> FieldType``,        :mod:`invjax.fields`, the
                     ``in_type() -> FieldType``                 equivariance check of one layer
:class:`Exportable`  ``inference_arrays(x) -> dict | None``,    :mod:`invjax.export`
                     ``inference_call(arrays, x)``
:class:`Precise`     a ``precision`` field (:mod:`invjax        :func:`invjax.precision.configure`
                     .precision`'s mode names)
:class:`EpochHooks`  ``acts_at_epoch_end(epochs_done)``,        the trainer
                     ``on_epoch_end(variables, epochs_done,
                     images)``, ``scaled_schedule(scale)``
===================  =========================================  ==================================

A researcher's own module gets every ability by deriving from these classes (or by holding invjax
layers: :func:`invjax.precision.configure` reaches the layers inside any Linen module; a network
without :class:`Exact` makes no claim, and the equivariance check then measures the transforms
it is given).

The inference form (:class:`Exportable`) has one signature: ``inference_arrays(x)`` computes,
from the module's variables and its input ``x`` (the first argument of ``__call__``; a
:class:`invjax.fields.Field` is unwrapped first), the arrays that eval mode needs, or None where
the training form is already the inference form; ``inference_call(arrays, x)`` computes eval-mode
``__call__(x)`` from them. Export passes the unwrapped array and wraps the result back into the
input's field type, so neither method sees a :class:`~invjax.fields.Field`.
"""

from __future__ import annotations

import abc
import contextlib
import contextvars
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: the contract imports nothing of invjax at run time
    from invjax import fields
    from invjax import groups as G


class Exact(abc.ABC):
    """A module that states the group it is equivariant (or, with an invariant output,
    invariant) to: ``exact_group(input_shape)``, met by :func:`invjax.equivariance.exact_group`
    with the symmetries of the pixel grid. A module without this ability claims nothing (the
    trivial group)."""

    @abc.abstractmethod
    def exact_group(self, input_shape) -> G.Group:
        """The group this module is exact for on inputs of ``input_shape`` ``[..., H, W, C]``."""


class Typed(abc.ABC):
    """A module that maps one field type to another (:mod:`invjax.fields`)."""

    @abc.abstractmethod
    def out_type(self, in_type: fields.FieldType) -> fields.FieldType:
        """The output's field type for input ``in_type``; one clear ``ValueError`` (from
        :func:`invjax.fields.mismatch`) for a type the module cannot take."""

    @abc.abstractmethod
    def in_type(self) -> fields.FieldType:
        """The field type the module takes when none is given (the one the equivariance check
        of this module alone feeds it)."""


class Exportable(abc.ABC):
    """A module with an inference form (module docstring): what :mod:`invjax.export` runs."""

    @abc.abstractmethod
    def inference_arrays(self, x) -> dict | None:
        """The arrays eval mode needs, from the module's variables and its input ``x`` (an array,
        or a mapping of arrays for a head), or None (the training form is the inference form)."""

    @abc.abstractmethod
    def inference_call(self, arrays, x):
        """Eval-mode ``self(x)`` computed from ``arrays`` (:meth:`inference_arrays`)."""


_UNSET = object()
_MODE: contextvars.ContextVar = contextvars.ContextVar("invjax_precision_mode", default=_UNSET)


class Precise:
    """A module whose products compute in the :mod:`invjax.precision` mode of its ``precision``
    field (None: JAX's). The subclass declares the field (``precision: str | None = None``).

    Construction inside :func:`precision_scope` sets the field to the scope's mode: how
    :func:`invjax.precision.configure` reaches the invjax layers that a researcher's own module
    builds inside its ``__call__`` or ``setup`` (the configured module enters the scope in its
    own methods, so the mode is part of the module, never state a compiled function outlives).
    """

    def __post_init__(self):
        mode = _MODE.get()
        if mode is not _UNSET:
            object.__setattr__(self, "precision", mode)
        super().__post_init__()


@contextlib.contextmanager
def precision_scope(mode: str | None):
    """Every :class:`Precise` module constructed inside computes in ``mode`` (internal: entered
    by the modules :func:`invjax.precision.configure` returns)."""
    token = _MODE.set(mode)
    try:
        yield
    finally:
        _MODE.reset(token)


class EpochHooks(abc.ABC):
    """A module that owns a schedule over training epochs (the Scale-II monomial head's pruning).

    The trainer calls :meth:`on_epoch_end` after each epoch where :meth:`acts_at_epoch_end` is
    True, and :meth:`scaled_schedule` once when ``train.epochs_scale`` shortens or lengthens a
    run. ``on_epoch_end`` must be a deterministic function of its arguments, so that a resumed
    run repeats it exactly.
    """

    def acts_at_epoch_end(self, epochs_done: int) -> bool:
        """False promises that :meth:`on_epoch_end` returns ``variables`` unchanged after
        ``epochs_done`` epochs (the trainer then skips it). Default: it may act after every
        epoch."""
        del epochs_done
        return True

    @abc.abstractmethod
    def on_epoch_end(self, variables: dict, epochs_done: int, images) -> dict:
        """The model's variables after ``epochs_done`` epochs (``images``: a fixed batch of
        training images, e.g. for statistics)."""

    def scaled_schedule(self, scale: float) -> EpochHooks:
        """This module with its epoch schedule at the same shares of a run ``scale`` times as
        long (default: unchanged)."""
        del scale
        return self

    def schedule_warning(self, num_epochs: int) -> str | None:
        """One line when a run of ``num_epochs`` epochs would not complete the schedule."""
        del num_epochs
        return None


def is_nnx(module) -> bool:
    """Whether ``module`` is a Flax NNX module (:mod:`invjax.nnx`), which holds its own state and
    is called directly, not a Linen one applied to its variables. Asked without importing
    ``flax.nnx`` (seconds at start-up): a program holding an NNX module has imported it."""
    nnx = sys.modules.get("flax.nnx")
    return nnx is not None and isinstance(module, nnx.Module)


__all__ = ["EpochHooks", "Exact", "Exportable", "Precise", "Typed", "is_nnx", "precision_scope"]
