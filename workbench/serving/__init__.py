"""Serving: per-iteration engine costs (``cost``: the ``IterationCost`` protocol and ``ReplicaCost``, priced in
``cost_layers`` and ``cost_attention``) and the request simulator (``simulate``); the published serving runs are
read and scored in :mod:`workbench.validate.serving`."""
