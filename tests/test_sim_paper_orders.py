"""The order of optimizers in every multi-node group of the paper's rows, on its site profiles and on the generic
presets (sim.optimizer_order.order_check), and the sim README's table of it."""

from pathlib import Path

import pytest

from sim.validation import order as optimizer_order
from sim.validation import paper, site_fit

README = Path(__file__).resolve().parents[1] / "sim" / "README.md"


@pytest.fixture(scope="module")
def checks():
    table = paper.rows()
    return [optimizer_order.order_check(table, basis) for basis in optimizer_order.BASES]


def test_each_basis_predicts_every_row_on_its_own_clusters(checks):
    site, generic = checks
    assert {p.profile for p in site.predictions} == {"birder-paper-10gbe", "birder-paper-ib"}
    assert {p.profile for p in generic.predictions} == {"10gbe", "ib-hdr"}  # hardware presets, nothing fitted
    for check in checks:
        assert len(check.predictions) == len(paper.rows())
        assert [(o.network, o.gpus) for o in check.orders] == [
            (net, gpus) for net in ("10gbe", "ib-hdr") for gpus in (16, 32, 64)]  # one node is the calibration
        for o in check.orders:
            assert sorted(o.published_order) == sorted(o.predicted_order) == ["birder", "onebit-adam", "sgdm"]


def test_a_published_order_the_prediction_does_not_follow_is_counted_wrong(tmp_path, checks):
    """Swap two published multi-node throughputs: the predictions stay (they are calibrated on single-node rows
    alone), so the group whose published order changed must flip between right and wrong."""
    lines = paper.PUBLIC_CSV.read_text().splitlines()
    swapped = {"resnet50,32,10gbe,sgdm,32,4270": "resnet50,32,10gbe,sgdm,32,9416",
               "resnet50,32,10gbe,birder,32,9416": "resnet50,32,10gbe,birder,32,4270"}
    path = tmp_path / "swapped.csv"
    path.write_text("\n".join(swapped.get(line, line) for line in lines) + "\n")
    table = paper.rows(path)
    for before in checks:
        after = optimizer_order.order_check(table, before.basis)
        assert [p.predicted for p in after.predictions] == pytest.approx([p.predicted for p in before.predictions])
        flipped = [(a.network, a.gpus) for a, b in zip(after.orders, before.orders, strict=True) if a.same != b.same]
        assert flipped == [("10gbe", 32)]


def test_unknown_basis_is_refused():
    with pytest.raises(ValueError, match="unknown basis"):
        optimizer_order.order_check(paper.rows(), "fitted everywhere")


def test_sim_readme_prints_the_order_check_of_a_fresh_run(checks):
    text = README.read_text()
    block = text.split("tests/test_sim_paper_orders.py -->\n", 1)[1].split("\n<!-- end order check -->")[0]
    assert block == optimizer_order.order_check_markdown(checks)


@pytest.mark.parametrize("site", list(site_fit.FITTED))
def test_site_constants_are_the_fits_optimum(site):
    """sites.toml holds what `python -m sim.validation.site_fit` fits: no 2% step of one FITTED constant lowers the
    MAPE of the site's multi-node public rows (a share at its bound of 1 may only step down)."""
    from sim.hardware import SITES

    table = paper.rows()
    mine = [r for r in table if paper.site_of(r.network) == site and r.gpus > paper.GPUS_PER_NODE]
    stored = {k: SITES[site][k] for k in (*site_fit.FITTED[site], "incast_onset_bytes", "incast_certain_bytes")
              if k in SITES[site]}

    def error(constants):
        return paper.mape(paper.compare(mine, tweak=site_fit.constants_tweak({site: constants}), table=table))

    best = error(stored)
    for key in site_fit.FITTED[site]:
        for factor in (0.98, 1.02):
            assert error(stored | {key: stored[key] * factor}) >= best - 1e-12, (key, factor)
