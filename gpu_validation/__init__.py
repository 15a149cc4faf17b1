"""Birder in torch over torch.distributed, regression-tested bit for bit against the NumPy reference.

``torch_birder`` holds Algorithm 1's numerics on tensors, ``comm`` the 1-bit all-reduce over process groups,
``hook`` the DDP communication hook and its state, ``validate`` the multi-rank comparison with ``birder_ref``,
``launch`` the local ranks, ``digests`` the committed per-step digests, ``bench`` the timings, ``cli`` the two
subcommands. See README.md beside this file.
"""
