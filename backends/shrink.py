"""Shrinking a model for a small run: one rule for ``workbench profile`` and ``workbench run``.

A profile and a real run of the same shrunk model must have the same layer shape (the torch-profile backend
looks profiles up by it), so both commands shrink with ``shrink_model``. This module does not import torch:
the command line checks the sizes before any torch work starts.
"""

from __future__ import annotations

from dataclasses import replace

from workbench.specs.model import ModelSpec

SHRINK_HEAD_DIM = 64
"""Largest head size of a shrunk variant (keeps several heads at a small width)."""
WIDTH_STEP = 64
"""Widths (hidden, FFN, vocabulary) of a shrunk variant are multiples of this."""


def _round_to(x: float, step: int = WIDTH_STEP) -> int:
    return max(step, int(round(x / step)) * step)


def shrink_model(
    spec: ModelSpec,
    *,
    num_layers: int | None = None,
    hidden_size: int | None = None,
    vocab_size: int | None = None,
) -> ModelSpec:
    """A smaller variant of ``spec`` that keeps its kind: ``num_layers`` blocks (dense-first layers capped at
    num_layers - 1) and width ``hidden_size``, where the head size is min(head_dim, 64), the heads follow the
    width, the query/key-value head ratio is kept (at least one key/value head dividing the heads), FFN,
    expert and vocabulary widths scale with the width (rounded to 64), experts and top-k are kept.
    ``vocab_size`` overrides the vocabulary. Named ``<name>-L<layers>-H<hidden>`` (``-V<vocab>`` when given).
    Returns ``spec`` itself when nothing changes. ValueError for sizes < 1 or a width that is not a multiple
    of 64."""
    if num_layers is not None and num_layers < 1:
        raise ValueError(f"--layers must be >= 1, got {num_layers}")
    if hidden_size is not None and (hidden_size < WIDTH_STEP or hidden_size % WIDTH_STEP):
        raise ValueError(
            f"--hidden must be a multiple of {WIDTH_STEP} and >= {WIDTH_STEP}, got {hidden_size}"
        )
    if vocab_size is not None and vocab_size < 1:
        raise ValueError(f"--vocab must be >= 1, got {vocab_size}")
    out = spec
    if num_layers is not None:
        out = replace(out, num_layers=num_layers, num_dense_layers=min(spec.num_dense_layers, num_layers - 1))
    if hidden_size is not None and hidden_size != spec.hidden_size:
        r = hidden_size / spec.hidden_size
        head_dim = min(spec.head_dim, SHRINK_HEAD_DIM)
        heads = max(1, hidden_size // head_dim)
        kv = max(1, heads * spec.num_key_value_heads // spec.num_attention_heads)
        while heads % kv:
            kv -= 1
        out = replace(
            out,
            hidden_size=hidden_size,
            head_dim=head_dim,
            num_attention_heads=heads,
            num_key_value_heads=kv,
            vocab_size=_round_to(spec.vocab_size * r),
            ffn_hidden_size=_round_to(spec.ffn_hidden_size * r) if spec.ffn_hidden_size else 0,
            moe_ffn_hidden_size=_round_to(spec.moe_ffn_hidden_size * r) if spec.is_moe else 0,
        )
    if vocab_size is not None:
        out = replace(out, vocab_size=vocab_size)
    if out == spec:
        return spec
    name = f"{spec.name}-L{out.num_layers}-H{out.hidden_size}"
    return replace(out, name=name + (f"-V{vocab_size}" if vocab_size is not None else ""))
