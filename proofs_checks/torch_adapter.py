"""The name earlier READMEs gave the torch adapter (``birder check --impl proofs_checks.torch_adapter``); it lives
in ``gpu_validation.check_adapter``, beside the torch code it adapts. Nothing in the suite imports this module."""

from gpu_validation.check_adapter import init, quantize, step

__all__ = ["init", "quantize", "step"]
