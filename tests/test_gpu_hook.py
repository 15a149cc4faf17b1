"""The DDP hook's state in one process: a one-rank gloo job against Algorithm 1, and state_dict's refusals."""

import io

import numpy as np
import pytest
import torch
from torch import nn

from birder_ref import algorithm1, schemes
from birder_ref.draws import server_uniforms, worker_uniforms
from birder_ref.schedules import Layout
from gpu_validation import comm
from gpu_validation.hook import BirderState, BirderUpdate, birder_hook
from gpu_validation.validate import Config, Reference, batch, make_model


def _lone_topology(scheme: str = "hierarchical") -> comm.Topology:
    return comm.Topology(scheme, Layout(1, 1), 0, None, None)


def test_one_rank_ddp_equals_algorithm1_through_a_bucket_rebuild_and_a_reload(one_rank):
    """Iteration 1 has one bucket, then DDP rebuilds them: state must carry over exactly, and survive a reload."""
    lr, seed = 0.01, 5
    model = make_model(seed)
    state = BirderState(model.parameters(), comm.make_topology("flat", 1, 1), seed=seed)
    ddp = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.0003)
    ddp.register_comm_hook(state, birder_hook)
    optimizer = BirderUpdate(model.parameters(), lr, hook_state=state)
    ref, x = algorithm1.init(1, state.dim), torch.cat([p.detach().reshape(-1) for p in model.parameters()]).numpy()
    layouts = []
    for t in range(1, 5):
        if t == 3:  # reload the state mid-run, as after a restart, through torch.save / a safe torch.load
            file = io.BytesIO()
            torch.save(state.state_dict(), file)
            file.seek(0)
            state.load_state_dict(torch.load(file, weights_only=True))
        inputs, targets = batch(seed, t, 0)
        optimizer.zero_grad()
        nn.functional.mse_loss(ddp(inputs), targets).backward()
        grad = np.concatenate([p.grad.reshape(-1).numpy() for p in model.parameters()])
        local = _local_gradients(model, inputs, targets)
        u_bar, ref = algorithm1.step(ref, local[None], 0.95, 1e-8, worker_uniforms(seed, t, 1, state.dim),
                                     server_uniforms(seed, t, state.dim))
        np.testing.assert_array_equal(grad, u_bar)
        optimizer.step()
        x = x - u_bar * lr
        np.testing.assert_array_equal(torch.cat([p.detach().reshape(-1) for p in model.parameters()]).numpy(), x)
        layouts.append(len(state.buckets))
    assert layouts[0] == 1 and layouts[-1] > 1, "the test must cross DDP's bucket rebuild"
    final = state.state_dict()
    assert final["t"] == ref.t == 4
    for name, ref_name in (("m", "m"), ("b_hat", "b_hat"), ("b", "b"), ("e", "e")):
        np.testing.assert_array_equal(final[name].numpy(), getattr(ref, ref_name)[0])
    np.testing.assert_array_equal(final["server_error"].numpy(), ref.server_e)


def _local_gradients(model, inputs, targets) -> np.ndarray:
    """The same loss's gradient without DDP (one rank: DDP's bucket holds exactly this)."""
    clone = make_model(0)
    clone.load_state_dict(model.state_dict())
    nn.functional.mse_loss(clone(inputs), targets).backward()
    return np.concatenate([p.grad.reshape(-1).numpy() for p in clone.parameters()])


def test_state_dict_round_trip_keeps_every_piece():
    state = BirderState(make_model(0).parameters(), _lone_topology(), seed=3)
    saved = state.state_dict()
    saved = {**saved, "t": 7, "skipped_steps": 2,
             **{k: torch.arange(state.dim, dtype=torch.float32) * (i + 1) for i, k in enumerate(("m", "b_hat", "b"))},
             "e": torch.linspace(-2, 2, state.dim), "server_error": torch.linspace(1.5, -1.5, state.dim)}
    fresh = BirderState(make_model(0).parameters(), _lone_topology(), seed=3)
    fresh.load_state_dict(saved)
    again = fresh.state_dict()
    assert set(again) == set(saved)
    for key, value in saved.items():
        assert torch.equal(again[key], value) if isinstance(value, torch.Tensor) else again[key] == value, key


