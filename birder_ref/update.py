"""Algorithm 1 line 16 with decoupled weight decay, the one update every Birder implementation applies."""

from __future__ import annotations

import numpy as np


def apply_update(x: np.ndarray, u_bar: np.ndarray, lr: float, weight_decay: float = 0.0) -> np.ndarray:
    """Line 16: x - lr * (u_bar + weight_decay * x), in float32 (lr and weight_decay rounded to float32 first).

    Three float32 operations in this order, nothing fused; ``gpu_validation.optimizer.apply_update_`` performs the
    same ones on tensors, so both give the same bits. Returns a new array.
    """
    x = np.asarray(x, dtype=np.float32)
    return x - np.float32(lr) * (np.asarray(u_bar, dtype=np.float32) + np.float32(weight_decay) * x)
