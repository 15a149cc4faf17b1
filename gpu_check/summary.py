"""The GPU check's short Markdown summary (``OUT/gpu_check.md``), made from the figures in ``gpu_check.json``."""

from __future__ import annotations

from gpu_check import plan

STATUS = {"ok": "ok", "failed": "FAILED", "error": "ERROR", "timed_out": "TIMED OUT", "skipped": "skipped",
          "not_run": "not run"}


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "/")


def markdown(result: dict) -> str:
    parts = result["parts"]
    env = parts.get("env", {})
    gpus = env.get("gpus") or []
    where = gpus[0]["name"] if gpus else "no GPU (the parts' CPU forms)"
    good = sum(r["status"] == "ok" for r in parts.values())
    lines = [
        f"# GPU check: {where}",
        "",
        f"Started {result['started_utc']}, on {result['device']}: {good} of {len(parts)} parts ok in "
        f"{result['seconds']} s (budget {result['budget_s']:.0f} s); torch {env.get('torch', '?')}, "
        f"Python {env.get('python', '?')}. Every figure: `gpu_check.json`; each part's own: `parts/*.json`, its "
        "output: `logs/*.log`.",
        "",
        "| part | status | seconds | result |",
        "|---|---|---:|---|",
    ]
    for name, record in parts.items():
        seconds = record.get("seconds")
        lines.append(f"| {name} | {STATUS.get(record['status'], record['status'])} | "
                     f"{'' if seconds is None else f'{seconds:.1f}'} | {_cell(record.get('headline', ''))} |")
    lines += ["", "What each part runs:", ""]
    cpu = result["device"] == "cpu"
    lines += [f"- **{p.name}**: " + (f"CPU form: {p.cpu_form} (on CUDA: {p.what})." if cpu else f"{p.what}.")
              for p in plan.PARTS if p.name in parts]
    validate = parts.get("validate", {})
    if validate.get("why_not_more_nccl_ranks"):
        lines += ["", f"Why one NCCL rank: {validate['why_not_more_nccl_ranks']}"]
        pair = validate.get("nccl_two_ranks_one_gpu")
        if pair and pair.get("error"):
            lines.append(f"What NCCL said here to two ranks on one GPU: `{_cell(pair['error'])[:300]}`")
    bench = parts.get("bench", {})
    if bench.get("kernels"):
        lines += ["", f"Birder's kernels (`{bench['command']}`; measured copy bandwidth "
                      f"{bench['measured_copy_gbytes_per_s']} GB/s, nominal peak "
                      f"{bench['peak_gbytes_per_s']:.1f} GB/s):",
                  "", "| elements | worker ms | server ms | update ms | worker share of measured copy |",
                  "|---:|---:|---:|---:|---:|"]
        lines += [f"| {k['elements']:,} | {k['worker_ms']} | {k['server_ms']} | {k['update_ms']} | "
                  f"{100 * k['worker_share_of_measured_copy']:.2f}% |" for k in bench["kernels"]]
        if bench.get("plot"):
            lines.append(f"\nPlot: `{bench['plot']}`; cluster profile: `{bench['profile']}`.")
    rows = parts.get("step_time", {}).get("rows") or []
    if rows:
        lines += ["", "Step time (median ms per step, interleaved in one run):", "",
                  "| layout | backend | parameters | Birder | all-reduce + AdamW | ratio |",
                  "|---|---|---:|---:|---:|---:|"]
        lines += [f"| {r['layout']} | {r['backend']} | {r['parameters']:,} | {r['birder_ms_per_step']} | "
                  f"{r['allreduce_adamw_ms_per_step']} | {r['birder_over_allreduce']}x |" for r in rows]
    problems = {n: r for n, r in parts.items() if r["status"] not in ("ok", "skipped")}
    if problems:
        lines += ["", "## Not ok", ""]
        for name, record in problems.items():
            lines.append(f"- **{name}** ({STATUS.get(record['status'], record['status'])}): "
                         f"{_cell(record.get('error') or record.get('headline', ''))}")
            detail = record.get("failed_checks") or record.get("problems") or record.get("errors") or \
                record.get("log_tail") or record.get("output_tail") or []
            lines += [f"  - `{_cell(item)[:300]}`" for item in detail[:8]]
    return "\n".join(lines) + "\n"


RUNS = "gpu_check/runs"  # the recorded runs the README's GPU figures come from (gpu_check/runs/README.md)


def readme_paragraph(result: dict, largest: dict) -> str:
    """The README's paragraph of CUDA figures from a recorded run's ``gpu_check.json`` (``result``: its
    correctness, kernel and step-time parts) and a ``largest_model`` part whose trials each ran in a fresh process
    (``largest``: its clean bytes per parameter)."""
    parts = result["parts"]
    env, validate, bench = parts["env"], parts["validate"], parts["bench"]
    gpu = env["gpus"][0]["name"]
    differ = sum(run.get("mismatched_elements", 0) for run in validate["runs"].values())
    layouts = ", ".join(f"{run['ranks']} rank(s) over {name.split('_')[0]}" for name, run in validate["runs"].items())
    nccl = max((r for r in parts["step_time"]["rows"] if r["backend"] == "nccl"), key=lambda r: r["parameters"])
    worker = max(bench["kernels"], key=lambda k: k["elements"])
    adamw, birder = largest["adamw"]["bytes_per_parameter"], largest["birder"]["bytes_per_parameter"]
    day = result["started_utc"][:10]
    return (f"**Measured on an {gpu}** (torch {env['torch']}, NCCL {env['nccl_version']}, {day}; the runs: "
            f"[{RUNS}]({RUNS}/README.md)): {differ} elements differ from birder_ref ({layouts}); "
            f"{parts['cuda_tests']['passed']} CUDA tests pass. Birder's fused worker stage reaches "
            f"{100 * worker['worker_share_of_measured_copy']:.1f}% of the measured copy bandwidth at "
            f"{worker['elements']:,} elements (goal {100 * bench['target_share']:.0f}%: "
            f"{'met' if bench['meets_target'] else 'not met'}). One Birder step takes "
            f"{nccl['birder_over_allreduce']:.2f}x DDP's all-reduce + AdamW with one NCCL rank at "
            f"{nccl['parameters'] / 1e6:.1f} M parameters (one GPU has no network for 1-bit to save: this is its "
            f"cost alone). At its peak a step holds {birder:.1f} bytes per parameter with Birder, {adamw:.1f} with "
            "AdamW.")
