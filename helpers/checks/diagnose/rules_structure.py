"""Mismatch rules about structure: a factor or offset per slice or per vector, the last two axes
transposed, slices reordered, entries scrambled by a view/transpose mix-up, a shift along an axis,
and where the wrong entries are; and the correct output."""

from __future__ import annotations

import itertools

import torch

from helpers.checks.diagnose.case import _Case, _where
from helpers.checks.diagnose.finding import NOTHING, Finding
from helpers.checks.diagnose.words import _axis, _first_six


def _per_row(c: _Case, em: torch.Tensor, gm: torch.Tensor, how: str) -> torch.Tensor | None:
    """The ``(rows,)`` factors (``how="factor"``) or offsets (``"offset"``) that take each row of the
    reference ``em`` to the output's row ``gm``: when every row has one and they are not all equal
    (one value for all is ``rule_factor``'s business); otherwise None."""
    if em.shape[0] < 2 or em.shape[1] < 2:
        return None
    if how == "factor":
        den = (em * em).sum(dim=1)
        if (den == 0).any():
            return None
        fit = (em * gm).sum(dim=1) / den
        model = fit[:, None] * em
    else:
        fit = (gm - em).mean(dim=1)
        model = em + fit[:, None]
    if not c.close(gm, model) or float(fit.max() - fit.min()) <= 1e-6 * max(1.0, float(fit.abs().max())):
        return None
    return fit


_SCALE_WRONG = ("is right but its scale is not, which is what a normalisation (a division by a norm, a std or "
                "a sum)")

#: the fits per part: (the parts are slices along an axis, or the vectors along it; "factor" or
#: "offset"; what it means, with {axis}, {letter}, {others}, {n} and {values} filled in)
_PER_PART = {
    "slice factors": ("slices", "factor", "each slice along {axis} is the reference times its own factor ({values} "
                      "for {letter} = 0, 1, …): the shape of each slice " + _SCALE_WRONG + " that is missing or "
                      "computed over the wrong axis does"),
    "slice offsets": ("slices", "offset", "each slice along {axis} is the reference plus its own constant ({values} "
                      "for {letter} = 0, 1, …): a term that depends only on the position along {axis} (a bias, an "
                      "offset per {letter}) is wrong or missing"),
    "fibre factors": ("vectors", "factor", "each vector along {axis} (one per ({others}) index) is the reference's "
                      "times its own factor ({values}): the direction of each vector " + _SCALE_WRONG + " does when "
                      "it is computed from something else than each input vector itself: over other entries than "
                      "the {n} along {axis}, or of the vector after it was already changed (scaled by a weight, "
                      "shifted)?"),
}


def _per_part(c: _Case, which: str) -> Finding:
    """The first axis whose parts (``_PER_PART``) are each the reference's part times, or plus, a value
    of their own, told in words."""
    parts, how, says = _PER_PART[which]
    if not c.finite():
        return NOTHING
    axes = c.axes_of(2) if parts == "slices" else reversed(c.axes_of(2))
    for k, n in axes:
        if parts == "slices":
            em, gm = c.slices(k)
        else:  # (rows, n): one row per index of the other axes
            em, gm = c.e.movedim(k, -1).reshape(-1, n), c.g.movedim(k, -1).reshape(-1, n)
            if bool(((em - em[:, :1]).abs() <= 1e-12 * (1 + em.abs())).all()):
                continue  # every reference vector along this axis is constant: any two such are proportional
        fit = _per_row(c, em, gm, how)
        if fit is not None and which == "fibre factors" and _nearly_one(fit):
            return Finding(f"{_one_factor(fit, n, _axis(k, c.axes))} Evidence: {c.evidence()}.", which)
        if fit is not None and which == "slice factors" and k == c.e.dim() - 1 and c.e.dim() >= 2:
            told = (f"each slice along {_axis(k, c.axes)}, the last axis, is the reference times its own factor "
                    f"({_first_six(fit)} for {c.letter(k) or 'index'} = 0, 1, …): every feature is off by a factor of "
                    "its own, the same at every position. Is a scale per feature (a weight or gain of that size) "
                    "wrong or applied in another form, or is each feature normalised over the other axes?")
            return Finding(f"{told} Evidence: {c.evidence()}.", which)
        if fit is not None:
            others = ", ".join(c.letter(i) or f"axis {i}" for i in range(c.e.dim()) if i != k)
            told = says.format(axis=_axis(k, c.axes), letter=c.letter(k) or "index", others=others, n=n,
                               values=_first_six(fit))
            return Finding(f"{told}{'' if told.endswith('?') else '.'} Evidence: {c.evidence()}.", which)
    return NOTHING


def _nearly_one(fit) -> bool:
    """Every part's factor within 5 % of their mean: one scale for all, moved a little (an eps, say)."""
    mean = float(fit.mean())
    return mean != 0 and float((fit - mean).abs().max()) <= 0.05 * abs(mean)


def _one_factor(fit, n: int, axis: str) -> str:
    """Words for vectors that are all the reference's times about one factor, with that factor read
    against the vectors' length ``n`` when it is one of its simple powers."""
    mean = float(fit.mean())
    powers = {f"1/sqrt({n})": n ** -0.5, f"sqrt({n})": n ** 0.5, f"1/{n}": 1 / n, f"{n}": float(n)}
    named = next((words for words, value in powers.items() if abs(mean - value) <= 0.02 * value), None)
    said = (f"each vector along {axis} is the reference's times about the same factor ({_first_six(fit)}), close to "
            f"{named}, where {n} is the vectors' length: the direction of every vector is right and one scale is off")
    if named in (f"1/sqrt({n})", f"sqrt({n})"):
        said += (", as when a square root is taken of a sum where the mean was meant (a norm where a root mean square "
                 "was), or of a mean where the sum was")
    elif named in (f"1/{n}", f"{n}"):
        said += ", as when a sum is taken where the mean was meant, or a mean where the sum was"
    return said + "."


