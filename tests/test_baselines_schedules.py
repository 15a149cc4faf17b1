"""The baselines' schedules: closed forms of their bytes, the bytes the reference really moves, and the registry
choosing each optimizer's schedule family."""

from functools import partial

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from birder_ref import baseline_schedules, marsit, onebit_adam, registry
from birder_ref.baseline_schedules import (
    allreduce_bytes_per_gpu,
    compressed_allreduce,
    compressed_allreduce_bytes_per_gpu,
    marsit_bits_per_element,
    marsit_bytes_per_gpu,
    marsit_schedule,
)
from birder_ref.execute import ByteLog
from birder_ref.registry import optimizer_schedule
from birder_ref.schedules import Layout, allreduce, padded_dim

# (optimizer, its schedule's options, the closed form of that schedule's bytes per GPU)
VARIANTS = [
    ("onebit-adam", {}, compressed_allreduce_bytes_per_gpu),
    ("onebit-adam", {"full_precision": True}, allreduce_bytes_per_gpu),
    ("zero-one-adam", {}, compressed_allreduce_bytes_per_gpu),
    ("zero-one-adam", {"full_precision": True}, allreduce_bytes_per_gpu),
    ("marsit", {}, marsit_bytes_per_gpu),
    ("marsit", {"full_precision": True}, partial(marsit_bytes_per_gpu, full_precision=True)),
    ("marsit", {"topology": "torus"}, partial(marsit_bytes_per_gpu, topology="torus")),
    ("marsit", {"topology": "torus", "full_precision": True},
     partial(marsit_bytes_per_gpu, topology="torus", full_precision=True)),
    ("sgdm", {}, allreduce_bytes_per_gpu),
    ("adam", {"full_precision": True}, allreduce_bytes_per_gpu),
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
    optimizer, options, closed_form = variant
    layout = Layout(n_nodes, gpus)
    sched = optimizer_schedule(optimizer, layout, dim, **options)
    closed = closed_form(layout, dim)
    assert busiest(sched) == closed
    assert expanded(sched) == closed
    assert sched.padded_dim == padded_dim(dim, layout.n_ranks)


def test_each_spec_builds_its_family_and_rejects_bad_options_by_name():
    layout = Layout(2, 4)
    assert optimizer_schedule("onebit-adam", layout, 1000) == compressed_allreduce(layout, 1000, "onebit-adam")
    assert optimizer_schedule("zero-one-adam", layout, 1000) == compressed_allreduce(layout, 1000, "zero-one-adam")
    assert optimizer_schedule("zero-one-adam", layout, 1000, full_precision=True) == allreduce(
        layout, 1000, name="zero-one-adam-full-precision")
    assert optimizer_schedule("marsit", layout, 1000, topology="torus", full_precision=True) == marsit_schedule(
        layout, 1000, "torus", True)
    assert optimizer_schedule("sgdm", layout, 1000, full_precision=True) == allreduce(layout, 1000)
    with pytest.raises(ValueError, match="onebit-adam takes the options full_precision, not topology"):
        optimizer_schedule("onebit-adam", layout, 1000, topology="torus")
    with pytest.raises(ValueError, match="marsit takes the options full_precision, topology, not bogus"):
        optimizer_schedule("marsit", layout, 1000, bogus=1)
    with pytest.raises(ValueError, match="birder takes no options, not full_precision"):
        optimizer_schedule("birder", layout, 1000, full_precision=True)
    with pytest.raises(ValueError, match="sgdm takes the options full_precision, not topology"):
        optimizer_schedule("sgdm", layout, 1000, topology="ring")
    with pytest.raises(ValueError, match="unknown topology 'tree'"):
        optimizer_schedule("marsit", layout, 1000, topology="tree")
    with pytest.raises(ValueError, match="unknown topology 'tree'"):
        marsit_bytes_per_gpu(layout, 1000, topology="tree")
    with pytest.raises(ValueError, match="dim"):
        optimizer_schedule("marsit", layout, 0)
    with pytest.raises(ValueError, match="layout"):
        optimizer_schedule("onebit-adam", (2, 4), 1000)
    with pytest.raises(ValueError, match="dim"):
        compressed_allreduce_bytes_per_gpu(layout, 0)


def test_one_bit_allreduce_is_sixteen_times_smaller_than_fp16_and_blog_ratio():
    """Blog: 16x less volume than an fp16 all-reduce in the compression stage; 1/(0.15 + 0.85/16) = 4.92 ("5x")."""
    layout, d = Layout(4, 8), 25_000_000
    onebit = sum(busiest(optimizer_schedule("onebit-adam", layout, d)).values())
    fp16 = sum(busiest(allreduce(layout, d, bits=16)).values())
    assert fp16 / onebit == pytest.approx(16, rel=1e-3)
    w = onebit_adam.DEFAULT_WARMUP_FRACTION
    assert 1 / (w + (1 - w) * onebit / fp16) == pytest.approx(4.92, abs=0.01)


@pytest.mark.parametrize("K, printed", [(1, 32), (50, 1.62), (100, 1.31), (200, 1.16), (None, 1)])
def test_marsit_amortized_bits_per_element_reproduce_figure_3b(K, printed):
    """Marsit Fig. 3b's Bits column, from the schedules themselves: one fp32 round every K, 1-bit otherwise."""
    layout, d = Layout(8, 1), 8 * 1000
    one = sum(busiest(optimizer_schedule("marsit", layout, d)).values())
    full = sum(busiest(optimizer_schedule("marsit", layout, d, full_precision=True)).values())
    rounds = 400  # the paper's K = inf: more than the 400 rounds of the run
    k = rounds if K is None else K
    bits = (full + (k - 1) * one) / k / one
    assert marsit_bits_per_element(K) == pytest.approx(bits if K else 1.0)
    if K is None:  # the literal round t = 0 in full precision gives 1 + 31/400; the paper prints 1
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
    assert log.bytes_per_gpu(p) == compressed_allreduce_bytes_per_gpu(layout, d)


@pytest.mark.parametrize("topology", ["ring", "torus"])
@pytest.mark.parametrize("layout", [Layout(2, 4), Layout(3, 2), Layout(1, 3)])
def test_marsit_moves_what_its_schedule_says(topology, layout):
    p, d = layout.n_ranks, 77
    rng = np.random.default_rng(2)
    values = rng.standard_normal((p, d)).astype(np.float32)
    u = rng.random((p, d), dtype=np.float32)
    log = ByteLog()
    marsit.sign_allreduce(values, layout, u, u, topology, log)
    closed = marsit_bytes_per_gpu(layout, d, topology=topology)
    assert log.bytes_per_gpu(p) == closed
    log = ByteLog()
    mean = marsit.full_precision_mean(values, layout, topology, log)
    assert log.bytes_per_gpu(p) == marsit_bytes_per_gpu(layout, d, topology=topology, full_precision=True)
    np.testing.assert_allclose(mean, values.mean(axis=0), rtol=1e-5, atol=1e-6)


def test_the_simulated_optimizers_are_the_contract_names():
    assert set(registry.SIMULATED) == {"sgdm", "adam", "birder", "onebit-adam", "zero-one-adam", "marsit"}


def test_no_module_but_the_registry_dispatches_on_optimizer_names():
    """baseline_schedules holds schedule families, not optimizers: the registry alone says who runs which."""
    assert not {"BASELINES", "schedule", "paper_bytes_per_gpu"} & set(vars(baseline_schedules))
