"""Opt-in (``--parity``): bit-for-bit agreement with ``birder_ref.algorithm1`` fed the same draws (the reference's
promise: any two implementations fed the same draws agree bit for bit).

Not a claim of the paper: any rounding or a different but valid quantizer convention breaks it. It is kept apart
from the property checks, which never compare with the reference.
"""

from __future__ import annotations

import numpy as np

from proofs_checks.registry import Context, Outcome, check, verdict
from proofs_checks.target import read_state, same_bits, target_from_object
from proofs_checks.trajectories import SETTINGS, all_records


@check(
    "parity_birder_ref",
    "birder_ref's promise (not a claim of the paper): implementations fed the same draws agree bit for bit "
    "with birder_ref",
    "the 3 recorded trajectories replayed through birder_ref.algorithm1 from the same states; quantize on a sweep",
    needs=("quantize", "init", "step"),
    opt_in=True,
)
def parity(ctx: Context) -> Outcome:
    from birder_ref import algorithm1

    reference = target_from_object(algorithm1)
    rng = np.random.default_rng(3)
    y = rng.uniform(-1.5, 1.5, 4096).astype(np.float32)
    u = rng.random(4096, dtype=np.float32)
    if not same_bits(ctx.target.run_quantize(y, u).astype(np.float32), reference.run_quantize(y, u)):
        return verdict(False, "quantize differs from birder_ref.quantize on the same (y, u)")
    differing = []
    for rec in all_records(ctx):
        s = rec.setting
        prev = algorithm1.State(*(getattr(rec.prev, f).astype(np.float32) for f in
                                  ("m", "b_hat", "b", "e", "server_e")), rec.prev.t)
        u_bar, new = reference.run_step(prev, rec.grads, s.beta, s.eps, rec.u_worker, rec.u_server, rec.T0)
        differ = read_state(new, s.n, s.d).equals(rec.new)
        if not same_bits(u_bar, rec.u_bar) or differ:
            differing.append(f"{s.name} step {rec.new.t}" + (f" ({', '.join(differ)})" if differ else ""))
    total = sum(s.T for s in SETTINGS)
    return verdict(not differing, f"{total - len(differing)} of {total} steps identical" +
                   (f"; first differing: {differing[0]}" if differing else ""), f"{len(differing)} differ")
