"""The driver: the BinSGDM paper's Figure 8 example, and Birder trained over every scheme and layout."""

import numpy as np
import pytest

from birder_ref.driver import PROBLEMS, Layout, figure8, logistic, train
from birder_ref.optimizers import SGDM, Adam, Birder, SoftSignSGD, ring_allreduce_mean


def tail_amplitude(history, start):
    return float(np.abs(np.array(history.params[start:], np.float64)).max())


def test_figure8_softsignsgd_settles_while_adam_keeps_oscillating():
    """f = x^2/2, lr 0.5, x0 = 1 (BinSGDM paper, Appendix C, Figure 8).

    Measured here: SoftSignSGD (beta 0.95) settles into a steady cycle with |x| < 0.013 after 300 steps (its
    update m/b damps to about (1 - beta) / (1 + beta) in size, not to 0, at a constant lr); Adam (0.9/0.99)
    first reaches 1e-10, then its v decays, the step blows up and |x| keeps returning above 0.03.
    Deterministic: no draws are involved.
    """
    soft = train(figure8(), SoftSignSGD(beta=0.95), Layout(1, 1), 2000, 0.5)
    adam = train(figure8(), Adam(beta1=0.9, beta2=0.99), Layout(1, 1), 2000, 0.5)
    assert tail_amplitude(soft, 300) < 0.013
    assert tail_amplitude(adam, 1000) > 0.03
    assert tail_amplitude(adam, 1000) > 2 * tail_amplitude(soft, 1000)
    # SoftSignSGD's steady state: the size of x no longer grows (no bursts like Adam's)
    windows = [tail_amplitude(type(soft)(soft.losses, soft.params[k:k + 100]), 0) for k in range(500, 2000, 100)]
    assert max(windows) - min(windows) < 1e-3


def test_softsignsgd_with_decaying_lr_goes_to_zero():
    soft = train(figure8(), SoftSignSGD(beta=0.95), Layout(1, 1), 3000, lambda t: 0.5 / np.sqrt(t))
    assert tail_amplitude(soft, 2500) < 2e-3


def test_synchronous_schemes_give_identical_training_runs():
    """ps, ring, flat and allgather all make every GPU a worker of Algorithm 1: same draws, same run."""
    runs = {s: train(logistic(), Birder(scheme=s, seed=3), Layout(2, 2), 30, 0.02) for s in
            ("ps", "ring", "flat", "allgather")}
    first = runs["ps"].params
    for scheme, history in runs.items():
        assert all(np.array_equal(a, b) for a, b in zip(history.params, first, strict=True)), scheme


@pytest.mark.parametrize("scheme", ["hierarchical", "ring"])
def test_birder_trains_logistic_regression(scheme):
    history = train(logistic(), Birder(scheme=scheme, seed=1), Layout(2, 4), 200, 0.01)
    assert history.losses[-1] < 0.5 * history.losses[0]


def test_full_precision_baselines_train_and_the_ring_mean_is_exact():
    grads = (np.arange(2 * 3 * 11).reshape(2, 3, 11) / 64).astype(np.float32)
    assert np.array_equal(ring_allreduce_mean(grads), grads.reshape(6, 11).sum(axis=0) / np.float32(6))
    for optimizer, lr in ((SGDM(), 0.1), (Adam(), 0.01)):
        history = train(logistic(), optimizer, Layout(1, 4), 200, lr)
        assert history.losses[-1] < 0.5 * history.losses[0], optimizer.name


def test_problems_and_bad_arguments():
    assert set(PROBLEMS) == {"figure8", "quadratic", "logistic"}
    with pytest.raises(ValueError, match="unknown scheme"):
        Birder(scheme="tree")
    with pytest.raises(ValueError, match="steps must be >= 0"):
        train(figure8(), SoftSignSGD(), Layout(1, 1), -1, 0.1)
