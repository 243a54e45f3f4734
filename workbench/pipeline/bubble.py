"""Closed-form pipeline makespan per schedule, checked against ``workbench.pipeline.simulate`` on uniform stages.

The papers give steady-state bubbles; the screen needs the generators' actual behaviour too (few micro-batches, interleaved zero-bubble, the greedy ZB-H2 and V schedules), so this
module refines it. With F, B = I + W the per-micro-batch times of one rank's whole share (all its vpp
chunks), p ranks, v chunks per rank and m micro-batches, makespan = m (F + B) + bubble + hops * p2p with
``hops = 2 (p v - 1)`` stage boundaries on the critical path and the bubble:

- GPipe, 1F1B (Huang et al. 2019; Narayanan et al. 2021 eq. 1): (p-1)(F+B) for every m;
- interleaved 1F1B and looped BFS (Narayanan et al. 2021 section 2.2): (p-1)(F+B) x
  (1 - (min(m,p) - 1)/(p - 1) (1 - 1/v)): 1/v of 1F1B's once m >= p, serial at m = 1;
- ZB-H1 (Qi et al. 2024 section 3): (p-1)(F + max(I-W, 0))/v once m >= p; at m = 1 the serial chain
  (p-1)(F+I) - W(1 - 1/v); linear in m in between (steps within 15% of the generator's for m < p);
- ZB-H2: the ZB-H1 value below m = 2p, then (p-1) max(F, F+I-2W) (W passes fill the warm-up bubble);
- ZB-V, DualPipeV (Qi et al. 2024 section 4; DeepSeek-V3 report): (p-1) max(F, F+I-W)/2 once m >= 2p
  (within ~30% of the simulated bubble for 0.5 <= I/F, W/F <= 2), (p-1)(F + max(I-W, 0)) below;
- V-Half, V-Min (Qi et al. 2025, controllable memory): memory-capped greedy schedules whose bubble grows
  with m in the generator; priced as 1F1B's (p-1)(F+B), a rough value the refinement replaces;
- DualPipe (DeepSeek-V3 report, arXiv:2412.19437 Table 2): (p/2 - 1)(F&B + B - 3W) with F&B = F + B (the
  simulator runs an overlapped pair's F and B back to back), i.e. (p/2 - 1)(F + 2I - W), exact when I = F and
  W <= F; the generator's bubble is (p/2 - 1)(2F + max(I - W, 0)) whenever I <= F, and lies between the two
  (nearer Table 2 as p grows) when I > F, so the form is (p/2 - 1) max(2F + max(I - W, 0), F + 2I - W).
  F, I, W are one rank's share per micro-batch: one stage of one copy. Its two inputs are awaited together by
  every overlapped pair, so about m (p-1)/p + 3(p/2 - 1) hops reach the critical path (read off the
  simulator: exact for m a multiple of 2p, within one hop otherwise) instead of 2(p v - 1).

Tiling across steps (``tile_s``): the Zero Bubble schedules leave each rank's span shorter than the makespan
(a parallelogram: the last rank starts (p-1)F late, the first one ends early). A stack that steps its
optimizer without a global sync (Qi et al. 2024 section 4, optimizer post-validation) runs the next step's
warm-up in this step's cool-down, so the period is the longest rank span: the makespan less ``tile_s``, read
off the generators:

- ZB-H2: (p-1) min(F, max(2W - I, 0)) once m >= 2p - 1, less min(W, (I+W)/2) per micro-batch below that
  (exact for I >= W, within F/2 otherwise); with I <= 2W <= I + F the bubble becomes the paper's
  (p-1)(F + I - 2W) (arXiv:2401.10241 Table 1);
- ZB-V: half of ZB-H2's (within F/2 of the generator);
- ZB-H1: (min(m, p) - 1) max(W - I, 0) / v (exact for m >= p), the paper's (p-1)(F + I - W) when W > I.

With uneven stages the tile is taken on the other ranks' mean F, I, W like the bubble; the simulated gain
can be larger (a heavier edge rank's whole start lag disappears), so the closed form errs on the slow side.

The forms were read off simulations of the generators with F:I:W in {1:1:1, 1:2:1, 2:1:1, 1:1.5:0.5,
1:0.5:1} for p in {4, 8} (``tests/test_search_closed_forms.py`` re-checks them).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from workbench.pipeline.schedules.registry import get_schedule

Array = Any

FAMILIES: tuple[str, ...] = ("1f1b", "interleaved", "zb-h1", "zb-h2", "v", "capped", "dualpipe")
"""Bubble families; each schedule's record names its own (``ScheduleSpec.bubble_family``)."""


def family_of(names: tuple[str, ...]) -> np.ndarray:
    """Per schedule name, the index in ``FAMILIES`` of its record's ``bubble_family`` (int8).
    ValueError for an unknown name (``workbench.pipeline.schedules.get_schedule``)."""
    return np.array([FAMILIES.index(get_schedule(n).bubble_family) for n in names], dtype=np.int8)


