"""The `birder report` section: the property table for birder_ref, and Theorem 1's measured rate vs its bound."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from proofs_checks import structure, theorem  # noqa: E402
from proofs_checks.registry import Context  # noqa: E402
from proofs_checks.runner import run_checks, select, table  # noqa: E402
from proofs_checks.target import load_target  # noqa: E402

PLOT = "proofs_theorem1.png"


def plot_theorem1(run: dict, path: Path) -> None:
    C1, C2 = theorem.printed_constants()
    T = np.array(theorem.CHECKPOINTS)
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.loglog(T, [run["mean_sq"][t] for t in T], "o-", label="measured E[X_T^2] (4096 seeds)")
    ax.loglog(T, theorem.bound(T, C1, C2), "k--", label="Eq. 6 bound, paper's C1, C2")
    ax.axhline(1.0, color="grey", lw=0.8, label="largest possible value")
    ax.set_xlabel("T (steps)")
    ax.set_ylabel("E[((1/T) sum |f'(x_t)|)^2]")
    ax.set_title("Theorem 1 on a non-convex problem (birder_ref)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def section(outdir: Path, quick: bool, ctx: Context | None = None) -> str:
    """Run the whole suite on birder_ref.algorithm1 (quick mode leaves out the structural runs, ``structure.SLOW``);
    ``ctx``, a Context of the reference whose shared runs are reused (tests pass the pytest plugin's)."""
    ctx = ctx or Context(load_target())
    target = ctx.target
    names = [c.name for c in select() if not (quick and c.name in structure.SLOW)]  # quick: seconds, not tens
    report = run_checks(target, names=names, progress=False, ctx=ctx)
    Path(outdir).mkdir(parents=True, exist_ok=True)
    plot_theorem1(theorem.theorem_run(ctx), Path(outdir) / PLOT)
    verdict = "every check holds" if report.passed else "SOME CHECKS FAIL"
    return "\n".join([
        "## The paper's claims as checks (`birder check`)",
        "",
        f"`birder check` judges an implementation by the paper's properties alone; on `{report.target}` "
        f"{verdict} ({report.seconds:.1f} s). Run it on your own code with `birder check --impl MODULE[:OBJECT]`.",
        "",
        table(report, markdown=True),
        "",
        f"![Theorem 1: measured vs bound]({PLOT})",
        "",
    ])
