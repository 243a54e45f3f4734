"""Slow and unreliable links: DiLoCo-style local SGD and SWARM, and the per-pool pricing of mixed clusters.

- ``diloco_estimate`` (:mod:`workbench.hetero.diloco`): time per token and traffic of local SGD over a slow level
  against synchronous data parallelism.
- ``swarm_estimate`` (:mod:`workbench.hetero.swarm`, with :mod:`workbench.hetero.swarm_model` and
  :mod:`workbench.hetero.swarm_prices`): SWARM parallelism, stages served by swarms of peers over unreliable
  links, against a synchronous pipeline of the same peers.
- :mod:`workbench.hetero.pricing`: one pool's share of a pipeline priced with the step model (``PoolGrid``), for
  SWARM's peers and for the mixed-pool search (:mod:`workbench.search.mixed`, whose plans are assembled as
  ``MixedEstimate`` by :mod:`workbench.estimate.mixed`).

Both are their own training modes with their own closed forms (rates of peers, outer synchronisations), not a
``PlanCosts`` of one schedule: they sit beside ``estimate`` on its floor. Every layer time and memory figure comes
from :mod:`workbench.cost.step`, as for a homogeneous plan.
"""
