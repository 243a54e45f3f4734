"""Backends: implementations of ``workbench.estimate.Backend``; only these modules import torch."""
