"""A small plain CNN (``name='cnn'``): the smoke-test model of the trainer and the tests."""

from __future__ import annotations

import functools

import flax.linen as nn
import jax.numpy as jnp

from invjax import precision as P
from invjax.contract import Precise
from invjax.models import register


def _conv(lhs, rhs, window_strides, padding, *, mode, precision=None, **kwargs):
    """``lax.conv_general_dilated`` for ``nn.Conv`` in invjax precision ``mode``."""
    if precision is not None:
        raise ValueError("SimpleCNN: the invjax precision decides the arithmetic")
    return P.conv(lhs, rhs, mode, window_strides=window_strides, padding=padding, **kwargs)


class SimpleCNN(Precise, nn.Module):
    """conv(width) -> BN -> ReLU -> conv(2 width, stride 2) -> BN -> ReLU -> avg pool -> dropout -> dense.

    Shapes: ``[B, H, W, C] -> [B, num_classes]``.
    """

    num_classes: int = 10
    width: int = 8
    dropout: float = 0.0
    precision: str | None = None  # arithmetic of the products (invjax.precision; None: JAX's)

    @nn.compact
    def __call__(self, x, train: bool = False):
        conv = None
        if self.precision is not None:
            conv = functools.partial(_conv, mode=self.precision)
        for i, w in enumerate((self.width, 2 * self.width)):
            x = nn.Conv(
                w, (3, 3), strides=(1 + i, 1 + i), use_bias=False, conv_general_dilated=conv
            )(x)
            x = nn.BatchNorm(use_running_average=not train, momentum=0.9)(x)
            x = nn.relu(x)
        x = jnp.mean(x, axis=(1, 2))
        x = nn.Dropout(self.dropout, deterministic=not train)(x)
        return nn.Dense(self.num_classes, dot_general=P.dense_dot_general(self.precision))(x)


@register("cnn")
def _build(config):
    return SimpleCNN(
        num_classes=config.get("num_classes", 10),
        width=config.get("width", 8),
        dropout=config.get("dropout", 0.0),
    )
