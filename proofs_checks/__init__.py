"""proofs_checks: every claim of the Birder paper as a check that can fail, runnable against any implementation.

An implementation is judged by the paper's properties alone (exact probabilities, identities, bounds,
determinism, the convergence bound), never by comparison with ``birder_ref``, which is one implementation among
others here. Each check is a claim of the paper (``kind="paper"``) or a clause of the interface
(``kind="contract"``: dtypes, shapes, purity, aliasing, the eps convention, float32 |m| <= b), and each root
cause is reported once (a check resting on a failed one is "not judged"). Each check has a severity: "error" (the
algorithm is wrong: exit 1) or "warning" (the interface's robustness only: exit 0 unless ``--strict``).
``template.py`` is a minimal correct implementation (``birder check --template``); ``mutants.py``,
``mutants_regimes.py``, ``mutants_sampled.py`` and ``mutants_structure.py`` are wrong ones the suite must reject, and
correct alternatives it must accept. The checks of Algorithm 1's lines run over fixed regimes and a seeded,
stratified sample of the settings space (``trajectories.SETTINGS``), and again over the shapes where ports switch
paths and over call histories (``structure.py``, with its metamorphic relations); the contract's call conventions,
input layouts and independent states are checked in ``conventions.py``.

Use it from the command line (``birder check [--impl MODULE[:OBJECT] | path/to/impl.py] [--json]``), from Python::

    from proofs_checks import load_target, run_checks
    report = run_checks(load_target("mypackage.birder"))

or from another project's pytest suite (``proofs_checks.pytest_plugin.claim_tests``).
"""

from proofs_checks.registry import CHECKS, Context
from proofs_checks.runner import Report, Result, run_checks, select, table
from proofs_checks.target import Target, load_target

__all__ = ["CHECKS", "Context", "Report", "Result", "Target", "load_target", "run_checks", "select", "table"]
