"""Lesson 10's GELU: what its classic mistakes return, and what a wrong curve is, read from exact fits.

``helpers.checks.gpt2`` names a mistake when its output here is the student's; otherwise it reads
the student's curve on ``GRID`` (:func:`gelu_reading`): which term or constant departs.
"""

from __future__ import annotations

import math

import torch

GRID = torch.linspace(-5, 5, 201, dtype=torch.float64)  # where the judge reads the student's curve


_C, _K = math.sqrt(2 / math.pi), 0.044715
_NAMED = {1 / math.sqrt(2): "1/sqrt(2)", 1.0: "1", math.sqrt(2): "sqrt(2)", 0.5: "1/2", _C: "sqrt(2/pi)",
          2 / math.pi: "2/pi (the square root is missing)", math.sqrt(2 * math.pi): "sqrt(2 pi)",
          math.sqrt(math.pi / 2): "sqrt(pi/2) (the fraction upside down)", 1.702: "1.702"}


def _number(v: float) -> str:
    name = next((n for k, n in _NAMED.items() if abs(v - k) < 1e-4 * k), None)
    return f"{v:.4g}" + (f" = {name}" if name else "")


def gelu_reading(y: torch.Tensor, approximate: str) -> str | None:
    """What the student's curve y (on GRID) is, from exact fits: which term or constant departs."""
    x = GRID
    erf = approximate == "none"
    form = "erf(x / sqrt(2))" if erf else "tanh(sqrt(2/pi) (x + 0.044715 x^3))"
    squash = torch.erf(x / math.sqrt(2)) if erf else torch.tanh(_C * (x + _K * x**3))

    def fit(*basis, target=y, keep=None):
        A, t = torch.stack(basis, 1), target
        if keep is not None:
            A, t = A[keep], t[keep]
        sol = torch.linalg.lstsq(A, t.unsqueeze(1)).solution.squeeze(1)
        ok = bool(((A @ sol - t).abs() <= 1e-6 * (1 + t.abs())).all()) and len(t) >= 2 * len(basis)
        return [float(v) for v in sol] if ok else None

    if (ab := fit(x, x * squash)) is not None:
        if tuple(round(v, 6) + 0.0 for v in ab) == (0.5, 0.5):  # the curve is right where it was read
            return (f"your curve is right from {float(x[0]):g} to {float(x[-1]):g} (read on a grid there), so it departs "
                    "only at larger |x| (are large inputs clamped, cut off or handled apart?)")
        known = {(0.5, 0.0): f"the {form} term is missing: you returned 0.5 x",
                 (0.0, 0.5): f"the 1 + is missing: you returned 0.5 x {form}; GELU is 0.5 x (1 + {form})",
                 (0.5, -0.5): f"the sign before {form} is flipped: 1 - instead of 1 +"}
        return known.get(tuple(round(v, 6) + 0.0 for v in ab)) or (f"your output is exactly {ab[0]:.4g} x + {ab[1]:.4g} x {form}; GELU is "
                                         f"0.5 x + 0.5 x {form}: a constant factor is off")
    for scale in (1.0, 0.5, math.sqrt(2), 1 / math.sqrt(2), _C):  # the inside scaled by another constant
        inside = "x" if scale == 1.0 else f"{scale:.7g} x"
        other = torch.erf(scale * x) if erf else torch.tanh(scale * (x + _K * x**3))
        if abs(scale - (1 / math.sqrt(2) if erf else _C)) < 1e-12 or (ab := fit(x, x * other)) is None:
            continue
        told = (f"erf({inside})" if erf else f"tanh({scale:.7g} (x + 0.044715 x^3))")
        outside = (" the division by sqrt(2) sits outside the erf, erf(x) / sqrt(2); it belongs inside, erf(x / sqrt(2))"
                   if erf and scale == 1.0 and abs(ab[1] - 0.5 / math.sqrt(2)) < 1e-6 else " the constant inside is off")
        return f"your output is exactly {ab[0]:.4g} x + {ab[1]:.4g} x {told}, where GELU is 0.5 x + 0.5 x {form}:{outside}"
    if (ab := fit(torch.ones_like(x), squash)) is not None:
        return f"your output is exactly {ab[0]:.4g} + {ab[1]:.4g} {form}, without the leading x: GELU is x times 0.5 (1 + {form})"
    if (abc := fit(x, x * squash, x * squash**2)) is not None:
        return (f"your output is exactly {abc[0]:.4g} x + {abc[1]:.4g} x E + {abc[2]:.4g} x E^2 with E = {form}: the factor "
                "(1 + E) appears squared (used twice); GELU is 0.5 x (1 + E)")
    if (pq := fit(x, x**2, x**4)) is not None:
        return (f"your output is a polynomial, 0.5 x (1 + u) with u = {2 * pq[1]:.4g} x + {2 * pq[2]:.4g} x^3: the "
                f"{'erf' if erf else 'tanh'} was not applied to u")
    s = torch.where(x.abs() > 0.05, 2 * y / x - 1, torch.zeros_like(x))  # = E if the outer form is right
    keep = (x.abs() > 0.05) & (s.abs() < 0.999)
    u = torch.special.erfinv(s.clamp(-0.999, 0.999)) if erf else torch.atanh(s.clamp(-0.999, 0.999))
    inner = fit(torch.ones_like(x), x, x**2, x**3, target=u, keep=keep) if int(keep.sum()) > 40 else None
    if inner is not None:
        r, p, p2, q = inner
        u = r + p * x + p2 * x**2 + q * x**3
        rebuilt = 0.5 * x * (1 + (torch.erf(u) if erf else torch.tanh(u)))  # every point, the saturated ones too
        if bool(((rebuilt - y).abs() <= 1e-6 * (1 + y.abs())).all()):
            want_p, want_k = (1 / math.sqrt(2), 0.0) if erf else (_C, _K)
            parts = [f"a constant term {r:.4g}"] if abs(r) > 1e-6 else []
            parts += [f"a square term {p2:.4g} x^2"] if abs(p2) > 1e-6 else []
            if abs(p - want_p) > 1e-7 * want_p:
                parts.append(f"the factor of x is {_number(p)}" if abs(p - want_p) > 1e-3 * want_p else
                             f"the factor of x is {p:.7g}, a rounded {want_p:.7g}: compute the constant (math.sqrt, math.pi)")
            k = q / p if p else 0.0
            if abs(k - want_k) > 1e-7:
                parts.append(f"a cubic term {q:.4g} x^3" if erf else f"the cubic coefficient is {k:.6g} " + (
                    "(it is missing)" if abs(k) < 1e-9 else "(a rounded 0.044715)" if abs(k - _K) < 1e-3 * _K else "(not 0.044715)"))
            want = "x / sqrt(2) = 0.7071068 x" if erf else "sqrt(2/pi) (x + 0.044715 x^3) = 0.7978846 x + 0.0356774 x^3"
            return (f"the outer 0.5 x (1 + {'erf' if erf else 'tanh'}(...)) fits your values exactly, with the inside "
                    f"= {r:.4g} + {p:.7g} x + {p2:.4g} x^2 + {q:.6g} x^3 where it should be {want}: " + "; ".join(parts or ["a tiny difference"]))
    ref = 0.5 * x * (1 + squash)
    off = (y - ref).abs() > 1e-3 * (1 + ref.abs())
    if bool((y >= 0).all()):
        return ("yours is never negative, while GELU dips below 0 for negative x (to about -0.17 near x = -0.75): "
                "nothing may cut off the negative values (no clamp, no relu)")
    if not bool(off[:5].any() or off[-5:].any() or off[100]):
        worst = int((y - ref).abs().argmax())
        return (f"your curve matches GELU at both ends (x = ±5) and at x = 0 and departs in the bend, most at "
                f"x = {float(x[worst]):.3g} ({float(y[worst]):.5g}, expected {float(ref[worst]):.5g})")
    marks = [f"at x = {v:g} yours is {float(y[i]):.4g} where GELU is {float(ref[i]):.4g} ({why})" for i, v, why in
             ((0, -5, "it tends to 0 for very negative x"), (100, 0, "0 at 0"), (200, 5, "it tends to x for large x"))
             if bool(off[i])]
    return "your curve departs from GELU's landmarks: " + "; ".join(marks) if marks else None