@pytest.mark.parametrize("change,message", [
    (lambda s: s.pop("e"), "missing keys \\['e'\\]"),
    (lambda s: s.update(worker_error=s["e"]), "unknown keys \\['worker_error'\\]"),
    (lambda s: s.update(seed=4), "seed=4"),
    (lambda s: s.update(scheme="flat"), "scheme='flat'"),
    (lambda s: s.update(server_error=torch.zeros(3)), "server_error"),
    (lambda s: s.update(m=s["m"].double()), "'m' must be a float32"),
    (lambda s: s.update(t=-1), "'t' must be an integer >= 0"),
    (lambda s: s.update(t=2.5), "'t' must be an integer >= 0"),
    (lambda s: s.update(t="x"), "'t' must be an integer >= 0"),
    (lambda s: s.update(skipped_steps=True), "'skipped_steps' must be an integer"),
    (lambda s: s.update(b=torch.full_like(s["b"], -1.0)), "'b' holds a negative value"),
    (lambda s: s.update(b_hat=torch.full_like(s["b"], float("nan"))), "'b_hat' holds a NaN"),
    (lambda s: s.update(e=torch.full_like(s["e"], 3.0)), "'e' holds a value outside"),
    (lambda s: s.update(seed="3"), "seed='3'"),
    (lambda s: s.update(worker=1), r"saved with worker=1, this run has 0; each rank's state_dict\(\) holds its own "
                                   r"worker's state: save one file per rank"),
])
def test_load_state_dict_refuses_what_it_would_drop_or_misread(change, message):
    state = BirderState(make_model(0).parameters(), _lone_topology(), seed=3)
    saved = state.state_dict()
    saved["t"] = 5
    change(saved)
    with pytest.raises(ValueError, match=message):
        state.load_state_dict(saved)
    assert state.t == 0 and state._carry is None


def test_state_refuses_bad_hyperparameters():
    with pytest.raises(ValueError, match="beta"):
        BirderState(make_model(0).parameters(), _lone_topology(), beta=1.0)
    with pytest.raises(ValueError, match="lr"):
        BirderUpdate(make_model(0).parameters(), lr=0.0)


def test_a_bucket_of_parameters_the_state_was_not_given_is_refused(one_rank):
    model = make_model(0)
    state = BirderState(make_model(0).parameters(), comm.make_topology("flat", 1, 1), seed=0)  # other tensors
    ddp = nn.parallel.DistributedDataParallel(model)
    ddp.register_comm_hook(state, birder_hook)
    inputs, targets = batch(0, 1, 0)
    with pytest.raises(Exception, match="not given to BirderState"):
        nn.functional.mse_loss(ddp(inputs), targets).backward()
    assert state.t == 0 and not state.buckets


def test_reference_comparison_counts_a_single_flipped_bit():
    """The runner's comparison can fail: one wrong sign on one rank is one mismatched update element (and the
    parameter it moves)."""
    cfg = Config(nodes=1, gpus_per_node=2, steps=1, weight_decay=0.0)
    d = 16
    reference = Reference(cfg, np.zeros(d, np.float32))
    grads = np.tile(np.linspace(-1, 1, d, dtype=np.float32), (2, 1))
    probe = Reference(cfg, np.zeros(d, np.float32))
    u_bar, _, _ = schemes.step(
        "hierarchical", probe.state, grads.reshape(1, 2, d), cfg.beta, cfg.eps,
        u_worker=worker_uniforms(cfg.seed, 1, 1, d), u_server=server_uniforms(cfg.seed, 1, d))
    u_bars = np.stack([u_bar, u_bar])
    u_bars[1, 3] *= -1
    params = np.stack([-u_bar * cfg.lr, -u_bars[1] * cfg.lr]).astype(np.float32)
    reference.step(grads, u_bars, params)
    assert reference.mismatched == 2 and not reference.ranks_identical and reference.max_abs_diff == 2.0


