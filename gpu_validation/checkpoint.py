"""Birder's checkpoints: the full state (every worker's m, b_hat, e and the whole server error, in element order;
collective), a rank's shard, the AdamW state that continues from it, and loading either back, everything checked
before anything changes. ``Birder.state_dict``, ``sharded_state_dict``, ``to_adamw_state_dict`` and
``load_state_dict`` call these.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist

from gpu_validation import comm, guards, records

if TYPE_CHECKING:
    from gpu_validation.optimizer import Birder

FULL_FORMAT = "birder-optimizer-full/1"
SHARD_FORMAT = "birder-optimizer-shard/1"
# In every state dict Birder saves: parameter 0's "step" as bytes, which torch's Adam-family optimizers convert with
# float() while loading (__setstate__), so AdamW.load_state_dict(birder_state) fails at once with this line.
FOREIGN_LOAD_GUARD = {0: {"step": b"gpu_validation.Birder's optimizer state: torch optimizers cannot load it; "
                                  b"convert it with Birder.to_adamw_state_dict() (docs/adoption.md), or start the new "
                                  b"optimizer afresh"}}
VECTORS = ("m", "b_hat", "e")  # per worker; b = b_hat (T0 off, as the paper runs it)


def config(opt: Birder) -> dict:
    """What a state must have been saved with to load here."""
    topo = opt.topology
    return {"scheme": topo.scheme, "n_workers": topo.n_workers, "dim": opt.dim, "seed": opt.seed,
            "beta": opt.beta, "eps": opt.eps}


def param_groups_of(opt: Birder) -> list[dict]:
    """Each group's settings and parameters (as positions in element order), as torch saves them: lr, weight_decay
    and whatever keys a scheduler added to the group since (``initial_lr``, OneCycleLR's ``max_lr``, ...)."""
    position = {id(p): i for i, p in enumerate(opt._params)}
    return [{**{k: v for k, v in g.items() if k != "params"}, "params": [position[id(p)] for p in g["params"]]}
            for g in opt.param_groups]


def parameters_of(opt: Birder) -> list[list]:
    """Each parameter's name and shape, in element order: what m, b_hat and e line up with."""
    return [[name, list(p.shape)] for name, p in zip(opt.param_names, opt._params, strict=True)]


def check_parameters(opt: Birder, saved) -> None:
    """ValueError where the state was saved for parameters laid out otherwise: shapes that differ in element order, or
    a name at another position (a refactor that reorders modules keeps names and counts, and model.load_state_dict
    matches by name, but m, b_hat and e would land on other parameters' elements; trial t13). A renamed parameter
    of the same shape at the same position loads (a wrapper's prefix, torch.compile's _orig_mod.)."""
    mine = parameters_of(opt)
    if not (isinstance(saved, list) and all(isinstance(x, list) and len(x) == 2 and isinstance(x[0], str)
                                            and isinstance(x[1], list) for x in saved)):
        raise ValueError("Birder state 'parameters' must be a list of [name, shape] pairs, as state_dict() saves it")
    shapes = [shape for _, shape in saved], [shape for _, shape in mine]
    at = {name: i for i, (name, _) in enumerate(mine)}
    moved = [(name, i, at[name]) for i, (name, _) in enumerate(saved) if name in at and at[name] != i]
    if shapes[0] != shapes[1] or moved:
        if moved:
            first = f"{moved[0][0]!r} was parameter {moved[0][1]} and is now {moved[0][2]}"
        elif len(saved) != len(mine):
            first = f"{len(saved)} parameters saved, {len(mine)} here"
        else:
            i = next(i for i, (a, b) in enumerate(zip(*shapes, strict=True)) if a != b)
            first = f"parameter {i} was {saved[i][0]!r} {saved[i][1]} and is now {mine[i][0]!r} {mine[i][1]}"
        raise ValueError(f"Birder state was saved for another parameter layout ({first}): m, b_hat and e are in "
                         "element order and would land on other parameters' elements; build the model with its "
                         "modules in the order that saved it, or start the optimizer afresh")


def stepped_while_frozen(opt: Birder) -> list[int]:
    """The element-order positions of parameters an update found frozen (their m, b and e moved): unfreezing them is
    refused (``guards``), after a restore too."""
    return [i for i, p in enumerate(opt._params) if id(p) in opt._stepped_while_frozen]


def counters(opt: Birder) -> dict:
    """The step and the skip counters."""
    return {"t": opt.t, "skipped_steps": opt.skipped_steps, "consecutive_skips": opt.consecutive_skips}


def full_state(opt: Birder) -> dict:
    """``Birder.state_dict()``: a record, then one all-gather of every rank's shards over Birder's
    group of all ranks (collective); the same dict on every rank."""
    topo, world, group = opt.topology, dist.get_world_size(), opt.topology.world_group
    opt._exchange_record(records.STATE_DICT)  # a rank in backward or forward meets it: both sides raise at once
    mine = torch.cat([opt.m, opt.b_hat, opt.e, opt.server_error])
    rows = opt._collective("state_dict all-gather", group,
                           lambda: comm.all_gather_rows(mine, group, world)).cpu()
    n_shard = opt.m.numel()
    full = {name: torch.zeros(topo.n_workers, opt.length) for name in VECTORS}
    server = torch.zeros(opt.length)
    for rank in range(world):
        worker, shard = topo.worker_of(rank), comm.shard_slice(topo, opt.length, rank)
        for i, name in enumerate(VECTORS):
            full[name][worker, shard] = rows[rank, i * n_shard:(i + 1) * n_shard]
        server[comm.chunk_slice(topo, opt.length, rank)] = rows[rank, 3 * n_shard:]
    state = {"format": FULL_FORMAT, **config(opt), **counters(opt), "parameters": parameters_of(opt),
             "stepped_while_frozen": stepped_while_frozen(opt),
             **{name: full[name][:, :opt.dim].clone() for name in VECTORS},
             "server_error": server[:opt.dim].clone(), **FOREIGN_LOAD_GUARD}
    return {"state": state, "param_groups": param_groups_of(opt)}


def shard_state(opt: Birder) -> dict:
    """This rank's shard only (no collective): each rank saves its own file; loads on the same layout only."""
    topo = opt.topology
    state = {"format": SHARD_FORMAT, **config(opt), "rank": topo.rank, "n_nodes": topo.n_nodes,
             "gpus_per_node": topo.gpus_per_node, **counters(opt), "parameters": parameters_of(opt),
             "stepped_while_frozen": stepped_while_frozen(opt),
             **{name: getattr(opt, name).detach().cpu().clone() for name in (*VECTORS, "server_error")},
             **FOREIGN_LOAD_GUARD}
    return {"state": state, "param_groups": param_groups_of(opt)}


def adamw_state(opt: Birder, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8) -> dict:
    """``Birder.to_adamw_state_dict()`` (collective, through ``opt.state_dict()``): step t, each group's lr and
    weight decay, and moments that AdamW's bias correction turns into Birder's: Birder's m and b are moving
    averages from 0 with beta, so their estimates are m / (1 - beta^t) and b / (1 - beta^t) (the workers' means);
    AdamW divides exp_avg by 1 - beta1^t and exp_avg_sq by 1 - beta2^t, so exp_avg = m (1 - beta1^t) / (1 - beta^t)
    and exp_avg_sq = b^2 (1 - beta2^t) / (1 - beta^t)^2. Without the factors AdamW's first steps were 0.17x, 0.34x
    and 0.88x of Birder's estimates after 10, 100 and 1000 steps (trial t8)."""
    full = opt.state_dict()["state"]
    t, (beta1, beta2) = opt.t, betas
    birder_bias = 1 - opt.beta**t if t else 1.0  # at t = 0, m and b are 0
    m = full["m"].mean(dim=0) * ((1 - beta1**t) / birder_bias)
    b = full["b_hat"].mean(dim=0) * (math.sqrt(1 - beta2**t) / birder_bias)
    adamw = torch.optim.AdamW([{"params": g["params"], "lr": g["lr"], "weight_decay": g["weight_decay"]}
                               for g in opt.param_groups], betas=betas, eps=eps)
    layout = adamw.state_dict()  # torch's own group format, numbering the parameters group by group
    index = {id(p): i for i, p in enumerate(p for g in adamw.param_groups for p in g["params"])}
    state = {}
    for p, start in zip(opt._params, opt.offsets, strict=True):
        span = slice(start, start + p.numel())
        state[index[id(p)]] = {"step": torch.tensor(float(opt.t)), "exp_avg": m[span].view_as(p).to(p.dtype),
                               "exp_avg_sq": b[span].square().view_as(p).to(p.dtype)}
    return {"state": state, "param_groups": layout["param_groups"]}


def load(opt: Birder, state_dict: dict) -> None:
    """``Birder.load_state_dict()``: everything checked first (one ValueError, the optimizer
    unchanged), then the state copied in."""
    state, groups = _check_envelope(opt, state_dict)
    fmt = state.get("format")
    if fmt == FULL_FORMAT:
        shapes = {**{name: (opt.topology.n_workers, opt.dim) for name in VECTORS}, "server_error": (opt.dim,)}
        extra = ()
    elif fmt == SHARD_FORMAT:
        shapes = {**{name: tuple(opt.m.shape) for name in VECTORS},
                  "server_error": tuple(opt.server_error.shape)}
        extra = ("rank", "n_nodes", "gpus_per_node")
    elif fmt is None and state and all(type(k) is int for k in state):
        # torch's optimizers key their state by parameter position ({0: {"step", "exp_avg", ...}})
        kinds = sorted({str(k) for v in state.values() if isinstance(v, dict) for k in v})
        raise ValueError(f"Birder state: this is a torch optimizer's state_dict (per-parameter {', '.join(kinds)}), "
                         "not Birder's: Birder has no state to take from it; start Birder afresh (its m, b and e "
                         "begin at 0, as Algorithm 1 does)")
    else:
        raise ValueError(f"Birder state format {fmt!r}: expected {FULL_FORMAT!r} or {SHARD_FORMAT!r}")
    expected = {"format", *config(opt), *counters(opt), *shapes, *extra, *FOREIGN_LOAD_GUARD}
    # "parameters" (names and shapes) and "stepped_while_frozen" are absent from states saved before they were:
    # those load as before (unchecked, and no record of parameters stepped while frozen)
    missing = sorted(map(str, expected - set(state)))
    unknown = sorted(map(str, set(state) - expected - {"parameters", "stepped_while_frozen"}))
    if missing or unknown:
        raise ValueError(f"Birder state: missing keys {missing}, unknown keys {unknown}")
    mine = config(opt)
    if extra:
        topo = opt.topology
        mine.update(rank=topo.rank, n_nodes=topo.n_nodes, gpus_per_node=topo.gpus_per_node)
    for key, value in mine.items():
        if type(state[key]) is not type(value) or state[key] != value:
            hint = (" (a sharded checkpoint loads only on the layout that saved it: save state_dict()'s full form "
                    "to change layouts)" if key in extra else
                    " (the workers' state cannot be split or merged)" if key == "n_workers" else
                    f" (build Birder with {key}={state[key]!r} to resume this state; the draws and m, b, e "
                    "belong to it)" if key in ("seed", "beta", "eps") else "")
            raise ValueError(f"Birder state was saved with {key}={state[key]!r}, this run has {value!r}{hint}")
    if "parameters" in state:
        check_parameters(opt, state["parameters"])
    frozen = state.get("stepped_while_frozen", [])
    if not (isinstance(frozen, list) and all(type(i) is int and 0 <= i < len(opt._params) for i in frozen)
            and len(set(frozen)) == len(frozen)):
        raise ValueError(f"Birder state 'stepped_while_frozen' must be a list of distinct parameter positions from 0 "
                         f"to {len(opt._params) - 1}, got {frozen!r}")
    t = guards.check_count("Birder state 't'", state["t"])
    skipped = guards.check_count("Birder state 'skipped_steps'", state["skipped_steps"])
    consecutive = guards.check_count("Birder state 'consecutive_skips'", state["consecutive_skips"])
    if consecutive > skipped:
        raise ValueError(f"Birder state: consecutive_skips={consecutive} exceeds skipped_steps={skipped}")
    for name, shape in shapes.items():
        v = state[name]
        if not isinstance(v, torch.Tensor) or v.dtype != torch.float32 or tuple(v.shape) != shape or v.is_sparse:
            got = f"{v.dtype} {tuple(v.shape)}" if isinstance(v, torch.Tensor) else type(v).__name__
            raise ValueError(f"Birder state {name!r} must be a dense float32 tensor of shape {shape}, got {got}")
        if not bool(torch.isfinite(v).all()):
            raise ValueError(f"Birder state {name!r} holds a NaN or an infinity")
    if bool((state["b_hat"] < 0).any()):
        raise ValueError("Birder state 'b_hat' (b) holds a negative value; it is a mean of |g|")
    for name in ("e", "server_error"):  # |y| <= 3 and Q(y) = sign(y) beyond [-1, 1] keep every error in [-2, 2]
        if bool((state[name].abs() > 2).any()):
            raise ValueError(f"Birder state {name!r} holds a value outside [-2, 2], which Algorithm 1 never makes")
    # everything checked: now change the optimizer
    if fmt == FULL_FORMAT:
        topo, n = opt.topology, opt.dim
        shard, chunk = comm.shard_slice(topo, opt.length), comm.chunk_slice(topo, opt.length)
        for name in VECTORS:
            row = torch.zeros(opt.length)
            row[:n] = state[name][topo.worker]
            getattr(opt, name).copy_(row[shard])
        server = torch.zeros(opt.length)
        server[:n] = state["server_error"]
        opt.server_error.copy_(server[chunk])
    else:
        for name in (*VECTORS, "server_error"):
            getattr(opt, name).copy_(state[name])
    opt.t, opt.skipped_steps, opt.consecutive_skips = t, skipped, consecutive
    opt._stepped_while_frozen = {id(opt._params[i]) for i in frozen}
    for group, saved in zip(opt.param_groups, groups, strict=True):
        group.update({k: v for k, v in saved.items() if k != "params"})  # a scheduler's keys too, as torch does
        group["lr"], group["weight_decay"] = float(saved["lr"]), float(saved["weight_decay"])
    opt._hook_state.reset()
    opt._forward_record_due = True


def _check_envelope(opt: Birder, state_dict) -> tuple[dict, list]:
    """The state and param groups of ``state_dict``, checked against this optimizer's groups."""
    if not isinstance(state_dict, dict) or set(state_dict) != {"state", "param_groups"}:
        raise ValueError("Birder state_dict must be a dict with exactly the keys 'state' and 'param_groups'")
    state, groups = state_dict["state"], state_dict["param_groups"]
    if not isinstance(state, dict):
        raise ValueError(f"Birder state_dict['state'] must be a dict, got {type(state).__name__}")
    mine = param_groups_of(opt)
    if not isinstance(groups, list) or not groups or not all(isinstance(g, dict) for g in groups):
        raise ValueError("Birder state_dict['param_groups'] must be a non-empty list of dicts")
    for i, group in enumerate(groups):
        if not {"lr", "weight_decay", "params"} <= set(group) or not all(isinstance(k, str) for k in group):
            raise ValueError(f"Birder param groups must hold lr, weight_decay and params (and any keys a scheduler "
                             f"added, by name); got {sorted(map(str, group))}")
        guards.check_real(f"param_groups[{i}]['lr']", group["lr"], 0.0, True)
        guards.check_real(f"param_groups[{i}]['weight_decay']", group["weight_decay"], 0.0, False)
    saved = [g["params"] for g in groups]
    if saved != [g["params"] for g in mine]:
        count = sum(len(p) for p in saved if isinstance(p, list))
        raise ValueError(f"Birder state holds {count} parameters in {len(saved)} group(s) {saved}; this model "
                         f"has {len(opt._params)} trainable ones in {len(mine)} group(s) "
                         f"{[g['params'] for g in mine]}")
    return state, groups
