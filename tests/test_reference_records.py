"""One hyper-parameter record and one line-16 update: the reference's entry points take the record's defaults,
and the reference optimizer's step is ``apply_update`` of the scheme's u_bar."""

import inspect

import numpy as np
import pytest

from birder_ref import algorithm1, draws, hierarchical, schemes
from birder_ref.hyperparameters import DEFAULTS, HyperParameters
from birder_ref.optimizers import Birder, SoftSignSGD
from birder_ref.schedules import Layout
from birder_ref.update import apply_update


@pytest.mark.parametrize("entry", [algorithm1.step, schemes.step, hierarchical.step, Birder, SoftSignSGD])
def test_entry_points_take_the_records_defaults(entry):
    parameters = inspect.signature(entry).parameters
    assert (parameters["beta"].default, parameters["eps"].default) == (DEFAULTS.beta, DEFAULTS.eps)


def test_the_record_checks_its_values():
    assert (DEFAULTS.beta, DEFAULTS.eps, DEFAULTS.T0) == (0.95, 1e-8, None)
    with pytest.raises(ValueError, match="beta"):
        HyperParameters(beta=1.0)
    with pytest.raises(ValueError, match="eps"):
        HyperParameters(eps=0.0)


def test_birder_step_is_apply_update_of_the_schemes_u_bar():
    layout, d, t, lr, wd = Layout(2, 2), 37, 3, 0.01, 0.1
    rng = np.random.default_rng(0)
    grads = rng.standard_normal((2, 2, d)).astype(np.float32)
    params = np.tile(rng.standard_normal(d).astype(np.float32), (4, 1))
    opt = Birder(scheme="flat", weight_decay=wd, seed=5)
    state = opt.init(layout, d)
    new_params, new_state = opt.step(state, params, grads, lr, t)
    U = draws.worker_uniforms(5, t, state.n_workers, d)
    V = draws.server_uniforms(5, t, d)
    u_bar, want_state, _ = schemes.step("flat", state, grads, DEFAULTS.beta, DEFAULTS.eps, U, V, None)
    assert np.array_equal(new_params, apply_update(params, u_bar, lr, wd))
    assert np.array_equal(new_state.m, want_state.m) and new_state.t == want_state.t == 1