def test_bfloat16_buckets_are_computed_in_float32_and_get_exact_signs(one_rank):
    seed = 2
    model = make_model(seed).to(torch.bfloat16)
    state = BirderState(model.parameters(), comm.make_topology("hierarchical", 1, 1), seed=seed)
    ddp = nn.parallel.DistributedDataParallel(model)
    seen = []

    def recording_hook(hook_state, bucket):
        seen.append((bucket.parameters(), bucket.buffer().float().clone()))
        return birder_hook(hook_state, bucket)

    ddp.register_comm_hook(state, recording_hook)
    inputs, targets = batch(seed, 1, 0)
    nn.functional.mse_loss(ddp(inputs.bfloat16()), targets.bfloat16()).backward()
    ((order, local),) = seen  # the first iteration has one bucket
    u_bar_ref, _ = algorithm1.step(algorithm1.init(1, state.dim), _reorder(local, order, model)[None], 0.95, 1e-8,
                                   worker_uniforms(seed, 1, 1, state.dim), server_uniforms(seed, 1, state.dim))
    grads = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
    assert grads.dtype == torch.bfloat16
    np.testing.assert_array_equal(grads.float().numpy(), u_bar_ref)


def _reorder(buffer: torch.Tensor, bucket_order: list, model) -> np.ndarray:
    """A bucket buffer laid out in ``bucket_order`` rearranged into model.parameters() order."""
    pieces, start = {}, 0
    for p in bucket_order:
        pieces[id(p)] = buffer[start:start + p.numel()]
        start += p.numel()
    return torch.cat([pieces[id(p)] for p in model.parameters()]).numpy()


def test_the_expert_update_refuses_to_run_without_its_hook(one_rank):
    """Without hook_state BirderUpdate would be plain SGD; a step without (or after two) hook runs is refused."""
    model = make_model(0)
    with pytest.raises(ValueError, match="needs hook_state"):
        BirderUpdate(model.parameters(), lr=0.01)
    state = BirderState(model.parameters(), comm.make_topology("flat", 1, 1), seed=5)
    ddp = nn.parallel.DistributedDataParallel(model)
    ddp.register_comm_hook(state, birder_hook)
    optimizer = BirderUpdate(model.parameters(), 0.01, hook_state=state)
    with pytest.raises(RuntimeError, match="has not finished a backward pass"):
        optimizer.step()
    for micro in range(2):  # accumulation without no_sync: the second backward feeds u_bar back in
        x, y = batch(5, micro, 0)
        nn.functional.mse_loss(ddp(x), y).backward()
    with pytest.raises(RuntimeError, match="ran 2 backward passes"):
        optimizer.step()


class _Branchy(nn.Module):
    """A branch used on even steps only, a frozen layer that DDP leaves out of its buckets."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.body, self.branch, self.head = nn.Linear(8, 16), nn.Linear(16, 16), nn.Linear(16, 3)
        self.frozen = nn.Linear(3, 3)
        self.frozen.requires_grad_(False)
        self.use_branch = True

    def forward(self, x):
        h = torch.tanh(self.body(x))
        return self.head(torch.tanh(self.branch(h)) if self.use_branch else h)


@pytest.mark.parametrize("set_to_none", [True, False])
def test_a_parameter_that_sat_out_the_backward_is_refused_on_the_hook_path_before_anything_moves(one_rank,
                                                                                                 set_to_none):
    """t13: under find_unused_parameters the hook advanced an unused branch's m and e, DDP left its .grad None (or
    zero), and BirderUpdate skipped it where Algorithm 1 moves it by lr * u_bar: the paths parted silently."""
    model = _Branchy()
    state = BirderState(model.parameters(), comm.make_topology("flat", 1, 1), seed=5)
    ddp = nn.parallel.DistributedDataParallel(model, find_unused_parameters=True)
    ddp.register_comm_hook(state, birder_hook)
    optimizer = BirderUpdate(model.parameters(), 0.01, hook_state=state)  # the frozen layer too, as users pass it
    for step in range(2):
        model.use_branch = step == 0
        optimizer.zero_grad(set_to_none=set_to_none)
        x, y = batch(5, step, 0)
        nn.functional.mse_loss(ddp(x), y).backward()
        before = [p.detach().clone() for p in model.parameters()]
        if step == 0:
            optimizer.step()  # every trainable parameter used: the frozen one is no part of the hook's buckets
            continue
        with pytest.raises(RuntimeError, match=r"2 trainable parameter\(s\) \(positions \[2, 3\].*got no u_bar"):
            optimizer.step()
        assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


def test_the_hook_returns_at_once_and_computes_on_its_communication_thread(one_rank, monkeypatch):
    """Overlap: birder_hook hands each bucket to the state's thread and returns a future; bits unchanged (the
    first test of this file and gpu-validate compare them with the reference)."""
    import threading

    threads = []
    original = comm.one_bit_allreduce

    def spy(*args, **kwargs):
        threads.append(threading.current_thread().name)
        return original(*args, **kwargs)

    monkeypatch.setattr(comm, "one_bit_allreduce", spy)
    model = make_model(0)
    state = BirderState(model.parameters(), comm.make_topology("flat", 1, 1), seed=5)
    ddp = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.0003)
    ddp.register_comm_hook(state, birder_hook)
    x, y = batch(5, 1, 0)
    nn.functional.mse_loss(ddp(x), y).backward()
    assert threads and all(name.startswith("birder-hook") for name in threads)
    assert threading.current_thread().name not in threads and state.iterations == 1


def _hook_run(bucket_view: bool):
    """A model under birder_hook with several buckets from the second iteration on (DDP's rebuild)."""
    model = make_model(0)
    state = BirderState(model.parameters(), comm.make_topology("flat", 1, 1), seed=5)
    ddp = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.0003, gradient_as_bucket_view=bucket_view)
    ddp.register_comm_hook(state, birder_hook)
    return model, state, ddp


