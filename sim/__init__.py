"""A discrete-event model (simpy) of data-parallel training on Ethernet and InfiniBand clusters.

Three layers, as in ASTRA-sim:

* workload (``sim.workload``, ``sim.models``): one training iteration, DDP buckets, optimizer policies;
* system (``sim.system``): collectives from the schedules of ``birder_ref.schedules``, NCCL's ring/tree choice;
* network (``sim.network``, ``sim/presets``): links with fair sharing, NICs, the switch, hardware presets.

``sim.workload.predict`` is the library entry; ``birder predict | sweep | validate`` the command line
(``sim.cli``); ``sim/README.md`` the design, the calibration and the fitted constants.
"""
