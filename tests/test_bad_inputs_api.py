"""Bad input on the Python API (birder_ref): one row per distinct bad input.

Each row builds a call afresh, keeps a deep copy of every argument (states included), makes the call and asserts:
a ValueError (not TypeError, AttributeError, AssertionError or a NumPy error) whose message names the
parameter, and every argument unchanged afterwards (a failed call changes no state). No row is marked xfail.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import warnings

import numpy as np
import pytest
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

from birder_ref import algorithm1, baseline_schedules, draws, driver, hierarchical, marsit, onebit_adam, schemes
from birder_ref.algorithm1 import State
from birder_ref.optimizers import SGDM, Adam, Birder, SoftSignSGD
from birder_ref.quantize import pack_signs, quantize, unpack_signs
from birder_ref.registry import optimizer_schedule
from birder_ref.schedules import Layout, allreduce, padded_dim, schedule
from birder_ref.zero_one_adam import Policy, ZeroOneAdam
from sim.api import predict_on
from sim.collective import parse_size, predict_collective
from sim.hardware import cluster as sim_cluster
from sim.hardware import make_nic

N, D = 2, 16


def good_state(t: int = 3) -> State:
    """A state some steps in: finite m, e, server_e; b_hat = b >= 0 (distinct arrays)."""
    rng = np.random.default_rng(1)
    m = rng.standard_normal((N, D), dtype=np.float32) * 0.1
    b_hat = np.abs(rng.standard_normal((N, D), dtype=np.float32))
    e = rng.uniform(-1, 1, (N, D)).astype(np.float32)
    return State(m, b_hat, b_hat.copy(), e, rng.uniform(-1, 1, D).astype(np.float32), t)


def with_field(name: str, value, state: State | None = None) -> State:
    return dataclasses.replace(state or good_state(), **{name: value})


def poke(name: str, index, value) -> State:
    """A good state with one element of one array set to ``value``."""
    state = good_state()
    array = getattr(state, name).copy()
    array[index] = value
    return with_field(name, array, state)


def grads(n: int = N, d: int = D) -> np.ndarray:
    return np.random.default_rng(2).standard_normal((n, d), dtype=np.float32)


def U(n: int = N, d: int = D) -> np.ndarray:
    return np.random.default_rng(3).random((n, d), dtype=np.float32)


def V(d: int = D) -> np.ndarray:
    return np.random.default_rng(4).random(d, dtype=np.float32)


GOOD = object()  # "the good value" in the call builders below


def step_call(state=GOOD, g=GOOD, beta=0.95, eps=1e-8, u_worker=GOOD, u_server=GOOD, T0=None):
    """algorithm1.step with good arguments except those given."""
    kwargs = dict(state=good_state() if state is GOOD else state, grads=grads() if g is GOOD else g, beta=beta,
                  eps=eps, u_worker=U() if u_worker is GOOD else u_worker,
                  u_server=V() if u_server is GOOD else u_server, T0=T0)
    return algorithm1.step, (), kwargs


def hier_call(state=GOOD, g=GOOD, u_worker=GOOD, u_server=GOOD):
    kwargs = dict(state=hierarchical.init(2, 2, D) if state is GOOD else state,
                  grads=np.zeros((2, 2, D), np.float32) if g is GOOD else g,
                  u_worker=U(2) if u_worker is GOOD else u_worker, u_server=V() if u_server is GOOD else u_server)
    return hierarchical.step, (), kwargs


def train_call(lr=0.1, optimizer=None, layout=None, steps=3, problem=None, seed=0):
    return driver.train, (), dict(problem=problem or driver.quadratic(8), optimizer=optimizer or SGDM(),
                                  layout=layout or Layout(1, 2), steps=steps, lr=lr, seed=seed)


def opt_step_call(optimizer, lr=0.1, t=1, state="init", params=None, g=None):
    layout, d = Layout(1, 2), 8
    st = optimizer.init(layout, d) if state == "init" else state
    params = np.zeros((2, d), np.float32) if params is None else params
    g = np.ones((1, 2, d), np.float32) if g is None else g
    return optimizer.step, (st, params, g, lr, t), {}


def oba_call(N_=2, d=16, buffers=None, worker_error=None, server_error=None, scale="l2"):
    buffers = np.ones((N_, d), np.float32) if buffers is None else buffers
    worker_error = np.zeros((N_, d), np.float32) if worker_error is None else worker_error
    server_error = np.zeros((N_, d // N_), np.float32) if server_error is None else server_error
    return onebit_adam.compressed_allreduce, (buffers, worker_error, server_error), {"scale": scale}


def sign_call(values=None, layout=None, u_ring=None, u_column=None, topology="ring"):
    layout = Layout(1, 2) if layout is None else layout
    values = np.ones((2, 8), np.float32) if values is None else values
    u_ring = U(2, 8) if u_ring is None else u_ring
    return marsit.sign_allreduce, (values, layout, u_ring, u_column, topology), {}


def call(fn, *args, **kwargs):
    return fn, args, kwargs


def api(id_: str, make, *names: str, marks=()):
    """One bad input: ``make()`` returns (function, args, kwargs); the ValueError must name every one of ``names``."""
    return pytest.param(make, names, id=id_, marks=marks)


NAN, INF = float("nan"), float("inf")

ROWS = [
    # what is still refused beside the byte orders and 0-d coefficients now accepted (test below)
    api("step-grads-big-endian-float64", lambda: step_call(g=grads().astype(">f8")), "grads", "float32"),
    api("step-beta-0d-bool", lambda: step_call(beta=np.array(True)), "beta"),
    api("step-beta-1d-array", lambda: step_call(beta=np.array([0.95])), "beta"),
    api("step-eps-0d-string", lambda: step_call(eps=np.array("1e-8")), "eps"),
    api("step-T0-0d-float", lambda: step_call(T0=np.array(2.0)), "T0"),
    api("step-u-server-0d", lambda: step_call(u_server=np.array(0.5, np.float32)), "u_server"),
    api("opt-step-lr-0d-nan", lambda: opt_step_call(SGDM(), lr=np.array(np.nan)), "lr"),
    api("quantize-y-big-endian-float16", lambda: call(quantize, np.ones(4, ">f2"), np.zeros(4, np.float32)), "y"),
    # algorithm1.step: the state
    api("step-state-none", lambda: step_call(state=None), "state"),
    api("step-state-dict", lambda: step_call(state={"m": np.zeros((N, D), np.float32)}), "state"),
    api("step-state-tuple", lambda: step_call(state=tuple(dataclasses.astuple(good_state()))), "state"),
    api("step-state-m-nan", lambda: step_call(poke("m", (0, 3), NAN)), "state.m"),
    api("step-state-m-inf", lambda: step_call(poke("m", (1, 0), INF)), "state.m"),
    api("step-state-m-minus-inf", lambda: step_call(poke("m", (1, 15), -INF)), "state.m"),
    api("step-state-b-hat-nan", lambda: step_call(poke("b_hat", (0, 0), NAN)), "state.b_hat"),
    api("step-state-b-hat-negative", lambda: step_call(poke("b_hat", (1, 2), -0.5)), "state.b_hat"),
    api("step-state-b-hat-inf", lambda: step_call(poke("b_hat", (0, 5), INF)), "state.b_hat"),
    api("step-state-b-negative", lambda: step_call(poke("b", (0, 1), -1e-3)), "state.b"),
    api("step-state-b-nan", lambda: step_call(poke("b", (1, 1), NAN)), "state.b"),
    api("step-state-b-inf", lambda: step_call(poke("b", (1, 7), INF)), "state.b"),
    api("step-state-e-nan", lambda: step_call(poke("e", (0, 9), NAN)), "state.e"),
    api("step-state-e-inf", lambda: step_call(poke("e", (1, 9), INF)), "state.e"),
    api("step-state-server-e-nan", lambda: step_call(poke("server_e", 4, NAN)), "state.server_e"),
    api("step-state-server-e-inf", lambda: step_call(poke("server_e", 0, -INF)), "state.server_e"),
    api("step-state-t-negative", lambda: step_call(with_field("t", -3)), "state.t"),
    api("step-state-t-fraction", lambda: step_call(with_field("t", 2.5)), "state.t"),
    api("step-state-t-bool", lambda: step_call(with_field("t", True)), "state.t"),
    api("step-state-t-string", lambda: step_call(with_field("t", "3")), "state.t"),
    api("step-state-t-none", lambda: step_call(with_field("t", None)), "state.t"),
    api("step-state-m-float64", lambda: step_call(with_field("m", good_state().m.astype(np.float64))), "state.m"),
    api("step-state-b-hat-float16", lambda: step_call(with_field("b_hat", good_state().b_hat.astype(np.float16))),
        "state.b_hat"),
    api("step-state-b-hat-shape", lambda: step_call(with_field("b_hat", np.ones((N + 1, D), np.float32))),
        "state.b_hat"),
    api("step-state-e-shape", lambda: step_call(with_field("e", np.zeros((N, D - 1), np.float32))), "state.e"),
    api("step-state-server-e-shape", lambda: step_call(with_field("server_e", np.zeros(D + 1, np.float32))),
        "state.server_e"),
    api("step-state-server-e-2d", lambda: step_call(with_field("server_e", np.zeros((1, D), np.float32))),
        "state.server_e"),
    api("step-state-m-overflows", lambda: step_call(with_field("m", np.full((N, D), np.float32(1e38)))), "state"),
    api("hier-step-state-m-overflows", lambda: hier_call(state=with_field("m", np.full((2, D), np.float32(1e38)),
                                                                          hierarchical.init(2, 2, D))), "state"),
    api("step-state-m-1d", lambda: step_call(with_field("m", np.zeros(D, np.float32))), "state.m"),
    api("step-state-m-empty", lambda: step_call(with_field("m", np.zeros((0, D), np.float32))), "state.m"),
    api("step-state-e-list", lambda: step_call(with_field("e", [[0.0] * D] * N)), "state.e"),
    api("step-state-b-int", lambda: step_call(with_field("b", np.ones((N, D), np.int32))), "state.b"),
    # algorithm1.step: coefficients
    api("step-beta-string", lambda: step_call(beta="0.9"), "beta"),
    api("step-beta-bool", lambda: step_call(beta=True), "beta"),
    api("step-beta-zero", lambda: step_call(beta=0.0), "beta"),
    api("step-beta-one", lambda: step_call(beta=1.0), "beta"),
    api("step-beta-negative", lambda: step_call(beta=-0.5), "beta"),
    api("step-beta-nan", lambda: step_call(beta=NAN), "beta"),
    api("step-beta-inf", lambda: step_call(beta=INF), "beta"),
    api("step-beta-none", lambda: step_call(beta=None), "beta"),
    api("step-beta-complex", lambda: step_call(beta=0.9 + 0j), "beta"),
    api("step-beta-array", lambda: step_call(beta=np.array([0.9, 0.9])), "beta"),
    api("step-eps-zero", lambda: step_call(eps=0.0), "eps"),
    api("step-eps-negative", lambda: step_call(eps=-1e-8), "eps"),
    api("step-eps-nan", lambda: step_call(eps=NAN), "eps"),
    api("step-eps-inf", lambda: step_call(eps=INF), "eps"),
    api("step-eps-zero-in-float32", lambda: step_call(eps=1e-50), "eps"),
    api("step-eps-inf-in-float32", lambda: step_call(eps=1e39), "eps"),
    api("step-eps-string", lambda: step_call(eps="1e-8"), "eps"),
    api("step-T0-negative", lambda: step_call(T0=-1), "T0"),
    api("step-T0-fraction", lambda: step_call(T0=1.5), "T0"),
    api("step-T0-string", lambda: step_call(T0="3"), "T0"),
    api("step-T0-bool", lambda: step_call(T0=True), "T0"),
    # algorithm1.step: gradients and draws
    api("step-grads-none", lambda: step_call(g=None), "grads"),
    api("step-grads-float64", lambda: step_call(g=grads().astype(np.float64)), "grads"),
    api("step-grads-shape", lambda: step_call(g=grads(N + 1)), "grads"),
    api("step-grads-transposed", lambda: step_call(g=np.ascontiguousarray(grads(D, N))), "grads"),
    api("step-grads-nan", lambda: step_call(g=np.where(np.arange(D) == 3, np.float32(NAN), grads())), "grads"),
    api("step-grads-inf", lambda: step_call(g=np.full((N, D), np.float32(INF))), "grads"),
    api("step-grads-list", lambda: step_call(g=grads().tolist()), "grads"),
    api("step-u-worker-none", lambda: step_call(u_worker=None), "u_worker"),
    api("step-u-worker-one", lambda: step_call(u_worker=np.ones((N, D), np.float32)), "u_worker"),
    api("step-u-worker-negative", lambda: step_call(u_worker=-U()), "u_worker"),
    api("step-u-worker-nan", lambda: step_call(u_worker=np.full((N, D), np.float32(NAN))), "u_worker"),
    api("step-u-worker-shape", lambda: step_call(u_worker=U(N, D + 8)), "u_worker"),
    api("step-u-server-shape", lambda: step_call(u_server=V(D - 1)), "u_server"),
    api("step-u-server-float64", lambda: step_call(u_server=V().astype(np.float64)), "u_server"),
    api("step-u-server-none", lambda: step_call(u_server=None), "u_server"),
    # algorithm1.init
    api("init-workers-fraction", lambda: call(algorithm1.init, 2.5, 10), "n_workers"),
    api("init-dim-fraction", lambda: call(algorithm1.init, 2, 2.5), "dim"),
    api("init-workers-zero", lambda: call(algorithm1.init, 0, 4), "n_workers"),
    api("init-workers-negative", lambda: call(algorithm1.init, -1, 4), "n_workers"),
    api("init-dim-zero", lambda: call(algorithm1.init, 2, 0), "dim"),
    api("init-dim-negative", lambda: call(algorithm1.init, 2, -4), "dim"),
    api("init-workers-bool", lambda: call(algorithm1.init, True, 4), "n_workers"),
    api("init-workers-string", lambda: call(algorithm1.init, "2", 4), "n_workers"),
    api("init-workers-none", lambda: call(algorithm1.init, None, 4), "n_workers"),
    api("init-dim-nan", lambda: call(algorithm1.init, 2, NAN), "dim"),
    api("init-beyond-memory", lambda: call(algorithm1.init, 4, 10**13), "dim"),
    # hierarchical and schemes
    api("hier-init-gpus-zero", lambda: call(hierarchical.init, 2, 0, 4), "gpus_per_node"),
    api("hier-init-gpus-fraction", lambda: call(hierarchical.init, 2, 1.5, 4), "gpus_per_node"),
    api("hier-init-nodes-zero", lambda: call(hierarchical.init, 0, 2, 4), "n_workers"),
    api("hier-step-state-none", lambda: hier_call(state=None), "state"),
    api("hier-step-grads-2d", lambda: hier_call(g=np.zeros((2, D), np.float32)), "grads"),
    api("hier-step-grads-nodes-mismatch", lambda: hier_call(g=np.zeros((3, 2, D), np.float32)), "grads", "workers"),
    api("hier-step-grads-nan", lambda: hier_call(g=np.full((2, 2, D), np.float32(NAN))), "grads"),
    api("hier-step-state-b-negative", lambda: hier_call(state=with_field("b", -np.ones((2, D), np.float32),
                                                                         hierarchical.init(2, 2, D))), "state.b"),
    api("hier-step-u-worker-shape", lambda: hier_call(u_worker=U(4)), "u_worker"),
    api("schemes-unknown", lambda: call(schemes.step, "tree", algorithm1.init(4, D), np.zeros((2, 2, D), np.float32),
                                        0.95, 1e-8, U(4), V()), "tree"),
    api("schemes-none", lambda: call(schemes.step, None, algorithm1.init(4, D), np.zeros((2, 2, D), np.float32),
                                     0.95, 1e-8, U(4), V()), "scheme"),
    api("schemes-workers-mismatch", lambda: call(schemes.step, "ring", algorithm1.init(2, D),
                                                 np.zeros((2, 2, D), np.float32), 0.95, 1e-8, U(2), V()), "workers"),
    api("schemes-grads-empty", lambda: call(schemes.step, "flat", algorithm1.init(2, D),
                                            np.zeros((0, 2, D), np.float32), 0.95, 1e-8, U(2), V()), "grads"),
    # quantize and packing
    api("quantize-y-float64", lambda: call(quantize, np.zeros(8), U(1, 8)[0]), "y"),
    api("quantize-u-shape", lambda: call(quantize, np.zeros(8, np.float32), U(1, 9)[0]), "u"),
    api("quantize-y-nan", lambda: call(quantize, np.full(8, np.float32(NAN)), U(1, 8)[0]), "y"),
    api("quantize-u-one", lambda: call(quantize, np.zeros(8, np.float32), np.ones(8, np.float32)), "u"),
    api("quantize-y-list", lambda: call(quantize, [0.0] * 8, U(1, 8)[0]), "y"),
    api("pack-2d", lambda: call(pack_signs, np.ones((2, 8), np.float32)), "1-D"),
    api("pack-zero", lambda: call(pack_signs, np.zeros(8, np.float32)), "element 0"),
    api("pack-nan", lambda: call(pack_signs, np.array([1, NAN, -1], np.float32)), "element 1"),
    api("unpack-d-negative", lambda: call(unpack_signs, np.zeros(1, np.uint8), -1), "d"),
    api("unpack-d-fraction", lambda: call(unpack_signs, np.zeros(1, np.uint8), 1.5), "d"),
    api("unpack-d-string", lambda: call(unpack_signs, np.zeros(1, np.uint8), "8"), "d"),
    api("unpack-int32", lambda: call(unpack_signs, np.zeros(1, np.int32), 8), "uint8"),
    api("unpack-size", lambda: call(unpack_signs, np.zeros(2, np.uint8), 17), "d=17"),
    # schedules
    api("layout-nodes-zero", lambda: call(Layout, 0, 8), "n_nodes"),
    api("layout-nodes-fraction", lambda: call(Layout, 2.5, 8), "n_nodes"),
    api("layout-gpus-negative", lambda: call(Layout, 2, -1), "gpus_per_node"),
    api("layout-nodes-string", lambda: call(Layout, "2", 8), "n_nodes"),
    api("layout-nodes-bool", lambda: call(Layout, True, 8), "n_nodes"),
    api("layout-gpus-nan", lambda: call(Layout, 2, NAN), "gpus_per_node"),
    api("schedule-unknown", lambda: call(schedule, "tree", Layout(2, 2), 8), "tree"),
    api("schedule-layout-none", lambda: call(schedule, "ring", None, 8), "layout"),
    api("schedule-layout-tuple", lambda: call(schedule, "ring", (2, 2), 8), "layout"),
    api("schedule-dim-zero", lambda: call(schedule, "ring", Layout(2, 2), 0), "dim"),
    api("schedule-dim-fraction", lambda: call(schedule, "ring", Layout(2, 2), 2.5), "dim"),
    api("allreduce-dim-negative", lambda: call(allreduce, Layout(2, 2), -1), "dim"),
    api("optimizer-schedule-unknown", lambda: call(optimizer_schedule, "lion", Layout(2, 2), 8), "lion"),
    api("padded-dim-ranks-zero", lambda: call(padded_dim, 8, 0), "n_ranks"),
    # optimizers
    api("birder-scheme-unknown", lambda: call(Birder, scheme="tree"), "tree"),
    api("birder-beta-string", lambda: call(Birder, beta="0.9"), "beta"),
    api("birder-eps-zero", lambda: call(Birder, eps=0.0), "eps"),
    api("birder-seed-negative", lambda: call(Birder, seed=-1), "seed"),
    api("birder-seed-fraction", lambda: call(Birder, seed=1.5), "seed"),
    api("birder-seed-huge", lambda: call(Birder, seed=2**40), "seed"),
    api("birder-weight-decay-nan", lambda: call(Birder, weight_decay=NAN), "weight_decay"),
    api("birder-weight-decay-negative", lambda: call(Birder, weight_decay=-0.1), "weight_decay"),
    api("birder-T0-negative", lambda: call(Birder, T0=-1), "T0"),
    api("sgdm-momentum-above-one", lambda: call(SGDM, momentum=1.5), "momentum"),
    api("sgdm-momentum-nan", lambda: call(SGDM, momentum=NAN), "momentum"),
    api("adam-beta1-one", lambda: call(Adam, beta1=1.0), "beta1"),
    api("adam-beta2-negative", lambda: call(Adam, beta2=-0.1), "beta2"),
    api("adam-eps-zero", lambda: call(Adam, eps=0.0), "eps"),
    api("softsign-beta-two", lambda: call(SoftSignSGD, beta=2.0), "beta"),
    api("sgdm-step-lr-nan", lambda: opt_step_call(SGDM(), lr=NAN), "lr"),
    api("sgdm-step-state-wrong", lambda: opt_step_call(SGDM(), state=Adam().init(Layout(1, 2), 8)), "state"),
    api("sgdm-step-params-shape", lambda: opt_step_call(SGDM(), params=np.zeros((3, 8), np.float32)), "params"),
    api("adam-step-t-zero", lambda: opt_step_call(Adam(), t=0), "t"),
    api("adam-step-grads-nan", lambda: opt_step_call(Adam(), g=np.full((1, 2, 8), np.float32(NAN))), "grads"),
    api("birder-step-lr-negative", lambda: opt_step_call(Birder(), lr=-0.1), "lr"),
    api("birder-step-t-fraction", lambda: opt_step_call(Birder(), t=1.5), "t"),
    api("birder-step-state-none", lambda: opt_step_call(Birder(), state=None), "state"),
    api("softsign-step-lr-inf", lambda: opt_step_call(SoftSignSGD(), lr=INF), "lr"),
    # driver
    api("train-lr-nan", lambda: train_call(lr=NAN), "lr"),
    api("train-lr-inf", lambda: train_call(lr=INF), "lr"),
    api("train-lr-negative", lambda: train_call(lr=-1.0), "lr"),
    api("train-lr-inf-in-float32", lambda: train_call(lr=1e39), "lr"),
    api("train-lr-string", lambda: train_call(lr="0.1"), "lr"),
    api("train-lr-none", lambda: train_call(lr=None), "lr"),
    api("train-lr-schedule-nan", lambda: train_call(lr=lambda t: NAN if t == 2 else 0.1), "lr(2)"),
    api("train-lr-huge-sgdm", lambda: train_call(lr=1e30, steps=6), "lr"),
    api("train-lr-huge-adam", lambda: train_call(lr=1e30, optimizer=Adam(), steps=6), "lr"),
    api("train-lr-huge-marsit", lambda: train_call(lr=1e30, optimizer=marsit.Marsit(K=2), steps=6), "lr"),
    api("train-lr-nan-birder", lambda: train_call(lr=NAN, optimizer=Birder()), "lr"),
    api("train-steps-fraction", lambda: train_call(steps=2.5), "steps"),
    api("train-steps-negative", lambda: train_call(steps=-1), "steps"),
    api("train-steps-string", lambda: train_call(steps="10"), "steps"),
    api("train-seed-negative", lambda: train_call(seed=-1), "seed"),
    api("train-layout-none", lambda: (driver.train, (driver.figure8(), SGDM(), None, 2, 0.1), {}), "layout"),
    api("train-layout-tuple", lambda: (driver.train, (driver.figure8(), SGDM(), (1, 2), 2, 0.1), {}), "layout"),
    api("train-problem-none", lambda: (driver.train, (None, SGDM(), Layout(1, 1), 2, 0.1), {}), "problem"),
    api("train-problem-name", lambda: (driver.train, ("quadratic", SGDM(), Layout(1, 1), 2, 0.1), {}), "problem"),
    api("train-optimizer-class", lambda: (driver.train, (driver.figure8(), SGDM, Layout(1, 1), 2, 0.1), {}),
        "optimizer"),
    api("problem-unknown", lambda: call(driver.problem, "rosenbrock"), "rosenbrock"),
    api("problem-bad-option", lambda: call(driver.problem, "quadratic", dims=3), "dims"),
    api("quadratic-dim-zero", lambda: call(driver.quadratic, 0), "dim"),
    api("quadratic-condition-nan", lambda: call(driver.quadratic, 8, NAN), "condition"),
    api("quadratic-noise-negative", lambda: call(driver.quadratic, 8, 10.0, -1.0), "noise"),
    api("logistic-batch-zero", lambda: call(driver.logistic, batch=0), "batch"),
    # 1-bit Adam
    api("oba-d-not-multiple", lambda: oba_call(2, 12), "8 * N"),
    api("oba-buffers-1d", lambda: (onebit_adam.compressed_allreduce,
                                   (np.ones(16, np.float32), np.zeros(16, np.float32), np.zeros(8, np.float32)), {}),
        "buffers"),
    api("oba-worker-error-shape", lambda: oba_call(worker_error=np.zeros((2, 8), np.float32)), "worker_error"),
    api("oba-server-error-shape", lambda: oba_call(server_error=np.zeros((2, 16), np.float32)), "server_error"),
    api("oba-buffers-nan", lambda: oba_call(buffers=np.full((2, 16), np.float32(NAN))), "buffers"),
    api("oba-buffers-float64", lambda: oba_call(buffers=np.ones((2, 16))), "buffers"),
    api("oba-scale-unknown", lambda: oba_call(scale="l1"), "l1"),
    api("oba-buffers-empty", lambda: oba_call(buffers=np.ones((0, 16), np.float32)), "buffers"),
    api("oba-log-wrong", lambda: (onebit_adam.compressed_allreduce, oba_call()[1], {"log": "bytes"}), "log"),
    api("compress-scale-unknown", lambda: call(onebit_adam.compress, np.ones(8, np.float32), "l3"), "l3"),
    api("compress-2d", lambda: call(onebit_adam.compress, np.ones((2, 8), np.float32)), "x"),
    api("compress-nan", lambda: call(onebit_adam.compress, np.full(8, np.float32(NAN))), "x"),
    api("warmup-total-negative", lambda: call(onebit_adam.warmup_steps_for, -1), "total_steps"),
    api("warmup-fraction-above-one", lambda: call(onebit_adam.warmup_steps_for, 10, 1.5), "fraction"),
    api("warmup-fraction-nan", lambda: call(onebit_adam.warmup_steps_for, 10, NAN), "fraction"),
    api("warmup-total-fraction", lambda: call(onebit_adam.warmup_steps_for, 2.5), "total_steps"),
    api("onebit-warmup-zero", lambda: call(onebit_adam.OneBitAdam, 0), "warmup_steps"),
    api("onebit-warmup-fraction", lambda: call(onebit_adam.OneBitAdam, 2.5), "warmup_steps"),
    api("onebit-scale-unknown", lambda: call(onebit_adam.OneBitAdam, 10, scale="x"), "scale"),
    api("onebit-beta1-one", lambda: call(onebit_adam.OneBitAdam, 10, beta1=1.0), "beta1"),
    api("onebit-step-lr-nan", lambda: opt_step_call(onebit_adam.OneBitAdam(1), lr=NAN), "lr"),
    api("onebit-step-state-wrong", lambda: opt_step_call(onebit_adam.OneBitAdam(1), state=SGDM().init(Layout(1, 2),
                                                                                                   8)), "state"),
    # 0/1 Adam
    api("policy-freeze-zero", lambda: call(Policy, 0, 1), "var_freeze_step"),
    api("policy-freeze-fraction", lambda: call(Policy, 1.5, 2), "var_freeze_step"),
    api("policy-scaler-string", lambda: call(Policy, 10, "a"), "local_step_scaler"),
    api("policy-kinds-negative", lambda: call(Policy(2, 2).kinds, -1), "total_steps"),
    api("policy-scaled-fraction", lambda: call(Policy.scaled, 9.5), "total_steps"),
    api("zoadam-policy-none", lambda: call(ZeroOneAdam, None), "policy"),
    api("zoadam-scale-unknown", lambda: call(ZeroOneAdam, Policy(2, 2), scale="x"), "scale"),
    api("zoadam-eps-zero", lambda: call(ZeroOneAdam, Policy(2, 2), eps=0.0), "eps"),
    api("zoadam-beta2-nan", lambda: call(ZeroOneAdam, Policy(2, 2), beta2=NAN), "beta2"),
    api("zoadam-step-lr-inf", lambda: opt_step_call(ZeroOneAdam(Policy(2, 2)), lr=INF), "lr"),
    api("zoadam-step-t-zero", lambda: opt_step_call(ZeroOneAdam(Policy(2, 2)), t=0), "t"),
    # Marsit
    api("marsit-K-zero", lambda: call(marsit.Marsit, K=0), "K"),
    api("marsit-K-fraction", lambda: call(marsit.Marsit, K=1.5), "K"),
    api("marsit-topology-unknown", lambda: call(marsit.Marsit, topology="mesh"), "mesh"),
    api("marsit-sign-scale-inf", lambda: call(marsit.Marsit, sign_scale=INF), "sign_scale"),
    api("marsit-sign-scale-zero", lambda: call(marsit.Marsit, sign_scale=0.0), "sign_scale"),
    api("marsit-seed-negative", lambda: call(marsit.Marsit, seed=-1), "seed"),
    api("marsit-step-lr-nan", lambda: opt_step_call(marsit.Marsit(K=2), lr=NAN), "lr"),
    api("marsit-step-state-wrong", lambda: opt_step_call(marsit.Marsit(K=2), state=SGDM().init(Layout(1, 2), 8)),
        "state"),
    api("transient-position-zero", lambda: call(marsit.transient_probability, 0, 1), "position"),
    api("transient-position-fraction", lambda: call(marsit.transient_probability, 1.5, 1), "position"),
    api("transient-bit-two", lambda: call(marsit.transient_probability, 2, 2), "local_bit"),
    api("sign-allreduce-layout-none", lambda: (marsit.sign_allreduce, (np.ones((2, 8), np.float32), None, U(2, 8)),
                                                {}), "layout"),
    api("sign-allreduce-values-shape", lambda: sign_call(values=np.ones((3, 8), np.float32)), "values"),
    api("sign-allreduce-topology", lambda: sign_call(topology="mesh"), "mesh"),
    api("sign-allreduce-u-ring-nan", lambda: sign_call(u_ring=np.full((2, 8), np.float32(NAN))), "u_ring"),
    api("sign-allreduce-torus-no-column", lambda: sign_call(topology="torus"), "u_column"),
    api("fp-mean-values-nan", lambda: call(marsit.full_precision_mean, np.full((2, 8), np.float32(NAN)),
                                           Layout(1, 2)), "values"),
    api("fp-mean-layout-tuple", lambda: call(marsit.full_precision_mean, np.ones((2, 8), np.float32), (1, 2)),
        "layout"),
    # baseline schedules
    api("baseline-schedule-layout-tuple", lambda: call(optimizer_schedule, "marsit", (2, 2), 8), "layout"),
    api("baseline-schedule-topology", lambda: call(optimizer_schedule, "marsit", Layout(2, 2), 8,
                                                   topology="mesh"), "mesh"),
    api("baseline-schedule-option", lambda: call(optimizer_schedule, "onebit-adam", Layout(2, 2), 8,
                                                 bogus=1), "bogus"),
    api("baseline-schedule-dim-fraction", lambda: call(optimizer_schedule, "onebit-adam", Layout(2, 2), 8.5),
        "dim"),
    api("baseline-schedule-birder-option", lambda: call(optimizer_schedule, "birder", Layout(2, 2), 8,
                                                        full_precision=True), "full_precision"),
    api("baseline-closed-form-topology", lambda: call(baseline_schedules.marsit_bytes_per_gpu, Layout(2, 2), 8,
                                                      topology="mesh"), "mesh"),
    api("baseline-closed-form-bits-zero", lambda: call(baseline_schedules.allreduce_bytes_per_gpu, Layout(2, 2), 8,
                                                       bits=0), "bits"),
    api("marsit-bits-K-zero", lambda: call(baseline_schedules.marsit_bits_per_element, 0), "K"),
    # draws (validated by the torch helper's replacement of birder_ref/draws.py)
    api("draws-seed-fraction", lambda: call(draws.server_uniforms, 1.5, 1, 4), "seed"),
    api("draws-n-fraction", lambda: call(draws.uniforms, 0, 1, 0, 2.5), "n"),
    # the simulator as a library (sim.api, sim.hardware, sim.collective): the bounds of what it answers in seconds
    api("sim-cluster-too-many-gpus", lambda: call(sim_cluster, "10gbe", 8193), "65,536"),
    api("sim-cluster-oversubscription-inf", lambda: call(sim_cluster, "10gbe", 2, oversubscription=INF),
        "oversubscription"),
    api("sim-cluster-oversubscription-huge", lambda: call(sim_cluster, "10gbe", 2, oversubscription=1e243),
        "oversubscription"),
    api("sim-predict-params-huge", lambda: call(predict_on, sim_cluster("10gbe", 1), params=10**13), "params"),
    api("sim-predict-accumulation-beyond-float",
        lambda: call(predict_on, sim_cluster("10gbe", 1), accumulation_steps=10**400), "accumulation_steps"),
    api("sim-predict-marsit-period-beyond-float",
        lambda: call(predict_on, sim_cluster("10gbe", 1), optimizer="marsit", marsit_period=10**400),
        "marsit_period"),
    api("sim-predict-batch-huge", lambda: call(predict_on, sim_cluster("10gbe", 1), batch_per_gpu=10**8),
        "batch_per_gpu"),
    api("sim-predict-throughput-tiny", lambda: call(predict_on, sim_cluster("10gbe", 2), single_node_throughput=1e-300),
        "single_node_throughput"),
    api("sim-collective-bytes-huge", lambda: call(predict_collective, "all-reduce", 2**41, sim_cluster("10gbe", 1)),
        "bytes"),
    api("sim-collective-bytes-float", lambda: call(predict_collective, "all-reduce", 8.0, sim_cluster("10gbe", 1)),
        "bytes"),
    api("sim-parse-size-huge", lambda: call(parse_size, "2000G"), "bytes"),
    api("sim-nic-rate-in-bits", lambda: call(make_nic, "x", {"line_rate_gbps": 1e11}), "line_rate_gbps"),
    api("sim-nic-latency-in-seconds", lambda: call(make_nic, "x", {"line_rate_gbps": 10, "latency_us": 4e-5}),
        "latency_us"),
    # issue 19: array subclasses whose meaning differs from a plain array, and values outside physical ranges
    api("step-grads-matrix", lambda: step_call(g=grads().view(np.matrix)), "grads", "np.matrix"),
    api("step-grads-masked", lambda: step_call(g=np.ma.masked_array(grads(), mask=np.eye(N, D, dtype=bool))),
        "grads", "masked"),
    api("step-grads-masked-nothing-masked", lambda: step_call(g=np.ma.masked_array(grads())), "grads", "masked"),
    api("step-u-worker-matrix", lambda: step_call(u_worker=U().view(np.matrix)), "u_worker", "np.matrix"),
    api("step-u-server-masked", lambda: step_call(u_server=np.ma.masked_array(V())), "u_server", "masked"),
    api("step-state-e-matrix", lambda: step_call(with_field("e", good_state().e.view(np.matrix))), "e", "np.matrix"),
    api("hier-step-grads-masked", lambda: hier_call(g=np.ma.masked_array(np.zeros((2, 2, D), np.float32))),
        "grads", "masked"),
    api("quantize-y-matrix", lambda: call(quantize, grads().view(np.matrix), U()), "np.matrix"),
    api("sim-nic-latency-1e308", lambda: call(make_nic, "x", {"line_rate_gbps": 10, "latency_us": 1e308}),
        "latency_us"),
    api("sim-nic-peer-overhead-an-hour", lambda: call(make_nic, "x", {"line_rate_gbps": 10,
                                                                      "peer_overhead_us": 3.6e9}),
        "peer_overhead_us"),
    api("sim-nic-retransmission-timeout-a-day", lambda: call(make_nic, "x", {"line_rate_gbps": 10,
                                                                             "retransmission_timeout_s": 86400}),
        "retransmission_timeout_s"),
    # issue 18: a measured link rate is set-up data, at most the line rate
    api("sim-nic-measured-above-line-rate", lambda: call(make_nic, "x", {
        "transport": "ib", "line_rate_gbps": 10, "efficiency": 0.96, "latency_us": 0, "measured_gbps": 11}),
        "measured_gbps", "line rate"),
    api("sim-nic-without-efficiency", lambda: call(make_nic, "x", {"transport": "ib", "line_rate_gbps": 10}),
        "efficiency"),
    api("sim-nic-measured-zero", lambda: call(make_nic, "x", {"line_rate_gbps": 10, "measured_gbps": 0}),
        "measured_gbps"),
    api("sim-nic-measured-nan", lambda: call(make_nic, "x", {"line_rate_gbps": 10, "measured_gbps": NAN}),
        "measured_gbps"),
]


def same(a, b) -> bool:
    """Deep equality: arrays by dtype, shape and values (NaN equal to NaN), dataclasses field by field."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return (isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.dtype == b.dtype
                and a.shape == b.shape and np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"))
    if dataclasses.is_dataclass(a) and not isinstance(a, type):
        return type(a) is type(b) and all(same(getattr(a, f.name), getattr(b, f.name))
                                          for f in dataclasses.fields(a))
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if callable(a):
        return a is b
    return bool(a == b)


