"""Section 4's Hierarchical-1-bit-All-Reduce with Birder, in the interface of ``algorithm1.step`` (plus a byte
log)."""

from __future__ import annotations

import numpy as np

from birder_ref import algorithm1, schemes
from birder_ref.algorithm1 import State
from birder_ref.hyperparameters import DEFAULTS
from birder_ref.validation import check_int


def init(n_nodes: int, gpus_per_node: int, dim: int) -> State:
    """Algorithm 1's state with one worker per node (each node's GPUs hold its shards). It holds nothing per GPU,
    so ``gpus_per_node`` is only checked (>= 1): a step takes any number of GPUs per node, whose node means are
    what Algorithm 1 sees."""
    check_int("gpus_per_node", gpus_per_node, 1)
    return algorithm1.init(n_nodes, dim)


def step(
    state: State,
    grads: np.ndarray,
    beta: float = DEFAULTS.beta,
    eps: float = DEFAULTS.eps,
    u_worker: np.ndarray | None = None,
    u_server: np.ndarray | None = None,
    T0: int | None = None,
) -> tuple[np.ndarray, State, schemes.StepLog]:
    """One step over the four phases; grads (n_nodes, gpus_per_node, d), U (n_nodes, d), V (d,).

    Returns u_bar, the new state and the log, whose ``bytes_per_gpu`` maps intra_reduce_scatter,
    inter_all_to_all, inter_all_gather and intra_all_gather to the bytes one GPU sends in each.
    """
    return schemes.step("hierarchical", state, grads, beta, eps, u_worker, u_server, T0)
