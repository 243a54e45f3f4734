"""Click option types bounded by ``workbench.specs.limits``, with plain error words.

``count(maximum)`` is ``click.IntRange(min=1, max=maximum)`` whose errors say "is not a valid integer" (click's own
says "integer range"); ``amount(maximum)`` is the same for a float in [0, maximum] ("is not a valid number").
"""

from __future__ import annotations

import click


class _Count(click.IntRange):
    name = "integer"


class _Amount(click.FloatRange):
    name = "number"


def count(maximum: int, minimum: int = 1) -> click.IntRange:
    """An integer option in ``minimum..maximum`` (a bound of ``workbench.specs.limits``)."""
    return _Count(min=minimum, max=maximum)


def amount(maximum: float, minimum: float = 0.0) -> click.FloatRange:
    """A number option in ``[minimum, maximum]``; nan is refused by the spec that receives it."""
    return _Amount(min=minimum, max=maximum)


CAPACITY_FACTOR_HELP = (
    "MoE capacity factor: each expert takes at most this many times its balanced share of tokens, padded to it "
    "(drop-and-pad). Default: dropless."
)


def capacity_factor_option() -> object:
    """``--capacity-factor`` (a number in 1..MAX_CAPACITY_FACTOR; omitted: dropless), for every command that
    builds a ``Workload``."""
    from workbench.specs.limits import MAX_CAPACITY_FACTOR

    return click.option(
        "--capacity-factor",
        type=amount(MAX_CAPACITY_FACTOR, minimum=1.0),
        default=None,
        help=CAPACITY_FACTOR_HELP,
    )


def headroom_option() -> object:
    """``--headroom``: the one fit rule (``workbench.specs.estimate.DEFAULT_HEADROOM_FRAC``), shared by
    ``estimate`` and ``plan`` so both judge a plan against the same usable memory."""
    from workbench.specs.estimate import DEFAULT_HEADROOM_FRAC

    return click.option(
        "--headroom",
        type=click.FloatRange(0, 1, max_open=True),
        default=DEFAULT_HEADROOM_FRAC,
        show_default=True,
        help=(
            "Share of device memory kept free: a plan fits if its peak is at most (1 - headroom) x HBM. The "
            f"default {DEFAULT_HEADROOM_FRAC:g} (80 GiB -> 76 GiB usable) covers the memory model's error (4.7 % "
            "on published runs) and allocator fragmentation and transient peaks beyond the modelled share "
            "(PyTorch CUDA notes, 'Memory management'). 0 plans up to the full HBM. The same rule decides "
            "'fits' in estimate, plan, the app and the report."
        ),
    )


def schedule_choice(*extra: str) -> click.Choice:
    """A pipeline schedule name (``workbench.pipeline.schedules.SCHEDULE_NAMES``, plus ``extra``), read without
    regard to case: ``1F1B`` and ``ZB-H1`` are ``1f1b`` and ``zb-h1`` (the value passed on is the lower-case
    name)."""
    from workbench.pipeline.schedules import SCHEDULE_NAMES

    return click.Choice([*SCHEDULE_NAMES, *extra], case_sensitive=False)


def schedule_list(text: str) -> tuple[str, ...]:
    """``--schedules a,b`` as lower-case names (blank items dropped); unknown names are the core's to refuse."""
    return tuple(s.strip().lower() for s in text.split(",") if s.strip())
