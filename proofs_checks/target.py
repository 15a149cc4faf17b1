"""The implementation under test, seen only through its interface (docs/check_interface.md, ``birder check --help``).

An implementation is any object (a module, a class instance, ...) with ``quantize(y, u)``, ``init(n_workers,
dim)`` and ``step(state, grads, beta=, eps=, u_worker=, u_server=, T0=)`` returning ``(u_bar, new_state)``. The
state's fields m, b_hat, b, e, server_e and t are read by attribute, or by key from a dict-like state. Arrays may
be NumPy arrays or anything ``numpy.asarray`` understands (torch tensors are moved to the CPU first).
``load_target`` takes ``MODULE[:OBJECT]`` (a module in the current directory included) or a file path
``path/to/impl.py[:OBJECT]``.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

DEFAULT_IMPL = "birder_ref.algorithm1"
ARRAY_FIELDS = ("m", "b_hat", "b", "e", "server_e")
INTERFACE = ("quantize", "init", "step")


class ImplError(Exception):
    """The implementation raised, or returned something outside the interface, while a check drove it."""


def to_numpy(x) -> np.ndarray:
    """A NumPy copy of an array-like (torch tensors are detached and moved to the CPU), dtype kept."""
    try:
        if hasattr(x, "detach"):
            x = x.detach().cpu().numpy()
        return np.array(x, copy=True)
    except Exception as error:  # e.g. a bfloat16 tensor, or an object numpy cannot read
        raise ImplError(f"cannot read {type(x).__name__} as an array: {type(error).__name__}: {error}") from error


def read_count(value) -> int:
    """The step counter t as a Python int (a Python or NumPy integer, or a 0-d integer array or tensor)."""
    a = to_numpy(value)
    if a.shape != () or not (np.issubdtype(a.dtype, np.integer) or np.issubdtype(a.dtype, np.floating)):
        raise ImplError(f"state field t is {a!r}, expected an integer")
    if np.issubdtype(a.dtype, np.floating) and not (np.isfinite(a) and float(a) == int(a)):
        raise ImplError(f"state field t is {float(a)!r}, expected an integer")
    return int(a)


@dataclass(frozen=True)
class StateView:
    """A snapshot of Algorithm 1's state: m, b_hat, b, e (n, d); server_e (d,); the step count t."""

    m: np.ndarray
    b_hat: np.ndarray
    b: np.ndarray
    e: np.ndarray
    server_e: np.ndarray
    t: int

    def equals(self, other: StateView) -> list[str]:
        """Names of the fields that differ bit for bit (NaN equal to NaN)."""
        differ = [f for f in ARRAY_FIELDS if not same_bits(getattr(self, f), getattr(other, f))]
        return differ + (["t"] if self.t != other.t else [])


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.dtype.kind in "biufc" and a.tobytes() == b.tobytes():
        return True  # the same bytes: array_equal below would say so too (NaN beside NaN), ~10x slower
    return bool(np.array_equal(a, b, equal_nan=True))


def field(state, name: str):
    """A state's field by attribute, or by key from a dict-like state."""
    if hasattr(state, name):
        return getattr(state, name)
    try:
        return state[name]
    except (KeyError, TypeError, IndexError) as error:
        raise ImplError(f"the state has no field {name!r} (read by attribute or by key)") from error


def read_state(state, n: int, d: int) -> StateView:
    """Copy the state's fields out, checking their shapes: (n, d) for m, b_hat, b, e and (d,) for server_e."""
    arrays = {}
    for name in ARRAY_FIELDS:
        value = to_numpy(field(state, name))
        want = (d,) if name == "server_e" else (n, d)
        if value.shape != want:
            raise ImplError(f"state field {name} has shape {value.shape}, expected {want}")
        arrays[name] = value
    return StateView(**arrays, t=read_count(field(state, "t")))