@pytest.mark.parametrize("make, names", ROWS)
def test_bad_input_api(make, names):
    fn, args, kwargs = make()
    before = copy.deepcopy((args, kwargs))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a RuntimeWarning (overflow, invalid value) on the way is a defect too
        with pytest.raises(ValueError) as raised:
            fn(*args, **kwargs)
    message = str(raised.value)
    assert type(raised.value) is ValueError, f"{type(raised.value).__name__}: {message}"
    assert "\n" not in message, message
    for name in names:
        assert name in message, f"{name!r} not named in {message!r}"
    assert same((args, kwargs), before), "an argument or state changed although the call was refused"


def test_the_rows_are_distinct():
    ids = [r.id for r in ROWS]
    assert len(set(ids)) == len(ids)


def test_a_good_state_still_steps_and_is_not_modified():
    """The checks refuse only what is wrong: the good fixtures pass, and the step leaves its inputs alone."""
    fn, args, kwargs = step_call()
    before = copy.deepcopy(kwargs)
    u_bar, new = fn(*args, **kwargs)
    assert same(kwargs, before) and new.t == 4 and set(np.unique(u_bar)) <= {-1.0, 1.0}
    for make in (lambda: hier_call(), lambda: oba_call(), lambda: sign_call(), lambda: opt_step_call(SGDM()),
                 lambda: opt_step_call(Birder()), lambda: opt_step_call(marsit.Marsit(K=2)),
                 lambda: opt_step_call(onebit_adam.OneBitAdam(1)), lambda: opt_step_call(ZeroOneAdam(Policy(2, 2)))):
        fn, args, kwargs = make()
        fn(*args, **kwargs)
    history = driver.train(*train_call()[2].values())
    assert np.isfinite(history.losses).all()


