"""Lightning's mixed precision with gradient clipping, for Birder.

Birder tells ``GradScaler`` that it handles the scale itself (``_step_supports_amp_scaling``: the scaler passes the
scale and its found-inf flag to step(), which skips on every rank alike). Lightning's ``MixedPrecision`` plugin reads
that flag as "a fused optimizer that unscales inside step()" and refuses ``gradient_clip_val`` with
``precision="16-mixed"`` or ``"bf16-mixed"``, though bf16 has no scaler at all. ``mixed_precision`` builds the same
plugin with one change: before clipping, it unscales Birder's gradients through the scaler (``GradScaler.unscale_``,
exact for its power-of-two scales), so the clip sees the true local gradients, and the scaler's step() then hands
Birder no scale to divide by. Without clipping it is Lightning's plugin unchanged. Needs the ``lightning`` extra.

    trainer = L.Trainer(..., gradient_clip_val=1.0, plugins=[mixed_precision("16-mixed", "cuda")])
"""

from __future__ import annotations

from typing import Any


def mixed_precision(precision: str, device: str = "cuda") -> Any:
    """Lightning's ``MixedPrecision(precision, device)`` that clips Birder's gradients after unscaling them (module
    docstring); give it as ``Trainer(plugins=[...])`` in place of ``precision=``. ValueError for a precision other
    than "16-mixed" or "bf16-mixed"."""
    if precision not in ("16-mixed", "bf16-mixed"):
        raise ValueError(f"precision must be '16-mixed' or 'bf16-mixed' (Lightning's mixed precision), got "
                         f"{precision!r}")
    from lightning.pytorch.plugins.precision import MixedPrecision
    from lightning.pytorch.plugins.precision.precision import Precision
    from lightning.pytorch.utilities import GradClipAlgorithmType

    from gpu_validation.optimizer import Birder

    class BirderMixedPrecision(MixedPrecision):
        def clip_gradients(self, optimizer, clip_val=0.0, gradient_clip_algorithm=GradClipAlgorithmType.NORM):
            if not isinstance(optimizer, Birder) or clip_val <= 0:
                return super().clip_gradients(optimizer, clip_val, gradient_clip_algorithm)
            if self.scaler is not None:
                self.scaler.unscale_(optimizer)  # the scaler's step() then passes no scale: Birder divides by none
            return Precision.clip_gradients(self, optimizer, clip_val, gradient_clip_algorithm)

    return BirderMixedPrecision(precision, device)
