"""Serving: per-iteration engine costs (``cost``: the ``IterationCost`` protocol and ``ReplicaCost``), the
published serving runs as specs (``rows``) and the request simulator (``simulate``)."""
