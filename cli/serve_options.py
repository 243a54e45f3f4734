"""Options of ``serve estimate`` for the deployments published serving runs use: prefill/decode disaggregation
(``--prefill-workers ... --decode-attention-dp``), speculative decoding (``--speculative``) and prefix caching
(``--prefix-hit-rate``); and the specs they build."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click
from workbench_cli._types import amount, count

from workbench.specs import limits as L
from workbench.specs.speculative import MAX_SPECULATIVE_TOKENS, SpecMethod

ROLE_FIELDS = ("workers", "tp", "ep", "attention_dp")
"""Per-role layout options: ``--prefill-<field>`` and ``--decode-<field>`` (``attention_dp`` as ``attention-dp``)."""


def _role_options() -> list[Callable[[Any], Any]]:
    out = []
    for role in ("prefill", "decode"):
        for field in ROLE_FIELDS:
            flag = f"--{role}-{field.replace('_', '-')}"
            what = {"workers": "engines", "tp": "tensor-parallel degree per engine",
                    "ep": "expert-parallel degree per engine (MoE)",
                    "attention_dp": "data-parallel attention ranks per engine"}[field]  # fmt: skip
            out.append(click.option(flag, type=count(L.MAX_DEVICES), default=None,
                                    help=f"Disaggregated: {role} {what}."))  # fmt: skip
    return out


DTYPE_CODES = ("bf16", "fp16", "fp8", "fp4", "int4")
ROLE_DTYPES = ("weight", "activation", "kv")
"""Per-role dtype options: ``--prefill-<kind>-dtype`` and ``--decode-<kind>-dtype`` (default: the plan's)."""


def _role_dtype_options() -> list[Callable[[Any], Any]]:
    return [
        click.option(f"--{role}-{kind}-dtype", type=click.Choice(DTYPE_CODES), default=None,
                     help=f"Disaggregated: {kind} dtype of the {role} engines (default: --{kind}-dtype).")
        for role in ("prefill", "decode")
        for kind in ROLE_DTYPES
    ]  # fmt: skip


DEPLOYMENT_OPTIONS: list[Callable[[Any], Any]] = [
    *_role_options(),
    *_role_dtype_options(),
    click.option("--speculative", type=click.Choice([m.value for m in SpecMethod]), default=None,
                 help="Speculative decoding method (mtp, eagle, eagle3, draft, ngram)."),
    click.option("--num-speculative-tokens", type=count(MAX_SPECULATIVE_TOKENS), default=None,
                 help="Tokens the draft proposes per step (with --speculative)."),
    click.option("--acceptance-rate", type=amount(1.0), default=None,
                 help="Per-token acceptance probability in [0, 1) (or --accepted-length)."),
    click.option("--accepted-length", type=amount(float(MAX_SPECULATIVE_TOKENS + 1), 1.0), default=None,
                 help="Mean tokens per verification step, the target's own included (or --acceptance-rate)."),
    click.option("--draft-model", default=None, help="Draft model preset id or config (--speculative draft)."),
    click.option("--num-redundant-experts", type=count(L.MAX_DEVICES, 0), default=0, show_default=True,
                 help="Extra expert copies per MoE layer (EPLB); ep divides experts + these."),
    click.option("--prefix-hit-rate", type=amount(1.0), default=0.0, show_default=True,
                 help="Share of each prompt served from the prefix cache, in [0, 1)."),
    click.option("--offload-group-size", type=count(L.MAX_PP, 0), default=0, show_default=True,
                 help="SGLang host offload: of every N layers the last keeps its experts in host memory (0: off)."),
]  # fmt: skip
"""Decorators, in order, added to ``serve estimate``."""


def deployment_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """Add ``DEPLOYMENT_OPTIONS`` to a click command."""
    for option in reversed(DEPLOYMENT_OPTIONS):
        func = option(func)
    return func


def disaggregation_of(kw: dict[str, Any]) -> Any:
    """The Disaggregation the role options describe (blank ones: 1 engine, tp 1, no ep, no attention DP, the
    plan's dtypes), or None when none is given. ValueError from the spec names a bad value; click.BadParameter
    for per-role dtypes without a disaggregated plan."""
    from workbench.specs.serving import Disaggregation

    given = {
        f"{role}_{field}": kw[f"{role}_{field}"] for role in ("prefill", "decode") for field in ROLE_FIELDS
    }
    dtypes = {
        role: tuple(kw[f"{role}_{kind}_dtype"] for kind in ROLE_DTYPES) for role in ("prefill", "decode")
    }
    if all(v is None for v in given.values()):
        if any(v is not None for t in dtypes.values() for v in t):
            raise click.BadParameter("per-role dtypes need a disaggregated plan (--prefill-workers ...)",
                                     param_hint="--prefill-weight-dtype")  # fmt: skip
        return None
    values: dict[str, Any] = {k: v for k, v in given.items() if v is not None}
    values.setdefault("prefill_workers", 1)
    values.setdefault("decode_workers", 1)
    return Disaggregation(**values, prefill_dtypes=dtypes["prefill"], decode_dtypes=dtypes["decode"])


def speculative_of(kw: dict[str, Any]) -> Any:
    """The SpeculativeDecoding of ``--speculative ...``, or None without it; click.BadParameter for a speculative
    option given without the method, a method without its token count, or both or neither acceptance."""
    from workbench.specs.speculative import SpeculativeDecoding

    rest = ("num_speculative_tokens", "acceptance_rate", "accepted_length", "draft_model")
    if kw["speculative"] is None:
        given = [f"--{k.replace('_', '-')}" for k in rest if kw[k] is not None]
        if given:
            raise click.BadParameter(
                f"{', '.join(given)} needs --speculative METHOD", param_hint="--speculative"
            )
        return None
    if kw["num_speculative_tokens"] is None:
        raise click.BadParameter("needs --num-speculative-tokens K", param_hint="--speculative")
    if (kw["acceptance_rate"] is None) == (kw["accepted_length"] is None):
        raise click.BadParameter(
            "give one of --acceptance-rate and --accepted-length", param_hint="--speculative"
        )
    return SpeculativeDecoding(method=SpecMethod(kw["speculative"]), **{k: kw[k] for k in rest})
