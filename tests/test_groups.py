"""Groups: axioms, matrices, the exact and interpolated actions, restriction."""

from __future__ import annotations

import math

import numpy as np
import pytest

from invjax import groups as G


@pytest.mark.parametrize("spec", ["C1", "C4", "C8", "D1", "D4", "D8", "D3"])
def test_group_axioms_and_matrices(spec):
    g = G.parse_group(spec)
    t = g.mul_table
    assert sorted(t[0]) == list(range(g.order))  # identity row is a permutation
    for a in range(g.order):
        assert t[a, g.inverse[a]] == 0 and t[g.inverse[a], a] == 0
        for b in range(g.order):
            np.testing.assert_allclose(g.matrix(a) @ g.matrix(b), g.matrix(t[a, b]), atol=1e-12)
            for c in range(g.order):
                assert t[t[a, b], c] == t[a, t[b, c]]


@pytest.mark.parametrize("bad", ["X4", "D0", "C-1", "", "D4.5"])
def test_parse_group_rejects(bad):
    with pytest.raises(ValueError, match="unknown group"):
        G.parse_group(bad)


def test_exact_actions_match_interpolation_at_grid_angles(photo32):
    d4 = G.dihedral(4)
    for g in range(d4.order):
        exact = np.asarray(G.transform(photo32, d4, g))
        interp = np.asarray(G.affine(photo32, d4.matrix(g), "bicubic"))
        np.testing.assert_allclose(exact, interp, atol=1e-6)


def test_transform_is_a_left_action(photo32):
    d4 = G.dihedral(4)
    for a in range(d4.order):
        for b in range(d4.order):
            lhs = G.transform(G.transform(photo32, d4, b), d4, a)
            rhs = G.transform(photo32, d4, d4.mul_table[a, b])
            np.testing.assert_array_equal(np.asarray(lhs), np.asarray(rhs))


def test_regular_action_is_a_left_action():
    """On regular fields (random values: the channel layout has no natural image)."""
    d8 = G.dihedral(8)
    x = np.random.default_rng(0).normal(size=(1, 4, 4, 3 * d8.order)).astype(np.float32)
    for a, b in [(2, 4), (10, 6), (12, 14), (4, 8)]:  # grid-exact elements of D8
        lhs = G.transform_regular(G.transform_regular(x, d8, b), d8, a)
        rhs = G.transform_regular(x, d8, d8.mul_table[a, b])
        np.testing.assert_allclose(np.asarray(lhs), np.asarray(rhs), atol=1e-6)


def test_scale_round_trip_on_photo(camera64):
    """Shrinking by 0.8 then enlarging by 1.25 (bicubic) recovers the central region."""
    x = camera64
    y = np.asarray(G.scale(G.scale(x, 0.8), 1.25))
    c = slice(16, 49)
    rel = np.linalg.norm(y[:, c, c] - x[:, c, c]) / np.linalg.norm(x[:, c, c])
    # Measured 0.067: shrinking by 0.8 discards the finest detail, which enlarging cannot restore.
    assert rel < 0.1, rel


@pytest.mark.parametrize("big,small", [("D8", "D4"), ("D4", "D1"), ("C8", "C4"), ("D8", "C2")])
def test_restriction_indices_give_regular_subgroup_fields(big, small):
    g, h = G.parse_group(big), G.parse_group(small)
    idx = G.restriction_indices(g, h)
    assert sorted(idx) == list(range(g.order))
    emb = G.subgroup_embedding(g, h)
    blocks = idx.reshape(-1, h.order)
    for k, u in enumerate(emb):  # u acts as the k-th element of h
        for block in blocks:
            for j, gi in enumerate(block):
                # restricted channel j of the block holds g-element emb[j] * t; acting with u must
                # map it to the channel of u^-1 emb[j] t within the same block.
                target = g.mul_table[g.inverse[u], gi]
                jj = h.mul_table[h.inverse[k], j]
                assert block[jj] == target


def test_check_chain_rejects_non_subgroups():
    assert [x.name for x in G.check_chain(("D8", "D4", "D1"))] == ["D8", "D4", "D1"]
    with pytest.raises(ValueError, match="not a subgroup"):
        G.check_chain(("C8", "D4"))
    with pytest.raises(ValueError, match="not a subgroup"):
        G.check_chain(("D8", "D3"))


def test_scale_set():
    s = G.scale_set(4)
    assert s[0] == 1.0 and math.isclose(s[3], 2.0)
    with pytest.raises(ValueError):
        G.scale_set(0)