def test_big_endian_float32_and_0d_coefficients_give_the_native_result():
    """float32 in the other byte order (a big-endian file) and 0-d arrays or NumPy scalars for beta, eps, T0, lr
    are the same values: the same result, bit for bit, as native float32 and Python numbers."""
    be = {name: x.astype(x.dtype.newbyteorder(">" if np.little_endian else "<")) for name, x in
          (("g", grads()), ("u_worker", U()), ("u_server", V()))}
    assert all(not x.dtype.isnative and x.dtype.itemsize == 4 for x in be.values())
    swapped = good_state()  # a state saved on a big-endian machine
    swapped = State(*(x.astype(x.dtype.newbyteorder()) for x in dataclasses.astuple(swapped)[:5]), swapped.t)
    fn, args, kwargs = step_call(swapped, beta=np.array(0.95, np.longdouble), eps=np.float32(1e-8).reshape(()),
                                 T0=np.array(1), **be)
    u_bar, new = fn(*args, **kwargs)
    fn, args, kwargs = step_call(beta=0.95, eps=float(np.float32(1e-8)), T0=1)
    u_native, native_state = fn(*args, **kwargs)
    assert u_bar.dtype == np.float32 and np.array_equal(u_bar, u_native)
    assert all(np.array_equal(a, b) and a.dtype == np.float32 for a, b in zip(
        dataclasses.astuple(new)[:5], dataclasses.astuple(native_state)[:5], strict=True))  # no float128 either
    fn, args, kwargs = opt_step_call(SGDM(), lr=np.array(0.1))
    params, _ = fn(*args, **kwargs)
    fn, args, kwargs = opt_step_call(SGDM(), lr=0.1)
    assert params.dtype == np.float32 and np.array_equal(params, fn(*args, **kwargs)[0])
    y = np.linspace(-1, 1, 8, dtype=np.float32)
    assert np.array_equal(quantize(y.astype(">f4"), np.full(8, 0.5, ">f4")), quantize(y, np.full(8, 0.5, np.float32)))


