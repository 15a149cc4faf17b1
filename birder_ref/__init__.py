"""The NumPy reference of Birder (Algorithm 1), its communication schedules, and its baselines.

Random draws are injected: any two implementations fed the same draws agree bit for bit.
"""

from birder_ref import algorithm1, hierarchical
from birder_ref.quantize import pack_signs, quantize, unpack_signs

__all__ = ["quantize", "pack_signs", "unpack_signs", "algorithm1", "hierarchical"]
