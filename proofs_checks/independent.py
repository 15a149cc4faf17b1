"""A second Algorithm 1, written from the paper without birder_ref: the suite must accept it.

It differs from the reference wherever the paper leaves room: the state is a dict, the arithmetic is float64 (the
stored state is rounded to float32 once per step), and the quantizer sends +1 when u >= 1 - p rather than when
u < p: the same law P(+1) = p (Eq. 5) with other draws mapped to +1, so it is not bit-identical to the reference
(``birder check --parity`` tells them apart) while keeping every property of the paper. Its float64 arithmetic
moves last ulps of m, b_hat, e and server_e: the warning ``contract_operation_order`` says so (exit 0).

``Birder`` splits the step into the paper's lines, one method each, so that ``proofs_checks.mutants`` can break
one line at a time.
"""

from __future__ import annotations

import numpy as np


class Birder:
    """Algorithm 1 (lines 5-13) as quantize / init / step over a dict state."""

    def quantize(self, y, u):
        """Eq. 5: +1 with probability p = (clip(y, -1, 1) + 1)/2: here when the draw falls in the top share p."""
        p = (np.clip(np.asarray(y, np.float64), -1.0, 1.0) + 1.0) / 2.0
        return np.where(np.asarray(u, np.float64) >= 1.0 - p, 1.0, -1.0).astype(np.float32)

    def init(self, n_workers: int, dim: int) -> dict:
        """Line 1: zero momenta, denominators and errors; t = 0."""
        zeros = np.zeros((n_workers, dim), np.float32)
        return {"m": zeros, "b_hat": zeros.copy(), "b": zeros.copy(), "e": zeros.copy(),
                "server_e": np.zeros(dim, np.float32), "t": 0}

    def moments(self, state: dict, g: np.ndarray, beta: float):
        """Lines 5-6."""
        m = beta * state["m"].astype(np.float64) + (1.0 - beta) * g
        b_hat = beta * state["b_hat"].astype(np.float64) + (1.0 - beta) * np.abs(g)
        return m.astype(np.float32), b_hat.astype(np.float32)

    def denominator(self, state: dict, b_hat: np.ndarray, t: int, T0):
        """Line 7: AMSGrad's running maximum once t > T0."""
        return np.maximum(state["b"], b_hat) if T0 is not None and t > T0 else b_hat

    def worker_input(self, m, b, e, eps: float):
        """The argument of Q on line 8: m/b + e, with eps added to b (the paper's footnote 5)."""
        return m.astype(np.float64) / (b.astype(np.float64) + eps) + e

    def worker_error(self, y, u):
        """Line 9: e = y - u."""
        return y - u

    def worker_draws(self, u_worker, t: int):
        return u_worker

    def server_input(self, u, server_e):
        """Line 12's argument: the mean of the workers' +-1 plus the server's error."""
        return u.mean(axis=0) + server_e

    def server_error(self, z, u_bar):
        """Line 13."""
        return z - u_bar

    def server_quantize(self, z, u_server, u_worker):
        return self.quantize(z, u_server)

    def step(self, state, grads, beta=0.95, eps=1e-8, u_worker=None, u_server=None, T0=None):
        """One step of Algorithm 1; returns u_bar (d,) and a new dict state (the old one is left alone)."""
        t = int(state["t"]) + 1
        g = np.asarray(grads, np.float64)
        m, b_hat = self.moments(state, g, beta)
        b = self.denominator(state, b_hat, t, T0)
        y = self.worker_input(m, b, state["e"].astype(np.float64), eps)
        u = self.quantize(y, self.worker_draws(u_worker, t)).astype(np.float64)
        e = self.worker_error(y, u)
        z = self.server_input(u, state["server_e"].astype(np.float64))
        u_bar = self.server_quantize(z, u_server, u_worker)
        server_e = self.server_error(z, u_bar.astype(np.float64))
        new = {"m": m, "b_hat": b_hat, "b": b, "e": e.astype(np.float32), "server_e": server_e.astype(np.float32),
               "t": t}
        return u_bar.astype(np.float32), new


_birder = Birder()
quantize, init, step = _birder.quantize, _birder.init, _birder.step