def _backward(ddp, model, step: int, poisoned: bool = False, scaler=None) -> list[torch.Tensor]:
    for p in model.parameters():
        p.grad = None if p.grad is None or not p.grad.is_contiguous() else p.grad.zero_()
    x, y = batch(5, step, 0)
    if poisoned:
        x[0, 0] = float("nan")
    loss = nn.functional.mse_loss(ddp(x), y)
    (loss if scaler is None else scaler.scale(loss)).backward()
    return [p.detach().clone() for p in model.parameters()]


@pytest.mark.parametrize("bucket_view", [False, True])
def test_a_skipped_iteration_leaves_nan_in_every_bucket_and_stock_optimizers_cannot_step_it(one_rank, bucket_view,
                                                                                             caplog):
    """t13: a skipped iteration wrote finite +-1, so torch.optim.SGD moved on a dropped step and a GradScaler never
    saw the overflow. Now every bucket holds NaN (the futures complete only once the last bucket has decided), a
    GradScaler backs off, and a bare stock step is refused before it moves anything."""
    model, state, ddp = _hook_run(bucket_view)
    sgd = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(2):
        _backward(ddp, model, step)
        sgd.step()  # finite iterations: a stock step on u_bar is allowed
    assert len(state.buckets) > 1, "the test must cover several buckets"
    scaler = torch.amp.GradScaler("cpu", init_scale=4.0)
    before = _backward(ddp, model, 2, poisoned=True, scaler=scaler)
    assert state.last_iteration_skipped and state.t == 2 and state.skipped_steps == 1
    assert all(bool(p.grad.isnan().all()) for p in model.parameters())
    assert "birder_hook: iteration skipped on every rank" in caplog.text and "(1 skipped in all)" in caplog.text
    with pytest.raises(RuntimeError, match=r"SGD.step\(\): birder_hook skipped this iteration"):
        sgd.step()
    scaler.step(sgd)  # unscale_ finds the NaN: no step, and the scale halves
    scaler.update()
    assert scaler.get_scale() == 2.0
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


