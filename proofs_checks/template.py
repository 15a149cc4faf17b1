"""A minimal correct Birder (Algorithm 1 of the paper) for `birder check --impl path/to/this_file.py`.

Copy it and replace the NumPy lines with your kernels. What `birder check` requires of it:
- quantize(y, u): +1 where u < (clip(y, -1, 1) + 1) / 2, else -1, float32 (Eq. 5 with the draw u injected);
- init(n, d): m, b_hat, b, e of shape (n, d), server_e of shape (d,), all zero; t = 0 (Algorithm 1 line 1);
- step(state, grads, beta, eps, u_worker, u_server, T0=None): lines 5-13 in float32, in this order, returning
  u_bar (d,) and a NEW state; the given state is left unchanged and returned arrays are never reused.
"""

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class State:
    m: np.ndarray  # (n, d) momentum, line 5
    b_hat: np.ndarray  # (n, d) EMA of |g|, line 6
    b: np.ndarray  # (n, d) denominator, line 7 (running maximum once t > T0)
    e: np.ndarray  # (n, d) worker errors, line 9
    server_e: np.ndarray  # (d,) server error, line 13
    t: int = 0  # steps taken


def quantize(y, u):
    threshold = (np.clip(y, -1, 1) + np.float32(1)) / np.float32(2)
    return np.where(u < threshold, np.float32(1), np.float32(-1))


def init(n_workers, dim):
    zeros = np.zeros((n_workers, dim), np.float32)
    return State(zeros, zeros.copy(), zeros.copy(), zeros.copy(), np.zeros(dim, np.float32), 0)


def step(state, grads, beta=0.95, eps=1e-8, u_worker=None, u_server=None, T0=None):
    beta, eps = float(beta), float(eps)  # a NumPy float64 beta would make float32 arrays float64 (NumPy 2 promotion)
    t = state.t + 1
    m = beta * state.m + (1 - beta) * grads  # line 5
    b_hat = beta * state.b_hat + (1 - beta) * np.abs(grads)  # line 6: same operations, same order as line 5
    b = np.maximum(state.b, b_hat) if T0 is not None and t > T0 else b_hat  # line 7
    y = m / (b + np.float32(eps)) + state.e  # line 8's argument: r = m / (b + eps), plus the worker's error
    u = quantize(y, u_worker)  # line 8
    e = y - u  # line 9
    z = u.sum(axis=0) / np.float32(u.shape[0]) + state.server_e  # line 12's argument: the mean, plus the server error
    u_bar = quantize(z, u_server)  # line 12
    return u_bar, State(m, b_hat, b, e, z - u_bar, t)  # line 13: server_e = z - u_bar
