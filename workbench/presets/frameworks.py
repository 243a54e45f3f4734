"""Framework profiles on disk: ``profiles/frameworks/<id>.toml`` (spec: :mod:`workbench.specs.framework`).

Keys are the fields of :class:`~workbench.specs.framework.FrameworkProfile` plus a ``[sources]`` table
(field -> source). Unknown keys raise ValueError naming the file and listing the allowed keys; a validation
row's ``framework`` text is matched to a profile by its ``aliases`` and ``keywords``, in the era of the
source's year (:func:`profile_for_text`, :func:`source_year`).
"""

from __future__ import annotations

import re
from dataclasses import fields
from functools import cache
from pathlib import Path
from typing import Any

from workbench.presets.catalog import profiles_dir, read_toml
from workbench.specs.files import check_input_file
from workbench.specs.framework import FrameworkProfile
from workbench.specs.limits import shown

DEFAULT_FRAMEWORK = "megatron-core-2024"
"""The stack a plan is for when the user names none: Megatron-Core as the NeMo 25.11 container runs it (the
stack most large published runs of 2024-26 use: Llama 3, Nemotron, the Megatron-Bridge recipes), so the best
plan is one that stack runs. ``generic`` stays an explicit choice: every schedule and feature the workbench
models, priced as Megatron-Core, for plans no single stack runs yet."""

UNNAMED_STACK_FRAMEWORK = "generic"
"""The profile a *published run* whose framework text names no known stack is priced with (from 2023 on;
:func:`default_framework`): the run ran, so every feature it names is admitted, priced as Megatron-Core."""

PRE_FUSED_ATTENTION_FRAMEWORK = "megatron-lm-2021"
"""The profile a run that names no known stack is priced with when its source dates from the years this
profile covers (``years``, 2019-2022): before fused attention kernels reached the common stacks
(FlashAttention: Dao et al., May 2022; Megatron-Core with Transformer Engine: 2023), that era's reference
stack, with unfused softmax and attention, prices it closer than today's (:func:`default_framework`)."""

_FIELDS = {f.name for f in fields(FrameworkProfile)}
_TUPLES = {
    "aliases",
    "keywords",
    "years",
    "fitted",
    "schedules",
    "zero_stages",
    "attention_kernels",
    "cp_attention_kernels",
    "cp_kinds",
    "rank_orders",
    "blocking_p2p_schedules",
    "pipeline_zero_stages",
}


def frameworks_dir() -> Path:
    return profiles_dir() / "frameworks"


def framework_names() -> list[str]:
    """Profile ids, sorted."""
    return sorted(p.stem for p in frameworks_dir().glob("*.toml"))


def profile_from_dict(data: dict[str, Any], *, where: str) -> FrameworkProfile:
    """Build a profile from parsed TOML; errors name ``where`` (the file) and the key."""
    bad = set(data) - _FIELDS
    if bad:
        raise ValueError(f"{where}: unknown key(s) {sorted(bad)}; allowed: {sorted(_FIELDS)}")
    for key in _TUPLES & set(data):
        value = data[key]
        if not isinstance(value, list) and not (key == "schedules" and value == "any"):
            any_ = ' or "any"' if key == "schedules" else ""
            raise ValueError(f"{where}: {key} must be a list{any_}, got {shown(value)}")
    values: dict[str, Any] = {
        k: None if (k == "schedules" and v == "any") else tuple(v) if k in _TUPLES else v
        for k, v in data.items()
    }
    if "offers" in values:  # [offers] field = [values]
        if not isinstance(values["offers"], dict):
            raise ValueError(f"{where}: offers must be a table of lists, got {shown(values['offers'])}")
        values["offers"] = {k: tuple(v) if isinstance(v, list) else v for k, v in values["offers"].items()}
    try:
        return FrameworkProfile(**values)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{where}: {exc}") from None


@cache
def _load(path: Path) -> FrameworkProfile:
    return profile_from_dict(read_toml(path, "framework file"), where=str(path))