def state_dtypes(state) -> dict:
    """The dtype of each array field and the type of t, as the implementation returned them."""
    kinds = {name: str(to_numpy(field(state, name)).dtype) for name in ARRAY_FIELDS}
    t = field(state, "t")
    kinds["t"] = str(to_numpy(t).dtype) if hasattr(t, "dtype") else type(t).__name__
    return kinds


@dataclass(frozen=True)
class Target:
    """An implementation to judge: its three functions (None where missing) and, optionally, its schemes.

    ``schemes`` is an object with ``step(scheme, state, grads, beta, eps, u_worker, u_server, T0)`` returning
    ``(u_bar, state, log)``, as ``birder_ref.schemes``, and optionally ``SCHEMES``, the names it offers (without
    it, "hierarchical" alone is judged). ``log.bytes_per_gpu`` maps each phase to the most bytes one GPU sent in
    it; Section 4's steps are read under the keys ``intra_reduce_scatter``, ``inter_all_to_all``,
    ``inter_all_gather`` and ``intra_all_gather``. The scheme checks apply only where ``schemes`` is present.
    """

    name: str
    obj: Any
    quantize: Any
    init: Any
    step: Any
    schemes: Any = None

    def missing(self, names: tuple[str, ...]) -> list[str]:
        return [name for name in names if not callable(getattr(self, name))]

    def run_quantize(self, y: np.ndarray, u: np.ndarray) -> np.ndarray:
        try:
            q = self.quantize(y, u)
        except Exception as error:
            raise ImplError(f"quantize raised {type(error).__name__}: {error}") from error
        q = to_numpy(q)
        if q.shape != y.shape:
            raise ImplError(f"quantize returned shape {q.shape} for input shape {y.shape}")
        return q

    def run_init(self, n: int, d: int):
        try:
            return self.init(n, d)
        except Exception as error:
            raise ImplError(f"init({n}, {d}) raised {type(error).__name__}: {error}") from error

    def call_step(self, state, grads, beta, eps, u_worker, u_server, T0):
        """One call of ``step`` with keyword arguments; returns (u_bar as returned, a NumPy copy of it, the new
        state)."""
        try:
            out = self.step(state, grads, beta=beta, eps=eps, u_worker=u_worker, u_server=u_server, T0=T0)
        except Exception as error:
            raise ImplError(f"step raised {type(error).__name__}: {error}") from error
        if not isinstance(out, tuple | list) or len(out) != 2:
            raise ImplError(f"step returned {type(out).__name__}, expected the pair (u_bar, new_state)")
        u_bar = to_numpy(out[0])
        if u_bar.shape != (grads.shape[1],):
            raise ImplError(f"step returned u_bar of shape {u_bar.shape}, expected {(grads.shape[1],)}")
        return out[0], u_bar, out[1]

    def run_step(self, state, grads, beta, eps, u_worker, u_server, T0):
        """One call of ``step`` with keyword arguments; returns (u_bar as a NumPy array, the new state)."""
        _, u_bar, new = self.call_step(state, grads, beta, eps, u_worker, u_server, T0)
        return u_bar, new


def target_from_object(obj, name: str | None = None, schemes=None) -> Target:
    """Wrap any object with (some of) quantize, init and step. The reference's own module gets its schemes."""
    if schemes is None and getattr(obj, "__name__", None) == DEFAULT_IMPL:
        schemes = importlib.import_module("birder_ref.schemes")
    if schemes is None:
        schemes = getattr(obj, "schemes", None)
    label = name or getattr(obj, "__name__", None) or type(obj).__name__
    return Target(label, obj, *(getattr(obj, f, None) for f in INTERFACE), schemes=schemes)


