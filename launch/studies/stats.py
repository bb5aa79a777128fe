"""Paired statistics of a study (:mod:`launch.studies.report` uses them): pure functions of
numbers, no file or run access, so each is tested in isolation.

A claim "A is better than B" at one (dataset, N_t) is read from the paired differences
``d_r = error_A(r) - error_B(r)`` over the realisations ``r`` (same split, subset and seed for A
and B; negative = A better). Tests, all two-sided, of ``H0: the differences are centred at 0``:

* :func:`paired_t_p`: the paired t-test, ``t = mean(d) / (sd(d) / sqrt(n))`` with ``n - 1``
  degrees of freedom (assumes roughly normal differences);
* :func:`sign_flip_p`: the exact sign-flip permutation test of ``sum(d)`` over all ``2^n`` sign
  patterns (exchangeability of the signs under H0; no distributional assumption);
* :func:`wilcoxon_p`: the exact Wilcoxon signed-rank test (zeros dropped, mid-ranks for ties,
  the exact null distribution of the rank sum under those ranks).

The exact tests are discrete: with ``n`` pairs their smallest two-sided p is ``2 / 2^n``
(:func:`min_p`; 0.03125 at n = 6). Holm's correction over ``m`` comparisons rejects the smallest
p only if ``p <= alpha / m``, so at alpha = 0.05 an exact test on 6 pairs can reject nothing in a
family of two or more comparisons; the paired t-test is therefore the protocol's primary test and
the exact sign-flip p is reported beside it (where the verdict rests on the normality
assumption, the reader sees it).

:func:`t_interval` gives the 95% confidence interval of the mean difference (Student t, ``n - 1``
degrees of freedom, not adjusted for the multiple comparisons): an *inconclusive* verdict with a
narrow interval around 0 says "no effect of that size", a wide one says "too few realisations to
tell", and the reader needs to know which.

:func:`holm` gives Holm's step-down adjusted p-values; :func:`verdict` turns an adjusted p and
the mean difference into "supported" / "contradicted" / "inconclusive".

Convergence of one run (:func:`convergence`): the epoch-mean training losses of the last 10% of
the epochs against the 10% before them; the run is *unconverged* when the loss still fell by
more than :data:`PLATEAU_REL` (5%) between the two windows and the final loss is above
:data:`LOSS_FLOOR` (near zero a relative change means nothing).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

ALPHA = 0.05
TESTS = ("t", "signflip", "wilcoxon")
PLATEAU_REL = 0.05
LOSS_FLOOR = 0.02
WINDOW = 0.1


def _diffs(diffs: Sequence[float]) -> list[float]:
    d = [float(x) for x in diffs]
    if not all(math.isfinite(x) for x in d):
        raise ValueError(f"paired differences {d} contain NaN or infinity")
    return d


def mean_sd(diffs: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (``n - 1``; NaN for fewer than two values)."""
    d = _diffs(diffs)
    if not d:
        return math.nan, math.nan
    m = sum(d) / len(d)
    if len(d) < 2:
        return m, math.nan
    sd = math.sqrt(sum((x - m) ** 2 for x in d) / (len(d) - 1))
    # Differences of percentages carry binary rounding (15.24 - 16.74 is -1.4999999999999982,
    # 14.09 - 15.59 is -1.5): a spread that small is none, not a t of 1e15. Test errors resolve
    # 0.002 points at the finest, far above this tolerance.
    return m, 0.0 if sd <= 1e-9 * max(1.0, max(abs(x) for x in d)) else sd


def paired_t_p(diffs: Sequence[float]) -> float:
    """Two-sided p of the paired t-test; NaN for fewer than two pairs.

    ``t = mean / (sd / sqrt(n))``, ``p = 2 P(T_{n-1} >= |t|)``. All differences equal: p = 1 if
    they are 0, else 0 (a constant non-zero shift, t infinite).
    """
    from scipy.special import stdtr  # the Student t CDF

    d = _diffs(diffs)
    n = len(d)
    if n < 2:
        return math.nan
    m, sd = mean_sd(d)
    if sd == 0.0:
        return 1.0 if m == 0.0 else 0.0
    t = m / (sd / math.sqrt(n))
    return float(min(1.0, 2.0 * stdtr(n - 1, -abs(t))))


