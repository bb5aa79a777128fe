"""launch/studies/stats.py: the paired tests against hand-computed values and scipy, Holm's
correction, the verdict rule and the convergence criterion."""

from __future__ import annotations

import math

import pytest
import scipy.stats

from launch.studies import stats as S


@pytest.mark.parametrize(
    "d, want",
    [
        ([1, 2, 3, 4, 5, 6], 2 / 64),  # only all + and all - reach |sum| = 21: the floor
        ([3, 1, 2], 2 / 8),  # |sums| 6, 2, 4, 0, 0, 4, 2, 6
        ([4, 1, 1], 2 / 8),  # 6, 4, 4, 2, 2, 4, 4, 6
        ([1, -1], 1.0),  # observed sum 0: every pattern reaches it
        ([-5, 1, 2, 3], 1.0),  # every sum is odd, so |sum| >= 1 always
    ],
)
def test_sign_flip_exact_by_hand(d, want):
    assert math.isclose(S.sign_flip_p(d), want)


def test_paired_t_by_hand_and_against_scipy():
    # d = 1, 2, 3: t = 2 / (1 / sqrt 3); with 2 degrees of freedom the t CDF is closed-form,
    # F(t) = 1/2 + t / (2 sqrt(2 + t^2)), so p = 1 - t / sqrt(2 + t^2)
    t = 2 * math.sqrt(3)
    assert math.isclose(S.paired_t_p([1, 2, 3]), 1 - t / math.sqrt(2 + t * t), rel_tol=1e-9)
    for d in ([-3.1, -0.4, -2.2, 1.0, -5.5, -1.7], [0.3, -0.2, 0.25, 0.1, -0.05, 0.4]):
        want = scipy.stats.ttest_1samp(d, 0.0).pvalue
        assert math.isclose(S.paired_t_p(d), want, rel_tol=1e-9)
    assert S.paired_t_p([2.0, 2.0, 2.0]) == 0.0 and S.paired_t_p([0.0, 0.0]) == 1.0
    assert math.isnan(S.paired_t_p([1.0]))
    # equal differences of percentages that binary rounding makes unequal (two of the study's
    # pairs): no spread, so a constant shift, not a t of 1e15
    d = [15.24 - 16.74, 14.09 - 15.59]
    assert d[0] != d[1]
    assert S.mean_sd(d) == (pytest.approx(-1.5), 0.0)
    assert S.paired_t_p(d) == 0.0 and S.t_interval(d) == (pytest.approx(-1.5), pytest.approx(-1.5))
    assert S.mean_sd([-1.5, -1.5 + 1e-3])[1] > 0  # a real spread stays


def test_wilcoxon_exact_against_scipy_and_with_ties_by_hand():
    for d in ([1.5, -0.3, 2.2, 3.1, 0.7, 4.0], [-1.2, -0.5, 0.9, -2.5, -3.3, -0.1]):
        want = scipy.stats.wilcoxon(d, method="exact").pvalue
        assert math.isclose(S.wilcoxon_p(d), want, rel_tol=1e-9)
    assert math.isclose(S.wilcoxon_p([1, 2, 3, 4, 5, 6]), 2 / 64)
    # ties: |d| = 1, 1, 1, 2 get mid-ranks 2, 2, 2, 4; W+ = 8; of the 16 sign patterns 4 give
    # W+ >= 8 (sums 8 three times, 10 once), so p = 2 * 4/16
    assert math.isclose(S.wilcoxon_p([1, 1, -1, 2]), 0.5)
    assert math.isclose(S.wilcoxon_p([0, 1, 2, 3]), S.wilcoxon_p([1, 2, 3]))  # zeros out
    assert S.wilcoxon_p([0.0, 0.0]) == 1.0


def test_smallest_p_of_exact_tests_on_six_pairs_and_holm_floor():
    assert S.min_p(6, "signflip") == S.min_p(6, "wilcoxon") == 2 / 64
    assert S.min_p(6, "t") == 0.0
    # the reason the t-test is primary: Holm over two comparisons needs p <= 0.025
    assert S.holm([S.min_p(6), S.min_p(6)]) == [0.0625, 0.0625]
    with pytest.raises(ValueError, match="test='z' is invalid"):
        S.test_p([1.0, 2.0], "z")


def test_holm_by_hand():
    got = S.holm([0.01, 0.04, 0.03, 0.005])
    # sorted 0.005 x4 = 0.02, 0.01 x3 = 0.03, 0.03 x2 = 0.06, 0.04 x1 -> max(0.06, 0.04)
    assert got == pytest.approx([0.03, 0.06, 0.06, 0.02])
    got = S.holm([math.nan, 0.02, 0.5])  # NaN: not tested, not counted in m
    assert math.isnan(got[0]) and got[1:] == pytest.approx([0.04, 0.5])
    assert S.holm([0.6, 0.7]) == [1.0, 1.0]
    with pytest.raises(ValueError, match="not in"):
        S.holm([1.5])


def test_compare_and_verdicts():
    a = {0: 10.0, 1: 12.0, 2: 9.0, 3: 11.0, 4: 10.0, 5: 13.0}
    b = {r: e + 3.0 + 0.1 * r for r, e in a.items()}  # A better by 3.0-3.5 points everywhere
    c = S.compare(a, b, need=6)
    assert c["n"] == 6 and c["wins"] == 6 and math.isclose(c["diff_mean"], -3.25)
    assert c["p_signflip"] == 2 / 64 and c["p"] < 1e-6
    pending = S.compare(a, {0: 1.0, 1: 2.0}, need=6)
    assert pending["n"] == 2 and math.isnan(pending["p"])
    recs = S.adjust([c, dict(c, diff_mean=3.25), dict(c, p=0.2), pending])
    assert [r["verdict"] for r in recs] == [
        "supported",
        "contradicted",
        "inconclusive",
        "pending",
    ]
    assert recs[2]["p_holm"] == pytest.approx(0.2)  # the largest of three: x1, then max


@pytest.mark.parametrize(
    "losses, converged",
    [
        ([2.0 - 0.019 * i for i in range(100)], False),  # last window 48% below the one before
        ([2.0 / (1 + i) for i in range(50)] + [0.3] * 50, True),  # flat at 0.3
        ([0.1 * 0.9**i for i in range(100)], True),  # falling, but below the loss floor
        ([1.0], None),
    ],
)
def test_convergence_plateau_rule(losses, converged):
    assert S.convergence(losses)["converged"] is converged


def test_t_interval_matches_scipy_and_brackets_the_mean():
    from scipy import stats as sps

    d = [-3.1, -0.4, -2.2, 1.0, -1.7, -2.9]
    lo, hi = S.t_interval(d)
    ref = sps.ttest_1samp(d, 0.0).confidence_interval(0.95)
    assert (lo, hi) == pytest.approx((ref.low, ref.high), rel=1e-9)
    assert lo < sum(d) / len(d) < hi
    # 0 lies outside the 95% interval exactly when the two-sided t-test's p is below 0.05
    assert (hi < 0.0) == (S.paired_t_p(d) < 0.05)
    assert S.t_interval(d, 0.5)[1] - S.t_interval(d, 0.5)[0] < hi - lo
    assert all(math.isnan(x) for x in S.t_interval([1.0]))
    with pytest.raises(ValueError, match="level=1.0 is invalid"):
        S.t_interval(d, 1.0)
    c = S.compare(dict(enumerate(d)), dict.fromkeys(range(6), 0.0), need=6)
    assert (c["ci_low"], c["ci_high"]) == pytest.approx((lo, hi))
