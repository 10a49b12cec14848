"""The α–β cost model of `horo-bench model` (horo/bench/model.py): fit and equations."""
import math

import pytest

from horo.bench import model


def test_fit_recovers_alpha_and_beta_from_exact_times():
    alpha, beta = 25e-6, 1 / 1.25e9  # 25 µs, 1.25 GB/s
    sizes = model.PINGPONG_SIZES
    fit_a, fit_b = model.fit_alpha_beta(sizes, [alpha + beta * m for m in sizes])
    assert fit_a == pytest.approx(alpha, rel=1e-6)
    assert fit_b == pytest.approx(beta, rel=1e-9)


def test_bandwidth_terms_dominate_large_messages():
    p, per_host, m = 64, 8, 1 << 30
    b = 8 / 100e9  # 100 Gbit/s
    # ring: each host link carries 2(p-1)/p m; busbw tends to the link rate
    assert model.busbw(p, m, model.ring_time(p, m, 0.0, b)) == pytest.approx(1 / b)
    # hierarchical with a free intra-host layer: the link carries 2(H-1)/H m, busbw above the link rate
    t = model.hierarchical_time(p, per_host, m, 0.0, 0.0, 0.0, b)
    hosts = p // per_host
    assert t == pytest.approx(2 * (hosts - 1) / hosts * m * b)
    assert model.busbw(p, m, t) > 1 / b
    # recursive doubling sends the whole message log2(p) times
    assert model.tree_time(p, m, 0.0, b) == pytest.approx(math.log2(p) * m * b)


def test_latency_terms_dominate_small_messages():
    p, m, a = 1024, 8, 10e-6
    assert model.ring_time(p, m, a, 0.0) == pytest.approx(2 * (p - 1) * a)
    assert model.tree_time(p, m, a, 0.0) == pytest.approx(10 * a)
    # one host: only the intra-host terms remain
    assert model.hierarchical_time(8, 8, m, a, 0.0, 1.0, 1.0) == pytest.approx(14 * a)


def test_predictions_cover_every_rate_and_rank_count():
    fit = {"alpha_intra": 5e-6, "beta_intra": 1 / 50e9, "alpha_cross": 20e-6, "beta_cross": 1 / 0.1e9}
    rows = model.predictions(fit, 64 << 20)
    assert {(r[0], r[1]) for r in rows} == {(rate, p) for rate in model.RATES_GBIT for p in model.RANKS}
    for rate, p, ring, hier, tree in rows:
        assert ring > 0 and hier > 0 and tree > 0
        if rate == 10 and p >= 64:  # slow links, many hosts: less over the link, fewer latency steps
            assert hier > ring


def test_reduction_term_adds_gamma_per_byte_each_algorithm_reduces():
    p, per_host, m, g = 12, 2, 1 << 26, 1 / 5e9  # 6 hosts, reduction at 5 GB/s
    assert model.ring_time(p, m, 0.0, 0.0, g) == pytest.approx((p - 1) / p * m * g)
    # intra reduce-scatter reduces (L-1)/L of m; the cross step (H-1)/H of each local rank's m/L slice
    hosts = p // per_host
    expected = ((per_host - 1) / per_host * m + (hosts - 1) / hosts * m / per_host) * g
    assert model.hierarchical_time(p, per_host, m, 0.0, 0.0, 0.0, 0.0, g) == pytest.approx(expected)
    assert model.tree_time(8, m, 0.0, 0.0, g) == pytest.approx(3 * m * g)
    # a slower reduction lowers every prediction
    fit = {"alpha_intra": 5e-6, "beta_intra": 1 / 50e9, "alpha_cross": 20e-6, "beta_cross": 1 / 0.1e9}
    fast, slow = model.predictions(fit, m), model.predictions({**fit, "gamma": g}, m)
    assert all(s[k] < f[k] for f, s in zip(fast, slow) for k in (2, 3, 4))