def rule_slice_factors(c: _Case) -> Finding:
    """Each slice along one axis (all other indices varying) is the reference's times its own factor."""
    return _per_part(c, "slice factors")


def rule_fibre_factors(c: _Case) -> Finding:
    """Each vector along one axis (all other indices fixed) is the reference's times its own factor."""
    return _per_part(c, "fibre factors")


def rule_slice_offsets(c: _Case) -> Finding:
    """Each slice along one axis is the reference's plus its own constant."""
    return _per_part(c, "slice offsets")


def rule_transposed(c: _Case) -> Finding:
    e, g = c.e, c.g
    if e.dim() < 2 or e.shape[-1] != e.shape[-2] or e.shape[-1] < 2:
        return NOTHING
    t = e.transpose(-1, -2)
    if c.close(g, t) and not c.close(t, e):
        names = ""
        if c.axes:
            names = f" ({c.axes[-2]}, {c.axes[-1]})"
        return Finding(
            f"the output is the reference with its last two axes{names} transposed: the two indices "
            f"of a square matrix are swapped (rows for columns). Evidence: {c.evidence()}.", "last two axes transposed"
        )
    return NOTHING


def rule_permuted(c: _Case) -> Finding:
    for k, n in c.axes_of(2):
        em, gm = c.slices(k)
        perm = []
        for i in range(n):
            match = [j for j in range(n) if c.close(gm[i], em[j])]
            if not match:
                break
            perm.append(match[0] if match[0] not in perm else next((j for j in match if j not in perm), match[0]))
        if len(perm) != n or sorted(perm) != list(range(n)) or perm == list(range(n)):
            continue
        if c.close(gm, em[perm]) and not c.close(gm, em):
            letter = c.letter(k) or "index"
            reversed_ = perm == list(range(n - 1, -1, -1))
            how = "reversed" if reversed_ else "reordered"
            return Finding(
                f"the slices along {_axis(k, c.axes)} are right but {how}: output {letter} = i holds the "
                f"reference's {letter} = perm[i], with perm = {perm}. Evidence: {c.evidence()}.", f"slices {how}"
            )
    return NOTHING


def rule_scrambled(c: _Case) -> Finding:
    """Same shape, but the data is the reference transposed and re-cut (a view/transpose mix-up)."""
    e, g = c.e, c.g
    shape = tuple(e.shape)
    for i, j in itertools.combinations(range(e.dim()), 2):
        if shape[i] == shape[j]:
            continue
        swapped = list(shape)
        swapped[i], swapped[j] = swapped[j], swapped[i]
        recut = e.transpose(i, j).reshape(shape)  # transposed, then viewed back: the order changed
        uncut = e.reshape(swapped).transpose(i, j)  # viewed as swapped, then transposed back
        for candidate, how in (
            (recut, "transposed then reshaped back to the expected shape: a transpose where a "
                    "view/reshape alone was needed"),
            (uncut, "reshaped to the swapped shape then transposed: a view/reshape where a "
                    "transpose was needed"),
        ):
            if c.close(g, candidate) and not c.close(candidate, e):
                return Finding(
                    f"the output holds the right numbers in a scrambled order, the reference's entries "
                    f"{how} ({_axis(i, c.axes)} and {_axis(j, c.axes)}). Evidence: {c.evidence()}.",
                    "entries scrambled"
                )
    return NOTHING


def rule_shifted(c: _Case) -> Finding:
    e, g = c.e, c.g
    for k, n in c.axes_of(3):
        for s in sorted(range(-(n - 2), n - 1), key=abs):
            if s == 0:
                continue
            # got[..., i] == expected[..., i + s] where i + s is inside the axis
            lo, hi = max(0, -s), min(n, n - s)
            if hi - lo < max(2, n // 2):
                continue
            gs, es = g.narrow(k, lo, hi - lo), e.narrow(k, lo + s, hi - lo)
            if c.close(gs, es) and not c.close(gs, e.narrow(k, lo, hi - lo)):
                letter = c.letter(k) or "i"
                sign = f"+ {s}" if s > 0 else f"- {-s}"
                return Finding(
                    f"the output is shifted by {s:+d} along {_axis(k, c.axes)}: output {letter} = i holds the "
                    f"reference's {letter} = i {sign} (checked for every i where both exist), an "
                    f"off-by-{abs(s)} in positions or indices. Evidence: {c.evidence()}.", f"shifted by {s:+d}"
                )
    return NOTHING


def rule_localised(c: _Case) -> Finding:
    bad = ~torch.isclose(c.g, c.e, atol=c.atol, rtol=c.rtol, equal_nan=True)
    if not bad.any():
        return NOTHING
    if bad.all():
        return Finding(  # where, not why: no cause
            "every entry of the output is wrong (no position along any axis is right). "
            f"Evidence: {c.evidence()}."
        )
    where = _where(bad, c, with_rest=True)
    if not where:
        return NOTHING
    return Finding(f"only part of the output is wrong: {where}. Evidence: {c.evidence()}.")


def _correct(c: _Case) -> Finding:
    if c.close(c.g, c.e) and c.got.dtype == c.dtype:
        return Finding("it matches the reference within tolerance (nothing to explain). Evidence: no mismatch.")
    return NOTHING
