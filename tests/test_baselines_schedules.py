"""The baselines' schedules: closed forms of their bytes, the bytes the reference really moves, the dispatcher."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from birder_ref import baseline_schedules, marsit, onebit_adam, registry
from birder_ref.execute import ByteLog
from birder_ref.registry import optimizer_schedule
from birder_ref.schedules import Layout, allreduce, padded_dim

VARIANTS = [
    ("onebit-adam", {}),
    ("onebit-adam", {"full_precision": True}),
    ("zero-one-adam", {}),
    ("zero-one-adam", {"full_precision": True}),
    ("marsit", {}),
    ("marsit", {"full_precision": True}),
    ("marsit", {"topology": "torus"}),
    ("marsit", {"topology": "torus", "full_precision": True}),
]


def busiest(sched) -> dict[str, int]:
    return {ph.name: max(ph.bytes_sent().values(), default=0) for ph in sched.phases}


def expanded(sched) -> dict[str, int]:
    """Per phase, the most bytes any endpoint sends, counted message by message."""
    out = {}
    for ph in sched.phases:
        sent: dict[int, int] = {}
        for messages in ph.rounds():
            for m in messages:
                sent[m.src] = sent.get(m.src, 0) + m.nbytes
        out[ph.name] = max(sent.values(), default=0)
    return out


@given(st.sampled_from(VARIANTS), st.integers(1, 4), st.integers(1, 4), st.integers(1, 3000))
def test_schedule_bytes_equal_closed_forms(variant, n_nodes, gpus, dim):
    optimizer, options = variant
    layout = Layout(n_nodes, gpus)
    sched = baseline_schedules.schedule(optimizer, layout, dim, **options)
    closed = baseline_schedules.paper_bytes_per_gpu(optimizer, layout, dim, **options)
    assert busiest(sched) == closed
    assert expanded(sched) == closed
    assert sched.padded_dim == padded_dim(dim, layout.n_ranks)


def test_dispatcher_names_every_baseline_and_rejects_bad_options():
    layout = Layout(2, 4)
    for optimizer, options in VARIANTS:
        assert optimizer_schedule(optimizer, layout, 1000, **options) == baseline_schedules.schedule(
            optimizer, layout, 1000, **options)
    with pytest.raises(ValueError, match="topology"):
        optimizer_schedule("onebit-adam", layout, 1000, topology="torus")
    with pytest.raises(ValueError, match="unknown topology"):
        optimizer_schedule("marsit", layout, 1000, topology="tree")
    with pytest.raises(ValueError, match="dim"):
        baseline_schedules.schedule("marsit", layout, 0)


def test_one_bit_allreduce_is_sixteen_times_smaller_than_fp16_and_blog_ratio():
    """Blog: 16x less volume than an fp16 all-reduce in the compression stage; 1/(0.15 + 0.85/16) = 4.92 ("5x")."""
    layout, d = Layout(4, 8), 25_000_000
    onebit = sum(busiest(baseline_schedules.schedule("onebit-adam", layout, d)).values())
    fp16 = sum(busiest(allreduce(layout, d, bits=16)).values())
    assert fp16 / onebit == pytest.approx(16, rel=1e-3)
    w = onebit_adam.DEFAULT_WARMUP_FRACTION
    assert 1 / (w + (1 - w) * onebit / fp16) == pytest.approx(4.92, abs=0.01)


@pytest.mark.parametrize("K, printed", [(1, 32), (50, 1.62), (100, 1.31), (200, 1.16), (None, 1)])
def test_marsit_amortized_bits_per_element_reproduce_figure_3b(K, printed):
    """Marsit Fig. 3b's Bits column, from the schedules themselves: one fp32 round every K, 1-bit otherwise."""
    layout, d = Layout(8, 1), 8 * 1000
    one = sum(busiest(baseline_schedules.schedule("marsit", layout, d)).values())
    full = sum(busiest(baseline_schedules.schedule("marsit", layout, d, full_precision=True)).values())
    rounds = 400  # the paper's K = inf: more than the 400 rounds of the run
    k = rounds if K is None else K
    bits = (full + (k - 1) * one) / k / one
    assert baseline_schedules.marsit_bits_per_element(K) == pytest.approx(bits if K else 1.0)
    if K is None:  # the literal round t = 0 in full precision gives 1 + 31/400; the paper prints 1 (notes §2.8.6)
        assert bits == pytest.approx(1 + 31 / 400)
    else:
        assert round(bits, 2) == pytest.approx(printed)


@pytest.mark.parametrize("layout", [Layout(1, 4), Layout(2, 4), Layout(3, 2)])
def test_compressed_allreduce_moves_what_its_schedule_says(layout):
    p, d = layout.n_ranks, 8 * layout.n_ranks * 5
    rng = np.random.default_rng(1)
    log = ByteLog()
    onebit_adam.compressed_allreduce(rng.standard_normal((p, d)).astype(np.float32), np.zeros((p, d), np.float32),
                                     np.zeros((p, d // p), np.float32), log=log)
    assert log.bytes_per_gpu(p) == baseline_schedules.paper_bytes_per_gpu("onebit-adam", layout, d)


@pytest.mark.parametrize("topology", ["ring", "torus"])
@pytest.mark.parametrize("layout", [Layout(2, 4), Layout(3, 2), Layout(1, 3)])
def test_marsit_moves_what_its_schedule_says(topology, layout):
    p, d = layout.n_ranks, 77
    rng = np.random.default_rng(2)
    values = rng.standard_normal((p, d)).astype(np.float32)
    u = rng.random((p, d), dtype=np.float32)
    log = ByteLog()
    marsit.sign_allreduce(values, layout, u, u, topology, log)
    closed = baseline_schedules.paper_bytes_per_gpu("marsit", layout, d, topology=topology)
    assert log.bytes_per_gpu(p) == closed
    log = ByteLog()
    mean = marsit.full_precision_mean(values, layout, topology, log)
    assert log.bytes_per_gpu(p) == baseline_schedules.paper_bytes_per_gpu("marsit", layout, d, topology=topology,
                                                                        full_precision=True)
    np.testing.assert_allclose(mean, values.mean(axis=0), rtol=1e-5, atol=1e-6)


def test_baseline_names_are_the_contract_names():
    assert set(baseline_schedules.BASELINES) | {"sgdm", "adam", "birder"} == set(registry.SIMULATED)