def t_interval(diffs: Sequence[float], level: float = 0.95) -> tuple[float, float]:
    """The two-sided ``level`` confidence interval of the mean paired difference,
    ``mean -+ t_{n-1, (1 + level) / 2} sd / sqrt(n)``; NaNs for fewer than two pairs."""
    from scipy.special import stdtrit  # the inverse Student t CDF

    if not 0.0 < level < 1.0:
        raise ValueError(f"level={level} is invalid: it must be in (0, 1)")
    d = _diffs(diffs)
    if len(d) < 2:
        return math.nan, math.nan
    m, sd = mean_sd(d)
    half = float(stdtrit(len(d) - 1, (1.0 + level) / 2.0)) * sd / math.sqrt(len(d))
    return m - half, m + half


def sign_flip_p(diffs: Sequence[float]) -> float:
    """Exact two-sided sign-flip permutation p of ``sum(d)``: the share of the ``2^n`` sign
    patterns whose ``|sum|`` reaches the observed one (the observed pattern counts). NaN for no
    pairs; at most 20 pairs (10^6 patterns)."""
    d = _diffs(diffs)
    n = len(d)
    if n == 0:
        return math.nan
    if n > 20:
        raise ValueError(f"sign_flip_p enumerates 2^n patterns: n={n} pairs is too many (<= 20)")
    obs = abs(sum(d))
    tol = 1e-9 * max(1.0, sum(abs(x) for x in d))  # float sums of the same values may differ
    hits = sum(
        abs(sum(s * x for s, x in zip(signs, d))) >= obs - tol
        for signs in itertools.product((1.0, -1.0), repeat=n)
    )
    return hits / 2**n


def _midranks(values: Sequence[float]) -> list[float]:
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def wilcoxon_p(diffs: Sequence[float]) -> float:
    """Exact two-sided Wilcoxon signed-rank p (zeros dropped, mid-ranks of ``|d|`` for ties).

    The statistic is ``W+ = sum of the ranks of the positive differences``; under H0 each rank's
    sign is a fair coin, so the exact null distribution enumerates the ``2^n`` sign patterns of
    the same ranks. ``p = 2 min(P(W+ <= w), P(W+ >= w))``, capped at 1. For untied, non-zero
    differences this is ``scipy.stats.wilcoxon(d, method='exact')``. NaN when no non-zero
    difference is left; 1 when all are zero.
    """
    d = _diffs(diffs)
    if d and all(x == 0.0 for x in d):
        return 1.0
    nz = [x for x in d if x != 0.0]
    if not nz:
        return math.nan
    if len(nz) > 20:
        raise ValueError(f"wilcoxon_p enumerates 2^n patterns: n={len(nz)} pairs is too many")
    ranks = _midranks([abs(x) for x in nz])
    w = sum(r for r, x in zip(ranks, nz) if x > 0)
    tol = 1e-9 * sum(ranks)
    null = [
        sum(r for r, s in zip(ranks, signs) if s)
        for signs in itertools.product((True, False), repeat=len(nz))
    ]
    lo = sum(v <= w + tol for v in null) / len(null)
    hi = sum(v >= w - tol for v in null) / len(null)
    return min(1.0, 2.0 * min(lo, hi))


def test_p(diffs: Sequence[float], test: str = "t") -> float:
    """The two-sided p of ``test`` in :data:`TESTS`."""
    if test not in TESTS:
        raise ValueError(f"test={test!r} is invalid: choose from {list(TESTS)}")
    return {"t": paired_t_p, "signflip": sign_flip_p, "wilcoxon": wilcoxon_p}[test](diffs)