def load_framework(name_or_path: str | Path | FrameworkProfile = DEFAULT_FRAMEWORK) -> FrameworkProfile:
    """A profile by id or TOML path (a profile passes through). ValueError lists the ids for an unknown one."""
    if isinstance(name_or_path, FrameworkProfile):
        return name_or_path
    path = Path(name_or_path)
    if not path.is_file():
        path = frameworks_dir() / f"{name_or_path}.toml"
    if not path.is_file() and Path(name_or_path).exists():  # a directory or a FIFO says so
        check_input_file(name_or_path, "framework file")
    if not path.is_file():
        raise ValueError(f"framework {str(name_or_path)!r}: unknown; known: {', '.join(framework_names())}")
    return _load(path.resolve())


def all_frameworks() -> list[FrameworkProfile]:
    return [load_framework(n) for n in framework_names()]


def _words(text: str) -> str:
    """``text`` lower-cased with every run of characters other than letters, digits and dots as one space,
    padded, so keywords match whole words whatever the punctuation around them."""
    return " " + re.sub(r"[^0-9a-z.]+", " ", text.strip().lower()) + " "


def profile_for_text(text: str, *, year: int | None = None) -> FrameworkProfile | None:
    """The profile a source's framework ``text`` names: among the profiles whose id or alias equals the text
    (case-insensitive, stripped) or one of whose ``keywords`` occurs in it as whole words, prefer (1) one that
    covers the source's ``year`` (``FrameworkProfile.years``), (2) an exact id or alias, (3) the longest
    keyword (the most specific: "Megatron-DeepSpeed" is DeepSpeed, not Megatron), (4) a fork over the parent its
    ``fit_group`` names ("Zero Bubble (Megatron-LM fork)" is the fork). A year written in ``text``
    itself ("Megatron-LM (2023)") names the stack's vintage and wins over ``year``. None when nothing matches."""
    own_year = source_year(text)
    year = own_year if own_year is not None else year
    key, words = text.strip().lower(), _words(text)
    scored: list[tuple[tuple[bool, bool, int], FrameworkProfile]] = []
    for prof in all_frameworks():
        exact = key == prof.id or key in (a.lower() for a in prof.aliases)
        hits = [len(k) for k in prof.keywords if _words(k) in words]
        if exact or hits:
            scored.append(((prof.covers_year(year), exact, max(hits, default=0)), prof))
    if not scored:
        return None
    best = max(score for score, _ in scored)
    tied = [prof for score, prof in scored if score == best]
    # A fork named beside its parent ("Zero Bubble (Megatron-LM fork)") is the more specific match: its
    # fit_group is the parent's id and it has keywords of its own (a later release of the same stack, such as
    # torchtitan-2025 sharing torchtitan-2024's constants, has the same keywords and is told apart by year).
    by_id = {other.id: other for other in tied}
    forks = [
        prof
        for prof in tied
        if prof.fit_group in by_id and set(prof.keywords) - set(by_id[prof.fit_group].keywords)
    ]
    return (forks or tied)[0]


def default_framework(year: int | None = None) -> FrameworkProfile:
    """The profile for a run whose framework names no profile: ``PRE_FUSED_ATTENTION_FRAMEWORK`` when
    ``year`` (the source's) falls in the years it covers, else ``UNNAMED_STACK_FRAMEWORK``."""
    if year is not None:
        old = load_framework(PRE_FUSED_ATTENTION_FRAMEWORK)
        if old.years and old.covers_year(year):
            return old
    return load_framework(UNNAMED_STACK_FRAMEWORK)


_YEAR = re.compile(r"(?<!\d)(199\d|20\d\d)(?!\d)")
_VENUE_YEAR = re.compile(r"\b(?:[A-Z][A-Za-z]+)\s?['\u2019](\d\d)(?!\d)")


def source_year(source: str) -> int | None:
    """The year of a citation, outside its ``[...]`` locator (where the numbers were read, a copy of any later
    date): the first four-digit year (1990-2099), else a venue's two-digit year (``ICLR'24``, ``SC '21``: 2000 +
    the digits); None if none."""
    outside = re.sub(r"\[[^\]]*\]", " ", source)
    match = _YEAR.search(outside)
    if match:
        return int(match.group(1))
    venue = _VENUE_YEAR.search(outside)
    return 2000 + int(venue.group(1)) if venue else None