def gelu_variants(x: torch.Tensor, approximate: str) -> dict[str, torch.Tensor]:
    """What gelu returns under each classic mistake (x in float64)."""
    c = math.sqrt(2 / math.pi)
    erf_form = 0.5 * x * (1 + torch.erf(x / math.sqrt(2)))
    tanh_form = 0.5 * x * (1 + torch.tanh(c * (x + 0.044715 * x**3)))
    other = tanh_form if approximate == "none" else erf_form
    return {
        f"you computed the other form, the {'tanh approximation' if approximate == 'none' else 'exact erf form'}: "
        f"approximate={approximate!r} asks for the "
        + ("exact erf form, 0.5 x (1 + erf(x / sqrt 2))" if approximate == "none" else "tanh form"): other,
        "the erf form needs erf(x / sqrt(2)), not erf(x)": 0.5 * x * (1 + torch.erf(x)),
        "the tanh form lost its cubic term: tanh(sqrt(2/pi) * (x + 0.044715 x^3))": 0.5 * x * (1 + torch.tanh(c * x)),
        "the tanh form's constant is sqrt(2/pi), about 0.798, not sqrt(2 pi)": 0.5 * x * (1 + torch.tanh(math.sqrt(2 * math.pi) * (x + 0.044715 * x**3))),
        "the leading 0.5 is missing": x * (1 + torch.erf(x / math.sqrt(2))) if approximate == "none" else x * (1 + torch.tanh(c * (x + 0.044715 * x**3))),
        "this is the sigmoid approximation x * sigmoid(1.702 x), a third form; use the one asked for": x * torch.sigmoid(1.702 * x),
        "this is ReLU, not GELU": torch.relu(x),
    }
