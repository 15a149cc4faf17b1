"""Multi-rank test bodies for ``gpu_validation.Birder``: each function is the body of one rank, which
``gpu_validation.launch.launch`` runs in an initialised process group. They test the package, so they live with
the tests, not in the package users import.

- ``faults``: what Birder refuses or survives when ranks drift, fail or call state_dict() alone
  (``python -m tests.gpu_scenarios.faults`` from the repository root prints its table);
- ``training``: Birder in training-loop habits (GradScaler, clipping, accumulation, frozen parameters, overflow,
  skip limit, checkpoints, a stalled rank), each bit for bit against ``birder_ref``;
- ``habits``: an adopting engineer's habits (LR schedulers, parameter groups, DDP options, checkpointing, EMA/SWA,
  freezing mid-run, tied, sparse, complex or float64 parameters, user hooks, ``torch.compile``), each classified
  works (= ``birder_ref``) or clear error; its ``habits_table()`` is the table docs/habits.md holds
  (``python -m tests.gpu_scenarios.habits [--table]``).

The test files import them as ``gpu_scenarios`` (pytest puts tests/ on the path).
"""
