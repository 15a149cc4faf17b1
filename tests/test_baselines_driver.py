"""Every 1-bit baseline on the driver protocol: it trains the logistic problem on one GPU and on 2 x 4, and a
run is a pure function of its seed."""

import numpy as np
import pytest

from birder_ref import driver
from birder_ref.marsit import Marsit
from birder_ref.onebit_adam import OneBitAdam
from birder_ref.schedules import Layout
from birder_ref.zero_one_adam import Policy, ZeroOneAdam

BASELINES = [
    (OneBitAdam(warmup_steps=10), 0.05),
    (OneBitAdam(warmup_steps=10, scale="mean_abs"), 0.05),
    (ZeroOneAdam(Policy(var_freeze_step=10, local_step_scaler=10)), 0.05),
    (Marsit(K=20), 1.0),
    (Marsit(K=None, topology="torus"), 1.0),
]


@pytest.mark.parametrize("optimizer, lr", BASELINES, ids=lambda o: getattr(o, "name", ""))
@pytest.mark.parametrize("layout", [Layout(1, 1), Layout(2, 4)], ids=["1x1", "2x4"])
def test_trains_and_is_a_pure_function_of_the_seed(optimizer, lr, layout):
    problem = driver.logistic()
    first = driver.train(problem, optimizer, layout, 60, lr, seed=5)
    again = driver.train(problem, optimizer, layout, 60, lr, seed=5)
    assert first.losses == again.losses
    assert np.isfinite(first.losses).all() and first.losses[-1] < 0.6 * first.losses[0]
