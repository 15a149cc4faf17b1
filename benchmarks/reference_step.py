"""Time one `algorithm1.step` (8 workers, d = 2**22) against a NumPy streaming pass over the same bytes.

The streaming pass reads what the step must read (m, b_hat, b, e, grads, U: six (n, d) float32 arrays, plus
server_e and V) and writes what it must write: the step is a pure function, so its new state (four (n, d)
arrays and server_e) lands in freshly allocated arrays, and the pass does the same (four array copies into new
arrays, which pays the same page faults, and two reductions). Both are timed in this run, best of several
repeats; the ratio is printed.
Peak memory of the step is measured with tracemalloc (NumPy reports its allocations to it).
"""

from __future__ import annotations

import argparse
import time
import tracemalloc

import numpy as np

from birder_ref import algorithm1


def best_time(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--log2-dim", type=int, default=22)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    n, d = args.workers, 2**args.log2_dim
    rng = np.random.default_rng(0)
    state = algorithm1.State(*(rng.standard_normal((n, d), dtype=np.float32) for _ in range(4)),
                             rng.standard_normal(d, dtype=np.float32), 5)
    state = algorithm1.State(state.m, np.abs(state.b_hat), np.abs(state.b), state.e * 0.1, state.server_e * 0.1, 5)
    grads = rng.standard_normal((n, d), dtype=np.float32)
    U = rng.random((n, d), dtype=np.float32)
    V = rng.random(d, dtype=np.float32)

    def stream():
        copies = [a.copy() for a in (state.m, state.b_hat, state.b, state.e, state.server_e)]
        grads.max(), U.max(), V.max()
        return copies

    def step():
        algorithm1.step(state, grads, 0.95, 1e-8, U, V)

    step(), stream()
    t_step, t_stream = best_time(step, args.repeats), best_time(stream, args.repeats)
    tracemalloc.start()
    step()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    array_bytes = n * d * 4
    moved = (6 + 4) * array_bytes + 4 * d * 4
    print(f"algorithm1.step, {n} workers, d = 2^{args.log2_dim}: {t_step * 1e3:.1f} ms")
    print(f"streaming pass over the same {moved / 2**20:.0f} MiB: {t_stream * 1e3:.1f} ms "
          f"({moved / t_stream / 1e9:.1f} GB/s)")
    print(f"ratio step / streaming pass: {t_step / t_stream:.2f} (target < 4)")
    print(f"peak memory of the step: {peak / array_bytes:.1f} (n, d) float32 arrays "
          f"(4 of them are the new state)")


if __name__ == "__main__":
    main()
