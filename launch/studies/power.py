"""Power of a paired comparison planned before its runs: the smallest effect a test can detect.

A claim "A has a lower test error than B" at one (dataset, N_t) is tested on the paired
differences ``d_r = error_A(r) - error_B(r)`` (percentage points) over ``R`` realisations ``r``;
both arms of a pair share the realisation's split, training subset and seed. The primary test is
the two-sided paired t-test, ``t = mean(d) / (sd(d) / sqrt(R))`` with ``R - 1`` degrees of freedom.

Under an effect ``delta`` the statistic follows a noncentral t distribution with noncentrality
``delta * sqrt(R) / sd_d``, so the probability of rejecting at level ``alpha`` is

    power(delta) = P(|T| > t_{1 - alpha/2, R-1}),   T ~ nct(R - 1, delta * sqrt(R) / sd_d).

:func:`minimum_detectable_effect` inverts it: the ``delta`` detected with probability ``power``
(0.8 by convention). Under Holm's step-down correction over ``m`` claims the first rejection needs
``p <= alpha / m`` and the last ``p <= alpha``: :func:`holm_levels` gives the levels, and the
honest statement of what a family can detect quotes both ends.

``sd_d`` is not known before the runs. It has two parts: the spread of training (seeds, subsets)
and the sampling of each realisation's test set. The second is a floor that no number of epochs
removes: two classifiers that disagree on a share ``q`` of ``n_test`` images have an error
difference whose standard deviation is about ``100 * sqrt(q / n_test)`` points
(:func:`test_set_sd`; McNemar's variance, exact when the difference is small against ``q``).
"""

from __future__ import annotations

import math

from scipy import optimize, stats

ALPHA = 0.05
POWER = 0.8


def _check(name: str, value, low: float, high: float | None = None, inclusive: bool = False):
    v = float(value)
    ok = math.isfinite(v) and (v >= low if inclusive else v > low)
    if high is not None:
        ok = ok and v < high
    if not ok:
        bound = f"in ({low}, {high})" if high is not None else f"> {low}"
        raise ValueError(f"{name}={value!r} is invalid: expected a finite number {bound}")
    return v


def _check_pairs(n_pairs) -> int:
    if isinstance(n_pairs, bool) or int(n_pairs) != n_pairs or n_pairs < 2:
        raise ValueError(f"n_pairs={n_pairs!r} is invalid: a paired t-test needs at least 2 pairs")
    return int(n_pairs)


def paired_t_power(delta: float, sd_d: float, n_pairs: int, alpha: float = ALPHA) -> float:
    """Probability that the two-sided paired t-test at level ``alpha`` rejects ``mean(d) = 0``
    when the differences have mean ``delta`` and standard deviation ``sd_d`` (the same units)."""
    sd = _check("sd_d", sd_d, 0.0)
    a = _check("alpha", alpha, 0.0, 1.0)
    n = _check_pairs(n_pairs)
    df = n - 1
    crit = stats.t.ppf(1 - a / 2, df)
    nc = abs(float(delta)) * math.sqrt(n) / sd
    upper = float(stats.nct.sf(crit, df, nc))
    # scipy's nct returns NaN for a lower tail far below 1e-300; that tail is then zero.
    lower = float(stats.nct.cdf(-crit, df, nc))
    return upper + (lower if math.isfinite(lower) else 0.0)


def minimum_detectable_effect(
    sd_d: float, n_pairs: int, alpha: float = ALPHA, power: float = POWER
) -> float:
    """The smallest ``|delta|`` (units of ``sd_d``) that the two-sided paired t-test on
    ``n_pairs`` pairs at level ``alpha`` detects with probability ``power``."""
    sd = _check("sd_d", sd_d, 0.0)
    target = _check("power", power, 0.0, 1.0)
    a = _check("alpha", alpha, 0.0, 1.0)
    n = _check_pairs(n_pairs)
    if target <= a:
        raise ValueError(f"power={power!r} is invalid: it must exceed alpha={alpha!r}")
    # In units of sd the answer is a pure function of (n, alpha, power); the bracket's upper end
    # grows until the power there exceeds the target (for n = 2 and tiny alpha it is large).
    hi = 1.0
    while paired_t_power(hi, 1.0, n, a) < target:
        hi *= 2.0
    k = optimize.brentq(lambda x: paired_t_power(x, 1.0, n, a) - target, 0.0, hi, xtol=1e-10)
    return k * sd


def holm_levels(m: int, alpha: float = ALPHA) -> list[float]:
    """Holm's step-down levels for a family of ``m`` tests: ``alpha / m, ..., alpha / 1``."""
    if isinstance(m, bool) or int(m) != m or m < 1:
        raise ValueError(f"m={m!r} is invalid: a family has at least 1 test")
    a = _check("alpha", alpha, 0.0, 1.0)
    return [a / (int(m) - i) for i in range(int(m))]


def test_set_sd(disagreement: float, n_test: int) -> float:
    """Standard deviation, in percentage points, of the test-error difference of two classifiers
    that disagree on a share ``disagreement`` of ``n_test`` test images (the test-set floor of
    ``sd_d``)."""
    q = _check("disagreement", disagreement, 0.0, 1.0)
    if isinstance(n_test, bool) or int(n_test) != n_test or n_test < 1:
        raise ValueError(f"n_test={n_test!r} is invalid: expected a positive number of images")
    return 100.0 * math.sqrt(q / int(n_test))


def sd_from_independent(*sds: float) -> float:
    """The standard deviation of a difference of independent quantities with the given standard
    deviations (an upper bound for positively correlated pairs, as paired runs are)."""
    return math.sqrt(sum(_check("sd", s, 0.0, inclusive=True) ** 2 for s in sds))