def min_p(n: int, test: str = "signflip") -> float:
    """The smallest two-sided p ``test`` can give with ``n`` pairs: ``2 / 2^n`` for the exact
    tests (every difference of one sign), 0 for the t-test (continuous)."""
    if test not in TESTS:
        raise ValueError(f"test={test!r} is invalid: choose from {list(TESTS)}")
    if n < 1:
        raise ValueError(f"n={n} pairs is invalid: it must be >= 1")
    return 0.0 if test == "t" else min(1.0, 2.0 / 2**n)


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the input order.

    Sorted ascending ``p_(1) <= ... <= p_(m)``: ``adj_(i) = max_{j <= i} min(1, (m - j + 1)
    p_(j))``; rejecting ``adj <= alpha`` controls the family-wise error rate at ``alpha``. NaN
    entries (untestable comparisons) stay NaN and do not count in ``m``.
    """
    idx = [i for i, p in enumerate(pvalues) if not math.isnan(p)]
    for i in idx:
        if not 0.0 <= pvalues[i] <= 1.0:
            raise ValueError(f"p-value {pvalues[i]} at position {i} is not in [0, 1]")
    m = len(idx)
    out = [math.nan] * len(pvalues)
    running = 0.0
    for rank, i in enumerate(sorted(idx, key=lambda i: pvalues[i])):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        out[i] = running
    return out


def verdict(diff_mean: float, p_adjusted: float, alpha: float = ALPHA) -> str:
    """``'supported'`` (the claimed-better model's error is lower, adjusted p <= alpha),
    ``'contradicted'`` (higher, adjusted p <= alpha) or ``'inconclusive'``."""
    if math.isnan(p_adjusted) or math.isnan(diff_mean) or p_adjusted > alpha or diff_mean == 0:
        return "inconclusive"
    return "supported" if diff_mean < 0 else "contradicted"


def compare(better: dict, worse: dict, need: int, test: str = "t") -> dict:
    """One paired comparison: ``better`` / ``worse`` map realisation -> test error [%].

    Returns the common realisations' count ``n``, ``diff_mean`` / ``diff_sd`` (points, the first
    minus the second), ``ci_low`` / ``ci_high`` (:func:`t_interval`, 95%), ``wins``
    (realisations where the first is lower), ``p`` (``test``) and ``p_signflip`` (exact); ``p``
    is NaN (not tested, not in the Holm family) while fewer than ``need`` realisations are
    common.
    """
    common = sorted(set(better) & set(worse))
    d = [better[r] - worse[r] for r in common]
    m, sd = mean_sd(d) if d else (math.nan, math.nan)
    complete = len(d) >= need
    lo, hi = t_interval(d)
    return {
        "n": len(d),
        "diff_mean": m,
        "diff_sd": sd,
        "ci_low": lo,
        "ci_high": hi,
        "wins": sum(x < 0 for x in d),
        "p": test_p(d, test) if complete else math.nan,
        "p_signflip": sign_flip_p(d) if complete else math.nan,
    }


def adjust(records: list[dict], alpha: float = ALPHA) -> list[dict]:
    """Add ``p_holm`` (Holm over every record with a finite ``p``) and ``verdict`` to each."""
    adj = holm([r["p"] for r in records])
    for r, a in zip(records, adj):
        r["p_holm"] = a
        r["verdict"] = verdict(r["diff_mean"], a, alpha) if not math.isnan(a) else "pending"
    return records


def convergence(losses: Sequence[float], window: float = WINDOW) -> dict:
    """The plateau criterion on one run's epoch-mean training losses (first epoch first).

    ``last`` = mean of the last ``ceil(window E)`` epochs, ``before`` = the same number just
    before them; ``drop = (before - last) / before``. Converged unless ``drop > PLATEAU_REL``
    and ``last > LOSS_FLOOR``. Fewer than two epochs: not judged (``converged`` None). Returns
    ``final_loss``, ``drop``, ``converged`` and the two window means ``before`` / ``last``.
    """
    x = [float(v) for v in losses]
    k = max(1, math.ceil(window * len(x)))
    if len(x) < 2 * k:
        final = x[-1] if x else math.nan
        return {"final_loss": final, "drop": math.nan, "converged": None}
    last = sum(x[-k:]) / k
    before = sum(x[-2 * k : -k]) / k
    drop = (before - last) / before if before > 0 else 0.0
    means = {"before": before, "last": last}
    if not math.isfinite(last):
        return {"final_loss": x[-1], "drop": math.nan, "converged": False} | means
    return {
        "final_loss": x[-1],
        "drop": drop,
        "converged": not (drop > PLATEAU_REL and last > LOSS_FLOOR),
    } | means
