"""The checks section of `birder report`: `proofs_checks`' own section, and its totals for the terminal summary."""

from __future__ import annotations

import re
from pathlib import Path

from birder.report_core import Section

# the totals line of ``proofs_checks.runner.table``:
# "TARGET: N pass, M fail, W warnings, B not judged, K not applicable, J measured; wall time ..."
TOTALS = re.compile(r"^(?P<target>\S+): (?P<passed>\d+) pass, (?P<failed>\d+) fail,(?: (?P<warned>\d+) warnings,)?"
                    r"(?: (?P<blocked>\d+) not judged,)? (?P<na>\d+) not applicable", re.MULTILINE)


def section(outdir: Path, quick: bool) -> Section:
    from proofs_checks.report import section as checks_section

    markdown = checks_section(outdir, quick)
    totals = TOTALS.search(markdown)
    if totals is None:  # never passes for a verdict: says so (tests/test_report.py reads a real totals line)
        return Section(markdown, {"checks": "VERDICTS UNREAD: the checks section's totals line has changed; "
                                            "read the checks section"})
    blocked = int(totals["blocked"] or 0)
    verdict = "all hold" if totals["failed"] == "0" and blocked == 0 else "SOME FAIL"
    warned = int(totals["warned"] or 0)
    line = (f"{totals['passed']} checks pass, {totals['failed']} fail, {blocked} not judged, {totals['na']} not "
            f"applicable on {totals['target']} ({verdict})" + (f"; {warned} warnings (interface robustness only)"
                                                                if warned else ""))
    return Section(markdown, {"checks": line})
