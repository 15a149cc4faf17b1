"""Input checks shared by the reference: one ValueError naming the bad worker and element."""

from __future__ import annotations

import numpy as np


def _first(mask: np.ndarray) -> tuple[int, ...]:
    return tuple(int(i) for i in np.argwhere(mask)[0])


def _where(name: str, index: tuple[int, ...], worker_axes: int) -> str:
    if worker_axes and len(index) > 1:
        worker = index[:worker_axes]
        return f"{name}: worker {worker[0] if len(worker) == 1 else worker}, element {index[worker_axes:]}"
    return f"{name}: element {index if len(index) > 1 else index[0]}"


def check_array(name: str, x, shape: tuple[int, ...] | None = None, worker_axes: int = 0) -> np.ndarray:
    """A float32 array of the given shape with finite values, or a ValueError saying what is wrong."""
    if not isinstance(x, np.ndarray):
        raise ValueError(f"{name} must be a NumPy float32 array, got {type(x).__name__}")
    if x.dtype != np.float32:
        raise ValueError(f"{name} must be float32, got {x.dtype}")
    if shape is not None and x.shape != shape:
        raise ValueError(f"{name} must have shape {shape}, got {x.shape}")
    if x.size and not (np.isfinite(x.min()) and np.isfinite(x.max())):  # two reductions, no temporaries
        index = _first(~np.isfinite(x))
        raise ValueError(f"{_where(name, index, worker_axes)} is {x[index]} (not finite)")
    return x


def check_draws(name: str, u, shape: tuple[int, ...], worker_axes: int = 0) -> np.ndarray:
    """Draws: float32 of the given shape, every value in [0, 1)."""
    if not isinstance(u, np.ndarray) or u.dtype != np.float32 or u.shape != shape:
        return check_array(name, u, shape, worker_axes)  # raises the shape or dtype error
    if u.size and not (u.min() >= 0 and u.max() < 1):  # NaN fails both comparisons
        bad = ~np.isfinite(u) if not np.isfinite(u).all() else (u < 0) | (u >= 1)
        index = _first(bad)
        raise ValueError(f"{_where(name, index, worker_axes)} is {u[index]}, outside [0, 1)")
    return u


def check_coefficients(beta: float, eps: float, T0: int | None = None) -> None:
    if not 0.0 < float(beta) < 1.0:
        raise ValueError(f"beta must lie in (0, 1), got {beta}")
    if not float(eps) > 0.0 or not np.isfinite(eps):
        raise ValueError(f"eps must be a positive finite number, got {eps}")
    if T0 is not None and (isinstance(T0, bool) or not isinstance(T0, int | np.integer) or T0 < 0):
        raise ValueError(f"T0 must be None or an integer >= 0, got {T0!r}")
