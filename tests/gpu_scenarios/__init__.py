"""Multi-rank test bodies for ``gpu_validation.Birder``: each function is the body of one rank, which
``gpu_validation.launch.launch`` runs in an initialised process group. They test the package, so they live with
the tests, not in the package users import.

- ``faults``: what Birder refuses or survives when ranks drift, fail or call state_dict() alone
  (``python -m tests.gpu_scenarios.faults`` from the repository root prints its table);
- ``training``: Birder in training-loop habits (GradScaler, clipping, accumulation, frozen parameters, overflow,
  skip limit, checkpoints, a stalled rank), each bit for bit against ``birder_ref``.

The test files import them as ``gpu_scenarios`` (pytest puts tests/ on the path).
"""
