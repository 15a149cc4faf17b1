"""The scheme checks judge a third-party implementation by the paper alone: only the schemes it lists, volumes by
Section 4's formulas (any padding below 32 elements per rank), and they reject wrong volumes and wrong node means.

The third parties here are birder_ref's numerics and schemes behind a plain namespace (so the suite does not know
them as the reference), listing fewer schemes, or with one thing broken.
"""

from types import SimpleNamespace

import numpy as np
import pytest

from birder_ref import algorithm1
from birder_ref import schemes as reference_schemes
from proofs_checks.runner import run_checks
from proofs_checks.schemes import PAD_PER_RANK, exact_node_gradients, node_mean, section4_byte_ranges
from proofs_checks.target import load_target

SCHEME_CHECKS = ["schemes_equal_algorithm1", "section4_volumes"]


def third_party(listed: tuple[str, ...], scheme_step=reference_schemes.step) -> SimpleNamespace:
    return SimpleNamespace(quantize=algorithm1.quantize, init=algorithm1.init, step=algorithm1.step,
                           schemes=SimpleNamespace(SCHEMES=listed, step=scheme_step))


def uncompressed_all_to_all(scheme, state, grads, *args):
    """Reports the inter-node all-to-all at 32 bits an element: Section 4's step (iii) 1) sends 1 bit."""
    u_bar, new_state, log = reference_schemes.step(scheme, state, grads, *args)
    moved = dict(log.bytes_per_gpu, inter_all_to_all=32 * log.bytes_per_gpu["inter_all_to_all"])
    return u_bar, new_state, SimpleNamespace(bytes_per_gpu=moved)


def node_sum_not_mean(scheme, state, grads, *args):
    """Step (i) reduces to the node's sum instead of its mean."""
    return reference_schemes.step(scheme, state, grads * np.float32(grads.shape[1]), *args)


def run(impl) -> dict:
    return {r.name: r for r in run_checks(load_target(impl), names=SCHEME_CHECKS, progress=False).results}


def test_a_target_offering_only_hierarchical_is_judged_on_it_alone_without_birder_refs_schedules():
    results = run(third_party(("hierarchical",)))
    assert [r.status for r in results.values()] == ["pass", "pass"]
    assert "schedules" not in results["section4_volumes"].detail
    assert "of hierarchical equal" in results["schemes_equal_algorithm1"].detail


def test_schemes_without_a_formula_in_the_paper_are_not_applicable_to_volumes():
    results = run(third_party(("ring",)))
    assert results["section4_volumes"].status == "n/a"
    assert results["schemes_equal_algorithm1"].status == "pass"


def test_a_32_bit_all_to_all_breaks_section4():
    results = run(third_party(("hierarchical",), uncompressed_all_to_all))
    assert results["section4_volumes"].status == "fail"
    assert "inter_all_to_all" in results["section4_volumes"].detail
    assert results["schemes_equal_algorithm1"].status == "pass"  # the numerics are right


def test_a_node_sum_instead_of_the_mean_breaks_the_equality_with_algorithm1():
    results = run(third_party(("hierarchical",), node_sum_not_mean))
    assert results["schemes_equal_algorithm1"].status == "fail"


@pytest.mark.parametrize("n_nodes, gpus_per_node", [(2, 2), (1, 3), (3, 1), (4, 2)])
def test_the_allowed_ranges_contain_section4_at_every_padding_and_exclude_twice_it(n_nodes, gpus_per_node):
    """Any padded length D in [d, d + 32p) on whole 8p multiples (birder_ref's) or 32p multiples gives bytes inside
    the ranges; doubling any nonzero phase falls outside them."""
    d, p = 4099, n_nodes * gpus_per_node
    ranges = section4_byte_ranges(n_nodes, gpus_per_node, d)
    n, m = n_nodes, gpus_per_node
    for unit in (8 * p, 32 * p):
        P = 4 * (-(-d // unit) * unit)
        assert P < 4 * (d + PAD_PER_RANK * p)
        exact = {"intra_reduce_scatter": (m - 1) * P // m, "inter_all_to_all": (n - 1) * P // (32 * m * n),
                 "inter_all_gather": (n - 1) * P // (32 * m * n), "intra_all_gather": (m - 1) * P // (32 * m)}
        for phase, sent in exact.items():
            low, high = ranges[phase]
            assert low <= sent <= high, (phase, sent, ranges[phase])
            assert sent == 0 or not low <= 2 * sent <= high


def test_node_means_are_exact_whatever_the_summation_order():
    grads = exact_node_gradients(np.random.default_rng(0), 3, 3, 50)
    reversed_order = grads[:, ::-1].astype(np.float32)
    float32_sequential = reversed_order[:, 0] + reversed_order[:, 1] + reversed_order[:, 2]
    assert np.array_equal(float32_sequential / np.float32(3), node_mean(grads))
    assert np.array_equal(node_mean(grads).astype(np.float64) * 3, grads.astype(np.float64).sum(axis=1))


MODULE_WITH_SCHEMES = '''
from birder_ref import schemes as _theirs
from birder_ref.algorithm1 import init, quantize, step


class schemes:  # as docs/check_interface.md describes: an attribute `schemes` of the module given to --impl
    SCHEMES = ("hierarchical", "ring")

    @staticmethod
    def step(scheme, state, grads, beta, eps, u_worker, u_server, T0=None):
        return _theirs.step(scheme, state, grads, beta, eps, u_worker, u_server, T0)
'''


def test_a_module_file_with_a_schemes_attribute_has_its_listed_schemes_judged(tmp_path):
    """The documented hook: a file given to --impl with a module attribute `schemes` (SCHEMES and step)."""
    path = tmp_path / "with_schemes.py"
    path.write_text(MODULE_WITH_SCHEMES)
    results = run(str(path))
    assert [r.status for r in results.values()] == ["pass", "pass"], [r.detail for r in results.values()]
    assert "of hierarchical, ring equal" in results["schemes_equal_algorithm1"].detail