def tiles(names: tuple[str, ...], *, post_validation: bool) -> np.ndarray:
    """Per schedule name, whether consecutive steps overlap (bool): the stack validates its optimizer step
    afterwards (``FrameworkProfile.optimizer_post_validation``) and the schedule ``tiles_across_steps``."""
    return np.array([post_validation and get_schedule(n).tiles_across_steps for n in names], dtype=bool)


def bubble_s(family: Array, *, pp: Array, vpp: Array, m: Array, f_s: Array, i_s: Array, w_s: Array) -> Array:
    """Pipeline bubble in seconds (see the module docstring); 0 where pp = 1."""
    p, v = pp, vpp
    pm1 = np.maximum(p - 1, 1)
    one_f_one_b = (p - 1) * (f_s + i_s + w_s)
    ramp = (np.minimum(m, p) - 1) / pm1
    inter = one_f_one_b * (1 - ramp * (1 - 1 / v))
    zb_steady = (p - 1) * (f_s + np.maximum(i_s - w_s, 0)) / v
    zb_serial = (p - 1) * (f_s + i_s) - w_s * (1 - 1 / v)
    zb = zb_serial + (zb_steady - zb_serial) * ramp
    h2 = np.where(m >= 2 * p, (p - 1) * np.maximum(f_s, f_s + i_s - 2 * w_s), zb)
    v_shape = np.where(
        m >= 2 * p, (p - 1) * np.maximum(f_s, f_s + i_s - w_s) / 2, (p - 1) * (f_s + np.maximum(i_s - w_s, 0))
    )
    dual = (p / 2 - 1) * np.maximum(2 * f_s + np.maximum(i_s - w_s, 0), f_s + 2 * i_s - w_s)
    out = np.choose(family, [one_f_one_b, inter, zb, h2, v_shape, one_f_one_b, np.maximum(dual, 0.0)])
    return np.where(p > 1, out, 0.0)


def tile_s(family: Array, *, pp: Array, vpp: Array, m: Array, f_s: Array, i_s: Array, w_s: Array) -> Array:
    """Seconds by which a tiling schedule's period (its longest rank span) falls short of its makespan (see the
    module docstring); 0 for families that do not tile and where pp = 1."""
    p, fam = pp, np.asarray(family)
    zb_h1 = (np.minimum(m, p) - 1) * np.maximum(w_s - i_s, 0) / vpp
    lag = np.minimum(f_s, np.maximum(2 * w_s - i_s, 0)) * (p - 1)
    ramp = np.maximum(2 * p - 1 - m, 0) * np.minimum(w_s, (i_s + w_s) / 2)
    full = np.where(fam == FAMILIES.index("v"), lag / 2, lag)
    out = np.where(fam == FAMILIES.index("zb-h1"), zb_h1, np.maximum(full - ramp, 0.0))
    tiles = np.isin(fam, (FAMILIES.index("zb-h1"), FAMILIES.index("zb-h2"), FAMILIES.index("v")))
    return np.where(tiles & (p > 1), out, 0.0)


def makespan_s(
    family: Array,
    *,
    pp: Array,
    vpp: Array,
    m: Array,
    f_s: Array,
    i_s: Array,
    w_s: Array,
    p2p_time_s: Array,
    others: tuple[Array, Array, Array] | None = None,
    tiled: Array = False,
) -> Array:
    """m (F + I + W) + bubble + hops p2p: the step's pipeline part, seconds; hops = 2 (p v - 1), DualPipe's
    m (p-1)/p + 3(p/2 - 1) (module docstring). F, I, W are the critical
    rank's; ``others`` the mean (F, I, W) of the other ranks, which set the bubble when stages are uneven
    (1F1B on stages of times t_s: sum of t_s + (m-1) max t_s, so the bubble is the others' sum); default:
    the critical rank's own. Where ``tiled`` (bool, per plan) consecutive steps overlap and the period is the
    makespan less ``tile_s``."""
    dual = np.asarray(family) == FAMILIES.index("dualpipe")
    hops = np.where(dual, m * (pp - 1) / pp + 3 * (pp / 2 - 1), 2 * (pp * vpp - 1))
    hops = np.where(pp > 1, hops, 0)
    bf, bi, bw = others if others is not None else (f_s, i_s, w_s)
    bubble = bubble_s(family, pp=pp, vpp=vpp, m=m, f_s=bf, i_s=bi, w_s=bw)
    if np.any(tiled):
        bubble = bubble - np.where(tiled, tile_s(family, pp=pp, vpp=vpp, m=m, f_s=bf, i_s=bi, w_s=bw), 0.0)
    return m * (f_s + i_s + w_s) + bubble + hops * p2p_time_s
