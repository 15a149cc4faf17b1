"""The Birder paper's stated claims about its throughputs (sim/validation/birder_paper_claims.toml) and their
check against the simulator's predictions (sim.paper_claims.claim_check)."""

import tomllib
from dataclasses import replace
from pathlib import Path

import pytest

from birder.cli import main
from sim.validation import claims as paper_claims
from sim.validation import order as optimizer_order
from sim.validation import paper, site_fit

GOOD = """[[claim]]
id = "bert-grows"
lines = [211]
states = "Birder's throughput grows with GPUs"
quantity = "growth"
model = "bert-base"
batch_per_gpu = 3
network = "10gbe"
optimizer = "birder"
gpus = [8, 16]
low = 1.0
"""


def test_the_shipped_claims_load_with_their_paper_lines():
    claims = paper_claims.claims()
    assert len(claims) == len(tomllib.loads(paper_claims.CLAIMS_TOML.read_text())["claim"]) >= 15
    assert {c.quantity for c in claims} == set(paper_claims.CLAIM_QUANTITIES)
    for c in claims:
        assert c.lines and (c.low is not None or c.high is not None)
    stated = {c.id: c for c in claims}["bert-10gbe-birder-speedup-64"]
    assert (stated.value, stated.at_gpus, stated.lines) == (6.26, 64, (17, 45))
    assert (stated.low, stated.high) == pytest.approx((6.26 * 0.85, 6.26 * 1.15))


@pytest.mark.parametrize("edit, message", [
    (lambda t: t.replace('quantity = "growth"', 'quantity = "fastest"'), "unknown quantity"),
    (lambda t: t.replace("gpus = [8, 16]", "gpus = [8, 12]"), "whole numbers of 8-GPU nodes"),
    (lambda t: t.replace("gpus = [8, 16]", "gpus = [16, 8]"), "increasing"),
    (lambda t: t.replace("gpus = [8, 16]", "gpus = [16]"), "at least two GPU counts"),
    (lambda t: t.replace("low = 1.0", ""), "value and tolerance, or as low"),
    (lambda t: t.replace("low = 1.0", "low = 1.0\nvalue = 2.0\ntolerance = 0.1"), "value and tolerance, or as low"),
    (lambda t: t.replace("low = 1.0", "low = 2.0\nhigh = 1.0"), "not a range"),
    (lambda t: t.replace('model = "bert-base"', 'model = "bert-huge"'), "unknown model"),
    (lambda t: t.replace('network = "10gbe"', 'network = "birder-paper-ib"'), "unknown network"),
    (lambda t: t.replace("batch_per_gpu = 3", 'batch_per_gpu = "3"'), "batch_per_gpu must be a int"),
    (lambda t: t.replace("low = 1.0", 'low = 1.0\nbaseline = "adam"'), "a baseline belongs to"),
    (lambda t: t.replace("states =", "said ="), "unknown keys said; missing keys states"),
    (lambda t: t + t, "ids given twice: bert-grows"),
    (lambda t: t.replace("[[claim]]", "[claim]"), r"expected \[\[claim\]\] tables"),
    (lambda t: t.replace("lines = [211]", "lines = [211"), "not TOML"),
])
def test_a_bad_claim_is_one_value_error_naming_it(tmp_path, edit, message):
    path = tmp_path / "claims.toml"
    path.write_text(GOOD)
    assert paper_claims.claims(path)[0].id == "bert-grows"
    path.write_text(edit(GOOD))
    with pytest.raises(ValueError, match=message) as error:
        paper_claims.claims(path)
    assert str(path) in str(error.value)


def test_the_verdict_flips_where_the_prediction_crosses_the_stated_range():
    """The real predicted speed-up of Birder over BertAdam at 64 GPUs on the paper's 10 GbE cluster, against a
    range whose edge sits just below and just above it."""
    table = paper.rows()
    claim = {c.id: c for c in paper_claims.claims()}["bert-10gbe-birder-speedup-64"]
    claim = replace(claim, gpus=(64,), at_gpus=None, value=None)
    basis = optimizer_order.BASES[0]
    predicted = paper_claims.claim_verdict(replace(claim, low=None, high=1e9), table, basis).predicted
    by_hand = [paper_claims.claim_prediction(table, basis, "bert-base", 3, "10gbe", opt, 64).throughput
               for opt in ("birder", "adam")]
    assert predicted == pytest.approx(by_hand[0] / by_hand[1], rel=1e-12) and predicted > 1
    for low, holds in ((predicted * (1 - 1e-9), True), (predicted * (1 + 1e-9), False)):
        verdict = paper_claims.claim_verdict(replace(claim, low=low, high=None), table, optimizer_order.BASES[0])
        assert verdict.holds is holds
        assert ("DOES NOT HOLD" in verdict.line()) is not holds