def test_negative_zero_in_b_is_accepted():
    """-0.0 is >= 0: the one-pass bit test falls back to the exact one rather than refusing it."""
    state = good_state()
    b = state.b.copy()
    b[0, 0] = -0.0
    fn, args, kwargs = step_call(with_field("b", b, state))
    fn(*args, **kwargs)


# ----------------------------------------------------------------------------------------------- fuzz
FUZZ = settings(max_examples=400, phases=(Phase.explicit, Phase.reuse, Phase.generate))
SPECIAL = st.sampled_from([0.0, -0.0, 1.0, -1.0, 0.5, 1e-45, 1e-8, 1e38, -1e38, 3.4e38, NAN, INF, -INF])
FLOAT32S = st.one_of(SPECIAL, st.floats(width=32))
COEFFICIENTS = st.one_of(st.sampled_from([0.9, 0.95, 1e-8, 1.0, 0.0, -1.0, 1e-50, 1e39, NAN, INF, 2]),
                         st.floats(), st.text(max_size=3), st.none(), st.booleans())
FIELDS = ("m", "b_hat", "b", "e", "server_e", "grads", "u_worker", "u_server")


@FUZZ
@given(field=st.sampled_from(FIELDS), index=st.integers(0, N * D - 1), value=FLOAT32S,
       beta=st.one_of(st.just(0.95), COEFFICIENTS), eps=st.one_of(st.just(1e-8), COEFFICIENTS),
       T0=st.one_of(st.none(), st.integers(-2, 6), st.sampled_from([1.5, "2", True])),
       t=st.one_of(st.integers(-2, 6), st.sampled_from([2.5, None])))
