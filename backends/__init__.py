"""Backends: implementations of ``workbench.specs.estimate.Backend``; only these modules import torch."""
