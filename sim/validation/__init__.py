"""Validation: the simulator's predictions against published measurements. It imports prediction (sim.api,
sim.workload, sim.uncertainty) and is never imported by it (tests/test_sim_layers.py).

The data: ``corpus.csv`` and ``sources.toml`` (published multi-node rows of other sources, each with its source;
schema in README.md), ``birder_paper_claims.toml`` (the Birder paper's stated claims), and the paper's public
rows in ``sim/presets/birder_public.csv``. The modules, in the order they build on each other:

- ``corpus``: reads and checks ``corpus.csv`` and ``sources.toml`` (``load_corpus``, ``load_sources``, ``regime``);
  ``python -m sim.validation`` lists the corpus per source.
- ``paper``: the Birder paper's public rows predicted on its two site profiles (``rows``, ``compare``, ``mape``).
- ``order``: the order of optimizers on those rows, on the site profiles and on generic presets.
- ``claims``: the paper's stated claims checked against the predictions.
- ``site_fit``: the site profiles' fitted constants refitted on the public rows, and the group cross-validation;
  ``python -m sim.validation.site_fit [SITE ...]`` refits.
- ``corpus_setup``: a corpus row as a simulated set-up (its cluster, its prediction) and the naive baselines.
- ``pairs``: speed-ups, the pairs of rows of one table, and their intervals each source left out.
- ``leave_one_source_out``: the corpus predicted with each source left out of every fit, and its intervals.
- ``figures``: the figures as the READMEs quote them.
- ``source_weighted``: an experiment, not used by predictions: the conformal correction with each source weighted
  equally, scored beside the shipped one (``python -m sim.validation.source_weighted``).
- ``stored``: the stored run (``sim/presets/cross_validation.json``) that predictions' intervals read;
  ``python -m sim.validation.stored`` regenerates it.
"""