def test_the_check_predicts_on_the_basis_it_names():
    """The generic presets and the site profiles give different predictions for the same claim."""
    table = paper.rows()
    claim = {c.id: c for c in paper_claims.claims()}["bert-ib-birder-speedup"]
    site, generic = (paper_claims.claim_verdict(claim, table, basis).predicted for basis in optimizer_order.BASES)
    assert site != pytest.approx(generic, rel=1e-3)


def test_validate_refuses_a_bad_claims_file_in_one_line(tmp_path, capsys):
    path = tmp_path / "claims.toml"
    path.write_text(GOOD.replace('quantity = "growth"', 'quantity = "fastest"'))
    assert main(["validate", "--no-cross-validation", "--claims", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "unknown quantity" in err


def test_sim_readme_prints_the_claims_check_of_a_fresh_run():
    text = (Path(__file__).resolve().parents[1] / "sim" / "README.md").read_text()
    block = text.split("tests/test_sim_paper_claims.py -->\n", 1)[1].split("\n<!-- end claims check -->")[0]
    table = paper.rows()
    checks = [paper_claims.claim_check(table, basis) for basis in optimizer_order.BASES]
    assert block == paper_claims.claims_markdown(checks)


def test_other_site_constants_move_the_claims_they_touch_only():
    """A tweak of the InfiniBand site's constants (as the fit applies them) moves the InfiniBand claim's prediction
    and leaves a 10 GbE claim's as it was."""
    table = paper.rows()
    by_id = {c.id: c for c in paper_claims.claims()}
    tweak = site_fit.constants_tweak({"birder-paper-ib": {"efficiency": 0.5}})
    for claim_id, moves in (("bert-ib-birder-speedup", True), ("bert-10gbe-birder-grows", False)):
        before, after = (paper_claims.claim_verdict(by_id[claim_id], table, optimizer_order.BASES[0], t).predicted
                         for t in (None, tweak))
        assert (after != pytest.approx(before, rel=1e-6)) is moves


def test_the_claims_about_public_rows_hold_on_the_published_throughputs():
    """Where every configuration a claim reads is a public row (ResNet-50 at 32 per GPU), the published
    throughputs themselves must satisfy it: the claim is encoded as the paper states it."""
    table = {(r.model, r.batch_per_gpu, r.network, r.optimizer, r.gpus): r for r in paper.rows()}
    public = []
    for claim in paper_claims.claims():
        def published(optimizer, network, gpus, claim=claim):
            return table[claim.model, claim.batch_per_gpu, network, optimizer, gpus]
        try:
            value, at = paper_claims.claim_quantity(claim, published)
        except KeyError:  # a held-out configuration
            continue
        public.append(claim.id)
        assert claim.holds(value, at), (claim.id, value, at)
    assert public == ["resnet50-32-10gbe-birder-speedup-64", "resnet50-32-ib-birder-speedup",
                      "resnet50-32-birder-10gbe-matches-sgdm-ib"]


def test_the_verdict_flips_where_a_faster_link_carries_the_prediction_across_the_claim():
    """The InfiniBand cluster's payload efficiency swept from 5% to all of the line rate: the baseline's
    all-reduce gets faster, so Birder's predicted lead shrinks, crossing the stated 2.85x (+-15%) band; the verdict
    holds exactly while the prediction is inside it."""
    table = paper.rows()
    claim = {c.id: c for c in paper_claims.claims()}["bert-ib-birder-speedup"]
    verdicts = [paper_claims.claim_verdict(claim, table, optimizer_order.BASES[0],
                                       site_fit.constants_tweak({"birder-paper-ib": {"efficiency": e}}))
                for e in (0.05, 0.1, 0.2, 0.35, 0.5, 0.7, 1.0)]
    speedups = [v.predicted for v in verdicts]
    assert speedups == sorted(speedups, reverse=True) and speedups[0] > claim.high and speedups[-1] < claim.low
    assert [v.holds for v in verdicts] == [claim.low <= s <= claim.high for s in speedups]
    assert any(v.holds for v in verdicts)
