"""A discrete-event model (simpy) of data-parallel training on Ethernet and InfiniBand clusters.

Three layers, as in ASTRA-sim:

* workload (``sim.workload``, ``sim.models``): one training step, DDP buckets, optimizer policies, calibration;
* system (``sim.system``, ``sim.collective``): collectives from ``birder_ref.schedules`` as NCCL runs them
  (tuning.cc's latencies and protocols, channels over every NIC, NCCL's ring/tree choice);
* network (``sim.hardware`` and ``sim/presets``: NICs, fabrics, GPUs, site profiles, cluster TOML;
  ``sim.network``: links shared max-min fairly by flows).

Beside them, ``sim.uncertainty`` (what a prediction needs for its interval) and ``sim.validation`` (the corpus
and the paper's rows predicted and scored: it imports prediction, and is never imported by it).

``sim.api`` is the library entry (``predict_config``, ``sweep_grid``); ``birder predict |
collective | sweep | validate`` the command line (``sim.cli``); ``sim/README.md`` the design, every constant's
source, and what was fitted where.
"""
