"""The stored run that predictions' intervals read (``sim/presets/cross_validation.json``): the group
cross-validation of the public rows and the corpus with each source left out, measured once here so that no
prediction pays a refit (``sim.uncertainty.stored_intervals`` reads it). ``python -m sim.validation.stored``
regenerates it; ``validation_summary`` gives the fit (in-sample) and the cross-validated errors apart.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import sys
from functools import lru_cache
from pathlib import Path

from safeio.atomic import write_text
from sim.uncertainty import (
    CROSS_VALIDATION_FILE,
    INTERVAL_LEVEL,
    RESIDUALS,
    finite_json_value,
    log_ratio_quantiles,
    stored_inputs_digest,
    stored_intervals,
)
from sim.validation.corpus_setup import corpus_rows
from sim.validation.leave_one_source_out import CorpusValidation, corpus_validation
from sim.validation.paper import GPUS_PER_NODE, PUBLIC_CSV, compare, mape, rows, site_of
from sim.validation.site_fit import CrossValidation, group_cross_validation

COMMAND = "python -m sim.validation.stored"


def rows_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def corpus_digest(corpus) -> str:
    return hashlib.sha256(repr(tuple(corpus)).encode()).hexdigest()


def _stored_on_this_corpus() -> dict:
    """The stored run's ``intervals`` where it was made on the shipped corpus as it is now; else {}."""
    if CROSS_VALIDATION_FILE.exists():
        stored = json.loads(CROSS_VALIDATION_FILE.read_text()).get("intervals", {})
        if stored.get("corpus_sha256") == corpus_digest(corpus_rows()[0]):
            return stored
    return {}


def stored_step_jitter_fits() -> dict | None:
    """The per-step jitter's fits (``corpus_validation``'s summary ``step_jitter``) stored with the intervals,
    where they were made on the shipped corpus as it is now; else None (fitted anew)."""
    fits = _stored_on_this_corpus().get("summary", {}).get("step_jitter")
    return fits if fits and "fitted_without" in fits else None


def stored_calibration_extra() -> dict | None:
    """The first-contact rows that calibrated the stored intervals beside the corpus
    (``first_contact.calibration_rows``, as the stored run predicted them), where the stored run was made on the
    shipped corpus as it is now; else None."""
    return _stored_on_this_corpus().get("first_contact_calibration")


def intervals(loso: CorpusValidation, cross: CrossValidation, calibration_extra: dict | None = None) -> dict:
    """What ``sim.uncertainty.stored_intervals`` reads: the bounds per basis, with the digests of the data they
    were measured on."""
    corpus, _ = corpus_rows()
    site = [r for r in cross.rows if not r.left_out.startswith("network=")]
    sites = sorted({site_of(r.network) for r in site})
    return {"corpus": loso.corpus, "summary": loso.summary(),
            "table": loso.table(), "corpus_sha256": corpus_digest(corpus),
            "rows_sha256": rows_digest(PUBLIC_CSV), "inputs_sha256": stored_inputs_digest(), "level": INTERVAL_LEVEL,
            "site_profile": log_ratio_quantiles([math.log(r.published / r.predicted) for r in site]),
            "site_profile_by_site": {
                name: log_ratio_quantiles([math.log(r.published / r.predicted) for r in site
                                           if site_of(r.network) == name])
                for name in sites},
            "site_profile_rows": {name: sum(site_of(r.network) == name for r in site) for name in sites},
            "residuals": RESIDUALS, "measured_node": dict(loso.quantiles),
            "unmeasured_node": dict(loso.quantiles_unmeasured_node),
            "speedup_measured_node": dict(loso.speedup_quantiles),
            "speedup_unmeasured_node": dict(loso.speedup_quantiles_unmeasured_node),
            "speedup_methods": loso.speedup_methods(), "first_contact_calibration": calibration_extra}


def split_mape(cross: CrossValidation) -> dict:
    """The cross-validation's MAPE overall, over the groups a site's fit left out, and over networks left out."""
    site = [r for r in cross.rows if not r.left_out.startswith("network=")]
    generic = [r for r in cross.rows if r.left_out.startswith("network=")]
    return {"mape": cross.mape, "site_mape": mape(site) if site else cross.mape,
            "generic_mape": mape(generic) if generic else cross.mape}


def validation_summary(cross_validate: bool = True) -> dict:
    """The public rows predicted with the site profiles: ``fit_mape`` (in-sample: the sites' constants were fitted
    on these rows), ``cross_validated_mape`` (groups left out of the fit: an optimizer, a GPU count, a network),
    ``cross_validation`` (its detail per group; the stored measurement of these rows when there is one),
    ``corpus_validation`` (the corpus with each source left out: ``summary`` and per-group ``table``, as
    ``birder validate`` prints them) and ``rows``, as plain dicts (``as_dict()`` of the results)."""
    results = compare(rows())
    out = {"rows": [r.as_dict() for r in results], "fit_mape": mape(results),
           "fit_mape_multi_node": mape([r for r in results if r.gpus > GPUS_PER_NODE])}
    if cross_validate:
        cross = stored_cross_validation()
        split = split_mape(cross)
        out.update({"cross_validated_mape": cross.mape, "cross_validated_mape_site": split["site_mape"],
                    "cross_validated_mape_generic": split["generic_mape"], "cross_validation": cross.as_dict()})
        q = stored_intervals()
        out["corpus_validation"] = {"summary": q["summary"], "table": q["table"]}  # each source left out
    return out


@lru_cache(maxsize=1)
def stored_cross_validation() -> CrossValidation:
    """The group cross-validation of the public rows: the stored measurement when it was taken on the same rows
    (same SHA-256), else measured now, once per process."""
    if CROSS_VALIDATION_FILE.exists():
        stored = json.loads(CROSS_VALIDATION_FILE.read_text())
        if stored.get("rows_sha256") == rows_digest(PUBLIC_CSV):
            return CrossValidation.from_dict(stored["cross_validation"])
    return group_cross_validation()


def write_cross_validation() -> Path:
    """Measure the group cross-validation on the public rows and the corpus's intervals and store them (with the
    digests of the data they were measured on) for ``sim.uncertainty`` and ``validation_summary``."""
    from sim.validation.first_contact import calibration_rows

    cross = group_cross_validation()
    extra = calibration_rows()  # the first-contact rows already scored (their first contact logged)
    body = {"command": COMMAND, "rows_sha256": rows_digest(PUBLIC_CSV), **split_mape(cross),
            "cross_validation": cross.as_dict(),
            "intervals": intervals(corpus_validation(calibration_extra=extra), cross, extra)}
    return write_text(CROSS_VALIDATION_FILE, json.dumps(finite_json_value(body), indent=1, allow_nan=False) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=COMMAND, description="Measure the group cross-validation of the public "
                                     "rows and the corpus with each source left out, and store them for the "
                                     f"intervals of predictions ({CROSS_VALIDATION_FILE}).")
    parser.parse_args(argv)
    print(write_cross_validation())
    return 0


if __name__ == "__main__":
    sys.exit(main())
