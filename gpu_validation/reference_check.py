"""``birder_ref`` beside a ``Birder``, step by step, bit for bit: how the habits checks, the Lightning and
Accelerate examples and their tests judge an optimizer they did not drive themselves.

``Reference(opt)`` hooks into ``opt.step()``: before it, every rank's ``.grad`` (what step() is about to see)
and the parameters are gathered; after it, ``birder_ref.algorithm1.step`` runs on those gradients with the same
draws, line 16 per parameter with its group's lr and weight decay, and the elements that differ on any rank are
counted (``mismatched``; no tolerance). ``ranks_identical`` says whether every rank holds the same parameters and
buffers.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from birder_ref import algorithm1, schemes
from birder_ref.draws import server_uniforms, worker_uniforms
from birder_ref.update import apply_update
from gpu_validation import comm
from gpu_validation.optimizer import Birder
from gpu_validation.records import bits_checksum


def _gather(x: torch.Tensor) -> np.ndarray:
    return comm.all_gather_rows(x.contiguous(), dist.group.WORLD, dist.get_world_size()).numpy()


class Reference:
    """``birder_ref`` beside a ``Birder``: before each step() it gathers every rank's ``.grad`` (what step() is
    about to see) and the parameters; after it, it runs ``algorithm1.step`` on those gradients (node means by
    ``schemes.worker_gradients``) with the same draws, line 16 per parameter with its group's lr and weight decay
    (a parameter frozen since Birder was built must not move), and counts the elements that differ on any rank."""

    def __init__(self, opt: Birder):
        self.opt, self.mismatched, self.steps = opt, 0, 0
        self.state = algorithm1.init(opt.topology.n_workers, opt.dim)
        opt.register_step_pre_hook(self._before)
        opt.register_step_post_hook(self._after)

    def _flat_grads(self) -> torch.Tensor:
        """Every rank's g_t as step() takes it: ``.grad`` divided by the scale a ``GradScaler`` still left in it
        (``grad_scale``, set by its step(): Birder divides in float32, so does this)."""
        flat = torch.cat([torch.zeros(p.numel()) if p.grad is None or not p.requires_grad
                          else p.grad.detach().reshape(-1).float() for p in self.opt._params])
        scale = getattr(self.opt, "grad_scale", None)
        return flat if scale is None else flat / scale.to(dtype=torch.float32, device=flat.device)

    def _flat_params(self) -> torch.Tensor:
        return torch.cat([p.detach().reshape(-1).double() for p in self.opt._params])

    def _before(self, opt, args, kwargs):
        """Keep the parameters; gather the gradients now, or, for ``step(closure)``, once the closure has run
        (step() sees what it leaves in ``.grad``)."""
        self.before, self.t_before = self._flat_params().numpy(), opt.t
        closure = args[1] if len(args) > 1 else kwargs.get("closure")  # args[0]: the optimizer
        if closure is None:
            self.grads = _gather(self._flat_grads())
            return None

        def closure_then_gather():
            loss = closure()
            self.grads = _gather(self._flat_grads())
            return loss

        return (args[0], closure_then_gather), {}

    def _after(self, opt, args, kwargs) -> None:
        after = _gather(self._flat_params())
        if opt.t == self.t_before:  # a skipped step (non-finite gradients, a scaler's back-off): nothing moves
            self.mismatched += int((after != self.before).any(axis=0).sum())
            self.steps += 1
            return
        topo, t = opt.topology, self.state.t + 1
        world = dist.get_world_size()
        by_node = self.grads.reshape(topo.n_nodes if topo.scheme == "hierarchical" else world, -1, opt.dim)
        worker = schemes.worker_gradients(topo.scheme, by_node)
        u_bar, self.state = algorithm1.step(self.state, worker, opt.beta, opt.eps,
                                            worker_uniforms(opt.seed, t, self.state.n_workers, opt.dim),
                                            server_uniforms(opt.seed, t, opt.dim))
        expected = self.before.copy()
        for p, start, g in zip(opt._params, opt.offsets, opt._group_of, strict=True):
            if p.requires_grad:
                span, group = slice(start, start + p.numel()), opt.param_groups[g]
                lr, decay = group["lr"], group["weight_decay"]
                if p.dtype == torch.float64:  # line 16's three operations in the parameter's precision
                    x = self.before[span]
                    expected[span] = x - lr * (u_bar[span].astype(np.float64) + decay * x)
                else:
                    expected[span] = apply_update(self.before[span], u_bar[span], lr, decay)
        self.mismatched += int((after != expected).any(axis=0).sum())
        self.steps += 1


def ranks_identical(module: nn.Module) -> bool:
    """Whether every rank holds the same parameters and buffers, bit for bit (one all-gather of a checksum)."""
    tensors = [t for t in (*module.parameters(), *module.buffers()) if t.numel()]
    return bool(len(set(_gather(bits_checksum(tensors).reshape(1)).reshape(-1).tolist())) == 1)
