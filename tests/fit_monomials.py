"""A bare training loop for the monomial networks' learning tests (Adam, cross-entropy, the
BatchNorm statistics and the frozen II mask carried along): no optimiser schedule, no data
pipeline, so a test measures the network alone."""

from __future__ import annotations

import jax
import numpy as np
import optax


def fit(net, variables, x, y, *, learning_rate: float, steps: int, batch: int) -> dict:
    """``variables`` after ``steps`` Adam steps on random batches of ``(x, y)`` (fixed seeds)."""
    params, stats, mask = variables["params"], variables["batch_stats"], variables["ii_mask"]
    tx = optax.adam(learning_rate)
    opt = tx.init(params)

    @jax.jit
    def step(params, stats, opt, xb, yb, key):
        def loss(p):
            logits, new = net.apply(
                {"params": p, "batch_stats": stats, "ii_mask": mask},
                xb,
                train=True,
                mutable=["batch_stats"],
                rngs={"dropout": key},
            )
            ce = optax.softmax_cross_entropy_with_integer_labels(logits, yb).mean()
            return ce, new["batch_stats"]

        (_, stats), g = jax.value_and_grad(loss, has_aux=True)(params)
        updates, opt = tx.update(g, opt, params)
        return optax.apply_updates(params, updates), stats, opt

    rng, key = np.random.default_rng(0), jax.random.PRNGKey(1)
    for _ in range(steps):
        idx = rng.choice(len(x), batch, replace=False)
        key, k = jax.random.split(key)
        params, stats, opt = step(params, stats, opt, x[idx], y[idx], k)
    return {"params": params, "batch_stats": stats, "ii_mask": mask}
