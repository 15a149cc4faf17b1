"""The checks section of `birder report`: `proofs_checks`' own section, and its totals for the terminal summary."""

from __future__ import annotations

import re
from pathlib import Path

from birder.report import Section

# the totals line of ``proofs_checks.runner.table``: "TARGET: N pass, M fail, K not applicable, J measured; ..."
TOTALS = re.compile(r"^(?P<target>\S+): (?P<passed>\d+) pass, (?P<failed>\d+) fail, (?P<na>\d+) not applicable",
                    re.MULTILINE)


def section(outdir: Path, quick: bool) -> Section:
    from proofs_checks.report import section as checks_section

    markdown = checks_section(outdir, quick)
    totals = TOTALS.search(markdown)
    if totals is None:
        line = "run; see the checks section of the report for the verdicts"
    else:
        verdict = "all hold" if totals["failed"] == "0" else "SOME FAIL"
        line = (f"{totals['passed']} of the paper's claims pass, {totals['failed']} fail, {totals['na']} not "
                f"applicable on {totals['target']} ({verdict})")
    return Section(markdown, {"checks": line})
