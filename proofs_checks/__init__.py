"""proofs_checks: every claim of the Birder paper as a check that can fail, runnable against any implementation.

An implementation is judged by the paper's properties alone (exact probabilities, identities, bounds,
determinism, the convergence bound), never by comparison with ``birder_ref``, which is one implementation among
others here. One property is held more strictly than the paper states it: Eq. 4's |m/b| <= 1, exact in the paper,
is required bit for bit of the stored float32 m and b (``ratio_bound``, and ``eq14_decomposition``'s facts), which
asks an implementation to compute m and b with the same operations in the same order (a lerp for m fails it).

Use it from the command line (``birder check [--impl MODULE[:OBJECT]] [--json]``), from Python::

    from proofs_checks import load_target, run_checks
    report = run_checks(load_target("mypackage.birder"))

or from another project's pytest suite (``proofs_checks.pytest_plugin.claim_tests``).
"""

from proofs_checks.registry import CHECKS, Context
from proofs_checks.runner import Report, Result, run_checks, select, table
from proofs_checks.target import Target, load_target

__all__ = ["CHECKS", "Context", "Report", "Result", "Target", "load_target", "run_checks", "select", "table"]