def test_a_stock_optimizer_steps_u_bar_but_not_a_rescaled_one(one_rank):
    """SGD on the hook's +-1 moves by lr * u_bar (line 16); a GradScaler's unscale_ or a clip that bites would
    shrink that step silently, so the step is refused before it moves anything."""
    model, state, ddp = _hook_run(False)
    sgd = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(3):
        before = _backward(ddp, model, step)
        grads = [p.grad.clone() for p in model.parameters()]
        assert all(bool((g.abs() == 1).all()) for g in grads)
        sgd.step()
        assert all(torch.equal(p, b - 0.01 * g) for p, b, g in zip(model.parameters(), before, grads, strict=True))
    scaler = torch.amp.GradScaler("cpu", init_scale=8.0)
    for rescale in (lambda: scaler.unscale_(sgd), lambda: nn.utils.clip_grad_norm_(model.parameters(), 1.0)):
        before = _backward(ddp, model, 3, scaler=scaler)
        rescale()
        with pytest.raises(RuntimeError, match=r"SGD.step\(\): .grad no longer holds the \+-1"):
            sgd.step()
        assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    _backward(ddp, model, 4)
    nn.utils.clip_grad_norm_(model.parameters(), 1e6)  # a clip that does not bite leaves +-1
    sgd.step()


def test_the_expert_update_steps_after_a_skipped_iteration_it_did_not_see(one_rank):
    """Under a GradScaler, step() is not called on a skipped iteration: the next backward's step is no
    accumulation, and proceeds; two committed backward passes without a step are still refused."""
    model, state, ddp = _hook_run(False)
    update = BirderUpdate(model.parameters(), 0.01, hook_state=state)
    _backward(ddp, model, 0)
    update.step()
    _backward(ddp, model, 1, poisoned=True)  # skipped: the loop does not step
    before = _backward(ddp, model, 2)
    update.step()
    assert state.t == 2 and not any(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    _backward(ddp, model, 3)
    _backward(ddp, model, 4)
    with pytest.raises(RuntimeError, match="ran 2 backward passes"):
        update.step()


def test_the_state_refuses_pickling_and_a_resume_that_restored_only_the_optimizer(one_rank):
    """t13: torch.save(state) failed on a process group with a TypeError, and restoring only the optimizer's
    state_dict restarted m, b, e and the draws without a word. Both now say what to save instead."""
    import copy

    model, state, ddp = _hook_run(False)
    with pytest.raises(ValueError, match=r"cannot be pickled.*state.state_dict\(\)"):
        torch.save(state, io.BytesIO())
    with pytest.raises(ValueError, match="cannot be pickled"):
        copy.deepcopy(state)
    update = BirderUpdate(model.parameters(), 0.01, hook_state=state)
    for step in range(2):
        _backward(ddp, model, step)
        update.step()
    saved_update, saved_state = update.state_dict(), state.state_dict()
    assert saved_update["hook_t"] == 2
    for restore_state in (False, True):
        model2, state2, ddp2 = _hook_run(False)
        update2 = BirderUpdate(model2.parameters(), 0.01, hook_state=state2)
        update2.load_state_dict(saved_update)
        if restore_state:  # after the optimizer: the order does not matter
            state2.load_state_dict(saved_state)
        before = _backward(ddp2, model2, 2)
        if not restore_state:
            with pytest.raises(RuntimeError, match=r"taken at Birder step t=2, but its BirderState resumed from t=0"):
                update2.step()
            assert all(torch.equal(a, b) for a, b in zip(before, model2.parameters(), strict=True))
        else:
            update2.step()
            assert state2.t == 3
    with pytest.raises(ValueError, match="'hook_t' must be an integer"):
        update.load_state_dict({**saved_update, "hook_t": -1})


def test_a_nan_on_one_rank_leaves_nan_in_every_bucket_of_every_rank():
    """Two gloo ranks, several buckets, rank 1's NaN in the bucket DDP reduces last: both ranks skip, find NaN in
    every .grad (so a GradScaler backs off on both), refuse a bare SGD step, and stay identical afterwards."""
    from gpu_scenarios import faults

    from gpu_validation import launch

    outcome = launch.launch(faults.hook_nan_on_one_rank, (), 2, "gloo", 30, 120)
    assert not outcome.describe_failures(), outcome.describe_failures()
    reports = [outcome.reports[r]["result"] for r in (0, 1)]
    for seen in reports:
        assert seen["buckets"] > 1 and seen["all_nan"] and seen["sgd_refused"]
        assert seen["t"] == 3 and seen["skipped"] == 1 and seen["scale"] == 0.5
    assert reports[0]["checksum"] == reports[1]["checksum"]
