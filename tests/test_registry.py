"""The optimizer registry: a toy optimizer registered here reaches the CLI, the reference, the simulator, the
comparison and the report's scaling section with no other module touched; and every registered optimizer's spec is
consistent."""

import contextlib
import io
import json

import pytest

from birder import cli, comparison, report_grid, report_scaling
from birder.report_core import num
from birder.report_grid import ModelGrid, Setting
from birder_ref import baseline_schedules, driver, registry
from birder_ref.optimizers import SGDM
from birder_ref.registry import OptimizerSpec, StepKind
from birder_ref.schedules import Layout
from sim import workload

TOY = "toy-onebit-sgdm"


def toy_spec() -> OptimizerSpec:
    """SGD with momentum whose gradients travel as 1-Bit Adam's compressed all-reduce (a toy, for the test)."""
    return OptimizerSpec(
        TOY,
        schedule=lambda layout, dim, scheme=None, **options: baseline_schedules.compressed_allreduce(layout, dim, TOY),
        reference=lambda steps, **kw: SGDM(momentum=0.5, name=TOY, **kw),
        step_counts=lambda _optimizer, steps: (0, steps),
        learning_rate=0.3,
        step_kinds=lambda *_: (StepKind("1-bit", 1.0, "bucketed", False),),
        step_bytes_per_element=16.0,
        compression="quantize",
    )


@pytest.fixture
def toy():
    registry.register(toy_spec)
    try:
        yield registry.get(TOY)
    finally:
        registry.unregister(TOY)


def run_cli(*args) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli.main(list(args))
        except SystemExit as exit_info:
            code = exit_info.code
    return code, out.getvalue(), err.getvalue()


def test_a_registered_toy_reaches_the_cli_the_reference_the_simulator_the_comparison_and_the_report(toy, tmp_path):
    # the CLI: the parser is built after registering, and --optimizer offers and runs the toy
    code, out, _ = run_cli("predict", "--help")
    assert code == 0 and TOY in out
    code, out, err = run_cli("predict", "--model", "resnet50", "--nodes", "2", "--network", "10gbe",
                             "--optimizer", TOY, "--json")
    assert code == 0, err
    predicted = json.loads(out)
    onebit = workload.predict(workload_cluster(), model="resnet50", optimizer="onebit-adam",
                              warmup_fraction=0.0)
    # the toy moves 1-bit Adam's bytes on every step, bucketed: the same bytes per GPU as its compressed steps
    assert predicted["inter_node_bytes_per_gpu"] == pytest.approx(onebit.inter_node_bytes_per_gpu, rel=0.02)
    assert [s["kind"] for s in predicted["steps"]] == ["1-bit"]
    # the reference: its schedule, and its optimizer trains on the driver
    layout = Layout(2, 2)
    assert registry.optimizer_schedule(TOY, layout, 64) == baseline_schedules.compressed_allreduce(layout, 64, TOY)
    task = driver.problem("quadratic", dim=16)
    history = driver.train(task, toy.reference(50), layout, 50, 0.005, 0)
    assert history.losses[-1] < 0.5 * history.losses[0]
    # the comparison: trained with its own learning rate, its bytes from its schedule
    assert comparison.learning_rates()[TOY] == 0.3
    runs = comparison.optimizers(10)
    assert isinstance(runs[TOY], SGDM) and runs[TOY].name == TOY
    compressed_step = comparison._step_bytes(registry.optimizer_schedule("onebit-adam", comparison.LAYOUT,
                                                                          comparison.dim()))
    assert comparison.bytes_per_gpu(TOY, runs[TOY], 10) == (10 * compressed_step[0], 10 * compressed_step[1])
    assert 0 < compressed_step[1] < comparison.bytes_per_gpu("adam", runs["adam"], 1)[1] / 3
    # the report's scaling section: predicted and tabled with the others, a 1-bit optimizer and so no baseline
    assert report_grid.section_optimizers() == (*registry.SIMULATED[:-1], TOY)
    assert TOY not in report_grid.section_optimizers(quick=True)
    from sim import api, plots

    shown = ("sgdm", TOY)
    predictions = api.sweep_grid("resnet50", [1, 2], ["10gbe"], list(shown), batch_per_gpu=32)
    section = ModelGrid(Setting("resnet50", "ResNet-50", 32, "built-in"), "built-in", shown, ("10gbe",), (1, 2),
                        tuple(predictions))
    assert section.baselines == ("sgdm",)
    table = report_scaling._model_section(section, tmp_path, plots)
    assert f"| 10gbe | {TOY} | {num(predictions[2]['throughput'])} |" in "\n".join(table)


def workload_cluster():
    from sim.hardware import cluster

    return cluster("10gbe", 2)


def test_unregistering_removes_the_toy_everywhere():
    registry.register(toy_spec)
    registry.unregister(TOY)
    assert TOY not in registry.names() and TOY not in workload.OPTIMIZERS
    code, _, err = run_cli("predict", "--model", "resnet50", "--optimizer", TOY)
    assert code == 2 and "invalid choice" in err
    with pytest.raises(ValueError, match=TOY):
        registry.optimizer_schedule(TOY, Layout(1, 2), 8)
    with pytest.raises(ValueError, match=TOY):
        registry.unregister(TOY)


def test_a_name_registers_once_and_a_spec_must_be_an_optimizer_spec(toy):
    with pytest.raises(ValueError, match="registered already"):
        registry.register(toy_spec)
    with pytest.raises(ValueError, match="OptimizerSpec"):
        registry.register(lambda: "not a spec")
    with pytest.raises(ValueError, match="compression"):
        OptimizerSpec("x", toy.schedule, toy.reference, toy.step_counts, 0.1, compression="zip")


@pytest.mark.parametrize("name", registry.names())
def test_every_spec_runs_its_reference_and_counts_each_step_once(name):
    spec = registry.get(name)
    optimizer = spec.reference(40)
    assert optimizer.name == name
    full, onebit = spec.step_counts(optimizer, 40)
    assert 0 <= full and 0 <= onebit and full + onebit <= 40
    assert (onebit > 0) <= spec.compressed  # an uncompressed optimizer sends no 1-bit step
    if spec.step_kinds is not None:
        kinds = spec.step_kinds("resnet50", None, None)
        assert sum(k.share for k in kinds) == pytest.approx(1.0)
        assert spec.step_bytes_per_element > 0
    sched = spec.schedule(Layout(2, 2), 64)
    assert sched.layout == Layout(2, 2) and sched.dim == 64 and sum(ph.n_rounds for ph in sched.phases) > 0
