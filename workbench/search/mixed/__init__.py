"""Plans over the pools of a ``MixedCluster`` (the mixed-pool mode of the search).

- ``plan_mixed`` (:mod:`workbench.search.mixed.planner`): ranks the two layouts, pipelines whose stages run on
  different pools (:mod:`workbench.search.mixed.layouts` enumerates them, :mod:`workbench.search.mixed.pipeline`
  sizes their stages per pool, screens them in closed form and simulates the best) and whole replicas per pool
  with the batch split by speed (:mod:`workbench.search.mixed.split`).
- What a plan over pools costs, ``MixedEstimate``, is assembled in :mod:`workbench.estimate.mixed`; each pool's
  stages are priced by :mod:`workbench.hetero.pricing` (the step model on the pool's own devices and links).
"""
