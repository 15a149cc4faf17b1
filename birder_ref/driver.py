"""A small driver: train a built-in synthetic problem with any optimizer, scheme and layout.

Every optimizer follows one protocol (``DistributedOptimizer``): it keeps one parameter replica per GPU,
``params`` of shape (n_ranks, d), receives every GPU's gradient at its own replica, shaped
(n_nodes, gpus_per_node, d), and returns the new replicas. Synchronous optimizers return identical rows;
optimizers with local steps (0/1 Adam) may not. Draws come from ``birder_ref.draws`` (counter-based), so a
run is a pure function of its seed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields, is_dataclass
from typing import Any, Protocol

import numpy as np

from birder_ref import draws
from birder_ref.schedules import Layout, check_layout
from birder_ref.validation import check_int, check_lr, check_real, scalar

GRADIENT_GRID = 2.0**-16  # exact-data gradients are multiples of this: node sums are then exact


class DistributedOptimizer(Protocol):
    name: str

    def init(self, layout: Layout, dim: int) -> Any: ...

    def step(self, state: Any, params: np.ndarray, grads: np.ndarray, lr: float, t: int) -> tuple[np.ndarray, Any]:
        """One step t (1-based): params (n_ranks, d), grads (n_nodes, gpus_per_node, d) -> (params, state)."""
        ...


@dataclass(frozen=True)
class Problem:
    """A synthetic objective: f(x) and every GPU's stochastic gradient at its replica.

    ``gradient(x, worker, t, seed)`` returns a float32 gradient of f at x for one GPU; ``exact`` rounds it to
    multiples of ``GRADIENT_GRID`` so that every scheme's reductions are exact.
    """

    name: str
    x0: np.ndarray
    loss: Callable[[np.ndarray], float]
    gradient: Callable[[np.ndarray, int, int, int], np.ndarray]
    exact: bool = True

    @property
    def dim(self) -> int:
        return self.x0.size

    def gradients(self, params: np.ndarray, layout: Layout, t: int, seed: int) -> np.ndarray:
        grads = np.stack([self.gradient(params[r], r, t, seed) for r in range(layout.n_ranks)])
        if self.exact:
            grads = (np.round(grads / GRADIENT_GRID) * GRADIENT_GRID).astype(np.float32)
        return grads.astype(np.float32).reshape(layout.n_nodes, layout.gpus_per_node, -1)


def _noise(seed: int, t: int, worker: int, dim: int, scale: float) -> np.ndarray:
    """Zero-mean noise from the counter-based draws (stream 2**30 + worker keeps it apart from quantizers)."""
    return (scale * (2 * draws.uniforms(seed, t, 2**30 + worker, dim) - 1)).astype(np.float32)


def figure8() -> Problem:
    """BinSGDM paper Figure 8: f(x) = x^2 / 2 from x0 = 1, deterministic gradient x."""
    return Problem("figure8", np.ones(1, np.float32), lambda x: float(0.5 * np.sum(np.float64(x) ** 2)),
                   lambda x, worker, t, seed: x.astype(np.float32), exact=False)


def quadratic(dim: int = 64, condition: float = 100.0, noise: float = 0.1) -> Problem:
    """f(x) = 1/2 sum_j a_j x_j^2 with a_j spread over [1, condition], plus uniform gradient noise."""
    dim = check_int("dim", dim, 1)
    condition = check_real("condition", condition, 1.0)
    noise = check_real("noise", noise, 0.0)
    a = np.geomspace(1.0, condition, dim).astype(np.float32)
    return Problem(f"quadratic-{dim}", np.ones(dim, np.float32),
                   lambda x: float(0.5 * np.sum(a * np.float64(x) ** 2)),
                   lambda x, worker, t, seed: a * x + _noise(seed, t, worker, dim, noise))


def logistic(n_samples: int = 512, dim: int = 32, batch: int = 32, data_seed: int = 7) -> Problem:
    """Logistic regression on a fixed synthetic data set; each GPU draws its own mini-batch."""
    n_samples, dim = check_int("n_samples", n_samples, 1), check_int("dim", dim, 1)
    batch, data_seed = check_int("batch", batch, 1), check_int("data_seed", data_seed, 0)
    rng = np.random.default_rng(data_seed)
    X = rng.standard_normal((n_samples, dim)).astype(np.float32)
    w_true = rng.standard_normal(dim).astype(np.float32)
    y = (X @ w_true + 0.5 * rng.standard_normal(n_samples) > 0).astype(np.float32)

    def loss(w):
        z = X.astype(np.float64) @ w
        return float(np.mean(np.logaddexp(0, z) - y * z))

    def gradient(w, worker, t, seed):
        pick = (draws.uniforms(seed, t, 2**30 + worker, batch) * n_samples).astype(np.int64)
        z = X[pick] @ w
        return (X[pick].T @ (1 / (1 + np.exp(-z)) - y[pick]) / batch).astype(np.float32)

    return Problem("logistic", np.zeros(dim, np.float32), loss, gradient)


PROBLEMS: dict[str, Callable[[], Problem]] = {"figure8": figure8, "quadratic": quadratic, "logistic": logistic}


def problem(name: str, **options) -> Problem:
    """The built-in problem called ``name`` (one of ``PROBLEMS``), built with ``options``."""
    if not isinstance(name, str) or name not in PROBLEMS:
        raise ValueError(f"unknown problem {name!r}; choose one of {', '.join(PROBLEMS)}")
    try:
        return PROBLEMS[name](**options)
    except TypeError:  # an option the problem does not take
        raise ValueError(f"problem {name!r} takes no option(s) {', '.join(sorted(options))}") from None


def _first_non_finite(value, name: str) -> str | None:
    """The name of the first float array in ``value`` (a dataclass state, possibly nested) holding NaN or inf."""
    if isinstance(value, np.ndarray):
        return name if value.dtype.kind == "f" and not np.isfinite(value).all() else None
    if is_dataclass(value) and not isinstance(value, type):
        for f in fields(value):
            found = _first_non_finite(getattr(value, f.name), f"{name}.{f.name}")
            if found:
                return found
    return None


@dataclass
class History:
    losses: list[float] = field(default_factory=list)  # f at rank 0's replica, before each step and at the end
    params: list[np.ndarray] = field(default_factory=list)  # rank 0's replica, same times


def train(problem: Problem, optimizer: DistributedOptimizer, layout: Layout, steps: int,
          lr: float | Callable[[int], float], seed: int = 0) -> History:
    """Run ``steps`` steps; ``lr`` is a number or a function of the 1-based step t.

    Every argument is checked first (one ValueError naming it). A run whose parameters stop being finite raises
    a ValueError naming the step and the learning rate (the usual cause: lr too large), never a silent inf.
    """
    if not isinstance(problem, Problem):
        raise ValueError(f"problem must be a driver.Problem (figure8(), quadratic(), logistic() or "
                         f"driver.problem(name)), got {type(problem).__name__}")
    if isinstance(optimizer, type) or not all(callable(getattr(optimizer, m, None)) for m in ("init", "step")):
        raise ValueError(f"optimizer must be an instance with init and step (the DistributedOptimizer protocol), "
                         f"got {optimizer!r}")
    check_layout(layout)
    steps = check_int("steps", steps, 0)
    seed = check_int("seed", seed, 0, 2**32 - 1)
    if not callable(lr):
        lr = scalar(lr)  # a 0-d array as its Python value
        check_lr(lr)
    params = np.tile(problem.x0.astype(np.float32), (layout.n_ranks, 1))
    state = optimizer.init(layout, problem.dim)
    history = History()
    for t in range(1, steps + 1):
        history.losses.append(problem.loss(params[0]))
        history.params.append(params[0].copy())
        rate = check_lr(scalar(lr(t)), f"lr({t})") if callable(lr) else lr
        with np.errstate(over="ignore", invalid="ignore"):  # overflow is caught just below, as one ValueError
            grads = problem.gradients(params, layout, t, seed)
            if not np.isfinite(grads).all():
                raise ValueError(f"training diverged at step {t}: the gradients are not finite at parameters as "
                                 f"large as {float(np.abs(params).max()):.3g} (lr={rate!r} too large for this "
                                 "problem?)")
            params, state = optimizer.step(state, params, grads, rate, t)
        broken = "params" if not np.isfinite(params).all() else _first_non_finite(state, "state")
        if broken:
            raise ValueError(f"training diverged at step {t}: {broken} is no longer finite with lr={rate!r} (too "
                             "large for this problem and optimizer)")
    history.losses.append(problem.loss(params[0]))
    history.params.append(params[0].copy())
    return history
