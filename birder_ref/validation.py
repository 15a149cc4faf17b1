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
    if isinstance(x, np.generic):
        raise ValueError(f"{name} must be a NumPy float32 array, got a NumPy {x.dtype} scalar (np.asarray makes it a "
                         "0-d array)")
    if not isinstance(x, np.ndarray):
        raise ValueError(f"{name} must be a NumPy float32 array, got {type(x).__name__}")
    _refuse_subclass(name, x)
    if x.dtype != np.float32:
        raise ValueError(f"{name} must be float32, got {x.dtype}")
    if shape is not None and x.shape != shape:
        raise ValueError(f"{name} must have shape {shape}, got {x.shape}")
    if x.size and not (np.isfinite(x.min()) and np.isfinite(x.max())):  # two reductions, no temporaries
        index = _first(~np.isfinite(x))
        raise ValueError(f"{_where(name, index, worker_axes)} is {x[index]} (not finite)")
    return x


def _refuse_subclass(name: str, x: np.ndarray) -> None:
    """np.matrix keeps every result 2-D (u_bar would come back (1, d)) and a masked array's mask would be silently
    dropped by the arithmetic: neither means what a plain array means."""
    if isinstance(x, np.ma.MaskedArray):
        raise ValueError(f"{name} must be a plain NumPy array, got a masked array (its mask would be ignored): "
                         "fill or drop the masked elements first")
    if isinstance(x, np.matrix):
        raise ValueError(f"{name} must be a plain NumPy array, got np.matrix: pass np.asarray(x)")


def check_draws(name: str, u, shape: tuple[int, ...], worker_axes: int = 0) -> np.ndarray:
    """Draws: float32 of the given shape, every value in [0, 1)."""
    if not isinstance(u, np.ndarray) or u.dtype != np.float32 or u.shape != shape:
        return check_array(name, u, shape, worker_axes)  # raises the shape or dtype error
    _refuse_subclass(name, u)
    if u.size and not (u.min() >= 0 and u.max() < 1):  # NaN fails both comparisons
        bad = ~np.isfinite(u) if not np.isfinite(u).all() else (u < 0) | (u >= 1)
        index = _first(bad)
        raise ValueError(f"{_where(name, index, worker_axes)} is {u[index]}, outside [0, 1)")
    return u


def check_int(name: str, value, minimum: int | None = None, maximum: int | None = None) -> int:
    """An integer (Python or NumPy, not bool) within [minimum, maximum], returned as int; else a ValueError."""
    if isinstance(value, bool | np.bool_) or not isinstance(value, int | np.integer):
        raise ValueError(f"{name} must be an integer, got {_shown(value)}")
    value = int(value)
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        bounds = f"be >= {minimum}" if maximum is None else f"lie in [{minimum}, {maximum}]" if minimum is not None \
            else f"be <= {maximum}"
        raise ValueError(f"{name} must {bounds}, got {value}")
    return value


def check_real(name: str, value, low: float | None = None, high: float | None = None, low_open: bool = False,
               high_open: bool = False, float32: bool = False) -> float:
    """A finite real number (Python or NumPy, not bool) within the bounds, returned as float; else a ValueError.

    ``float32``: the value must also be finite, and within open bounds, once rounded to float32 (beta = 1 - 1e-9
    is 1.0 there, eps = 1e-50 is 0), because the reference computes with it in float32.
    """
    if isinstance(value, bool | np.bool_) or not isinstance(value, int | float | np.integer | np.floating):
        raise ValueError(f"{name} must be a real number, got {_shown(value)}")
    try:
        number = float(value)
    except OverflowError:  # an int beyond float range
        number = float("inf") if value > 0 else float("-inf")
    if not np.isfinite(number):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    def outside(x: float) -> bool:
        return ((low is not None and (x <= low if low_open else x < low))
                or (high is not None and (x >= high if high_open else x > high)))

    def bounds() -> str:  # in words, for the error only (the check runs every reference step)
        if high is None:
            return f"be {'>' if low_open else '>='} {low:g}" if low is not None else "be finite"
        if low is None:
            return f"be {'<' if high_open else '<='} {high:g}"
        return f"lie in {'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"

    if outside(number):
        raise ValueError(f"{name} must {bounds()}, got {value!r}")
    if float32:
        single = np.float32(number) if abs(number) <= float(np.finfo(np.float32).max) else np.float32(np.inf)
        if not np.isfinite(single) or outside(float(single)):
            raise ValueError(f"{name}={number!r} is {single} in float32, where the reference computes with it; it "
                             + (f"must {bounds()} there too" if np.isfinite(single) else "must be finite there"))
    return number


def _shown(value) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 40 else text[:37] + '...'}"


def check_coefficients(beta: float, eps: float, T0: int | None = None) -> None:
    """Algorithm 1's coefficients: beta in (0, 1) and eps > 0, both also in float32 (where lines 5-9 compute with
    them), T0 None or >= 0."""
    check_real("beta", beta, 0.0, 1.0, low_open=True, high_open=True, float32=True)
    check_real("eps", eps, 0.0, low_open=True, float32=True)
    if T0 is not None:
        check_int("T0", T0, 0)


def check_lr(lr, name: str = "lr") -> float:
    """A learning rate: finite, >= 0 and finite in float32 (the update is computed in float32)."""
    return check_real(name, lr, 0.0, float32=True)


def check_step_number(t) -> int:
    """The driver's 1-based step t."""
    return check_int("t", t, 1)


def same_values(a: np.ndarray, b: np.ndarray) -> bool:
    """Exact equality that counts NaN equal to NaN (a consistency check must not fail on a NaN both ranks hold)."""
    return np.array_equal(a, b, equal_nan=bool(np.issubdtype(np.asarray(a).dtype, np.inexact)))


def native(x):
    """An array as the reference computes with it: float32 stored in the other byte order (``>f4`` on a
    little-endian machine: read from a big-endian file or a network format) as native float32, the same values;
    anything else as given, for the checks to judge (float64 and wrong shapes are still refused)."""
    if isinstance(x, np.ndarray) and x.dtype.kind == "f" and x.dtype.itemsize == 4 and not x.dtype.isnative:
        return x.astype(np.float32)
    return x


def scalar(value):
    """A coefficient (beta, eps, T0, lr) as a Python number: a 0-d array or a NumPy scalar (``np.array(0.95)``,
    ``np.float32(1e-8)``) as its value, so NumPy 2 promotion treats it as the paper's Python coefficient (a 0-d
    float64 array would turn float32 results into float64); anything else as given, for the checks to judge."""
    if type(value) is np.ndarray and value.ndim == 0 and value.dtype.kind in "biuf":
        value = value[()]  # the NumPy scalar
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):  # float(), not .item(): a longdouble's item() stays a longdouble, and
        return float(value)  # would turn float32 results into float128
    return value