def test_fuzz_step_values(field, index, value, beta, eps, T0, t):
    """Any element, coefficient or count: a ValueError (one line, nothing changed) or a valid step (u_bar +-1, a
    finite new state with b_hat, b >= 0, t + 1); never another exception, a warning or a silent inf."""
    state = with_field("t", t)
    kwargs = step_call(state, beta=beta, eps=eps, T0=T0)[2]
    target = kwargs if field in ("grads", "u_worker", "u_server") else None
    array = (target[field] if target else getattr(state, field)).copy()
    array.reshape(-1)[index % array.size] = value
    if target:
        target[field] = array
    else:
        kwargs["state"] = with_field(field, array, state)
    before = copy.deepcopy(kwargs)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        try:
            u_bar, new = algorithm1.step(**kwargs)
        except ValueError as error:
            assert "\n" not in str(error) and same(kwargs, before), str(error)
            return
    assert same(kwargs, before)
    assert u_bar.dtype == np.float32 and u_bar.shape == (D,) and set(np.unique(u_bar)) <= {-1.0, 1.0}
    assert all(np.isfinite(getattr(new, f)).all() for f in ("m", "b_hat", "b", "e", "server_e"))
    assert new.b_hat.min() >= 0 and new.b.min() >= 0 and new.t == t + 1


@settings(max_examples=100, phases=(Phase.explicit, Phase.reuse, Phase.generate))
@given(lr=st.one_of(st.floats(), st.sampled_from([1e30, 1e38, 1e39, -0.0, 5e-324]), st.integers(-3, 10**40)),
       optimizer=st.sampled_from(["sgdm", "adam", "softsignsgd", "birder", "marsit", "onebit-adam"]))
def test_fuzz_learning_rates(lr, optimizer):
    """Any learning rate: a ValueError naming lr, or a finite history; never an AssertionError or a warning."""
    make = {"sgdm": SGDM, "adam": Adam, "softsignsgd": SoftSignSGD, "birder": Birder,
            "marsit": lambda: marsit.Marsit(K=2), "onebit-adam": lambda: onebit_adam.OneBitAdam(2)}[optimizer]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        try:
            history = driver.train(driver.quadratic(8), make(), Layout(1, 2), 4, lr)
        except ValueError as error:
            assert "lr" in str(error) and "\n" not in str(error), str(error)
            return
    assert np.isfinite(history.losses).all() and all(np.isfinite(p).all() for p in history.params)