def interface_misuse(obj) -> str | None:
    """Why ``obj`` cannot be an implementation at all, or None. An object with none of quantize, init and step
    (a function, say) is the wrong object, not a failing implementation; nor is a class whose methods need an
    instance. An object with some of the three is judged, and the ``interface`` check names what it lacks."""
    present = [name for name in INTERFACE if callable(getattr(obj, name, None))]
    if not present:
        label = " ".join(filter(None, (type(obj).__name__, getattr(obj, "__name__", None))))
        return f"{label} has none of {', '.join(INTERFACE)}"
    if isinstance(obj, type):
        unbound = [name for name in present
                   if not isinstance(inspect.getattr_static(obj, name), (staticmethod, classmethod))]
        if unbound:
            return (f"{obj.__name__} is a class and its {', '.join(unbound)} need an instance: name an instance of "
                    "it (MODULE:OBJECT) or a module")
    return None


def _split_spec(spec: str) -> tuple[str, str]:
    """``MODULE[:OBJECT]`` or ``path/to/file.py[:OBJECT]`` -> (module or path, object path)."""
    head, sep, tail = spec.rpartition(":")
    if sep and head and "/" not in tail and "\\" not in tail and not tail.endswith(".py"):
        return head, tail
    return spec, ""


def _is_path(name: str) -> bool:
    return name.endswith(".py") or os.sep in name or "/" in name


def import_file(path: str):
    """Import a Python file as a module. Its folder goes first on sys.path (its sibling imports work); a package's
    ``__init__.py`` (or a package folder) is imported as that package, so its relative imports work."""
    file = Path(path).expanduser().resolve()
    if file.is_dir():
        file = file / "__init__.py"
    if not file.is_file():
        raise ValueError(f"no such file: {path}")
    if file.name == "__init__.py":
        root, name = str(file.parent.parent), file.parent.name
        if root not in sys.path:
            sys.path.insert(0, root)
        return importlib.import_module(name)
    folder = str(file.parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    name = file.stem if file.stem.isidentifier() else "birder_impl_under_check"
    module_spec = importlib.util.spec_from_file_location(name, file)
    if module_spec is None or module_spec.loader is None:
        raise ValueError(f"{path} is not a Python file")
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[name] = module
    module_spec.loader.exec_module(module)
    return module


def load_target(spec=None, search_cwd: bool = False) -> Target:
    """The implementation named by ``MODULE[:OBJECT]`` or ``path/to/file.py[:OBJECT]`` (default
    ``birder_ref.algorithm1``), or an object itself. ``search_cwd`` puts the current directory first on sys.path,
    as ``python -m`` does (the command line sets it).

    Raises ValueError (one line) when the module cannot be imported, the object is not in it, or the object cannot
    be an implementation (``interface_misuse``). A SystemExit raised while importing is also reported as a
    ValueError: importing an implementation must not end the process.
    """
    if spec is None:
        spec = DEFAULT_IMPL
    if not isinstance(spec, str):
        misuse = interface_misuse(spec)
        if misuse:
            raise ValueError(misuse)
        return target_from_object(spec)
    module_name, object_path = _split_spec(spec.strip())
    if not module_name:
        raise ValueError(f"--impl {spec!r}: expected MODULE[:OBJECT] or path/to/file.py[:OBJECT]")
    if search_cwd and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        obj = import_file(module_name) if _is_path(module_name) else importlib.import_module(module_name)
    except ValueError:
        raise
    except SystemExit as error:
        raise ValueError(f"importing {module_name!r} called sys.exit({error.code!r})") from error
    except Exception as error:  # any failure to import is bad usage, reported in one line
        hint = "" if _is_path(module_name) else " (a file: give its path, path/to/impl.py)"
        raise ValueError(f"cannot import {module_name!r}: {type(error).__name__}: {error}"
                         + (hint if isinstance(error, ModuleNotFoundError) else "")) from error
    for part in filter(None, object_path.split(".")):
        if not hasattr(obj, part):
            raise ValueError(f"{spec!r}: {getattr(obj, '__name__', obj)!s} has no attribute {part!r}")
        obj = getattr(obj, part)
    misuse = interface_misuse(obj)
    if misuse:
        raise ValueError(f"--impl {spec!r}: {misuse}")
    return target_from_object(obj, name=spec)
