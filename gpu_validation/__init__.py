"""Birder in torch over torch.distributed, regression-tested bit for bit against the NumPy reference.

``optimizer`` holds ``Birder``, the torch optimizer users adopt in one line (``Birder(ddp_model, lr=...)``), whose
step() reads as Algorithm 1; ``guards`` what it refuses and the checks that keep its ranks in step, ``records``
what its ranks tell each other besides the algorithm's bits, ``checkpoint`` its state dicts, ``overlap`` its
exchange started during backward;
``torch_birder`` Algorithm 1's numerics on tensors, ``comm`` the 1-bit all-reduce over process groups, ``hook``
the lower-level DDP communication hook and its state, ``validate`` the multi-rank comparison with ``birder_ref``,
``reference_check`` ``birder_ref`` beside a ``Birder`` step by step, ``launch`` the local ranks, ``digests`` the
committed per-step digests, ``layout`` the layout from the ranks' hosts, ``adoption`` the multi-rank checks of its
refusals where clients meet it, ``bench`` the timings, ``check_adapter`` ``torch_birder`` behind the interface
`birder check --impl` judges, ``cli`` the two subcommands. See README.md. The multi-rank test bodies live with the
tests (tests/gpu_scenarios/).

Importing this package does not import torch (the command line must be able to say torch is missing);
``gpu_validation.Birder`` imports it on first use.
"""

__all__ = ["Birder"]


def __getattr__(name: str):
    if name == "Birder":
        from gpu_validation.optimizer import Birder

        return Birder
    raise AttributeError(f"module 'gpu_validation' has no attribute {name!r}")
