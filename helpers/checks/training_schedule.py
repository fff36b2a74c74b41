"""Checks for lesson 07 (training): the learning-rate schedule, ``learning_rate(step, config)``.

The probe asks the student's function for the learning rate of every step of a few short
schedules (warm-up, cosine decay, no decay, no warm-up), and of a few steps after the last one.
The judge computes the same with the reference and with each classic mistake, and names the
mistake whose rates the student's reproduce, with the first step where they differ.
"""

from __future__ import annotations

import math

from helpers.checks.core import (
    CheckFailed,
    describe,
    expect_callable,
    need,
    visible_and_hidden,
)
from helpers.checks.errors import caught, raise_caught
from helpers.reference import training_step as ref

TOL = 1e-12
AFTER = 3  # steps asked for after the last update


# (steps, lr, min_lr, warmup_steps, cosine): the fields of TrainConfig the schedule reads
CASES = [
    (23, 0.6, 0.05, 5, True),
    (17, 0.3, 0.02, 0, True),
    (11, 0.5, 0.1, 4, False),
]
HIDDEN_CASES = [
    (9, 0.8, 0.2, 8, True),  # the decay lasts a single step
    (40, 0.07, 0.003, 7, True),
    (6, 0.4, 0.04, 1, True),
    (4, 0.5, 0.05, 5, True),  # the warm-up outlasts the run: steps - 1 - warmup_steps is negative
]


def _label(case) -> str:
    steps, lr, min_lr, warmup, cosine = case
    return f"learning_rate with steps={steps}, lr={lr}, min_lr={min_lr}, warmup_steps={warmup}, cosine={cosine}"


def _config(case):
    from helpers.training import TrainConfig

    steps, lr, min_lr, warmup, cosine = case
    return TrainConfig(steps=steps, lr=lr, min_lr=min_lr, warmup_steps=warmup, cosine=cosine)


def _value(out) -> dict:
    if isinstance(out, bool):
        return {"bad": f"returned {out!r}"}
    if isinstance(out, (int, float)):
        return {"value": float(out)}
    return {"bad": f"returned {describe(out)}"}


def _probe(cases):
    def probe(learning_rate) -> dict:
        expect_callable(learning_rate, "learning_rate")
        runs = []
        for case in cases:
            config = _config(case)
            rates = []
            try:
                for step in range(case[0] + AFTER):
                    rates.append(_value(learning_rate(step, config)))
            except Exception as exc:  # noqa: BLE001 - the judge explains the error
                rates.append({**caught(exc), "step": len(rates)})
            runs.append(rates)
        return {"runs": runs}

    return probe


# ---------------------------------------------------------------------------------------------
# What each classic mistake computes


def _cos(lr, min_lr, progress):
    return min_lr + 0.5 * (1 + math.cos(math.pi * progress)) * (lr - min_lr)


def _variants(case) -> dict[str, list[float]]:
    steps, lr, min_lr, warmup, cosine = case
    n = steps + AFTER
    decay = max(1, steps - 1 - warmup)

    def schedule(warm=None, after=None):
        out = []
        for s in range(n):
            if s < warmup:
                out.append(warm(s) if warm else lr * (s + 1) / warmup)
            elif not cosine:
                out.append(lr)
            else:
                out.append(after(s) if after else _cos(lr, min_lr, min(1.0, (s - warmup) / decay)))
        return out

    variants = {
        "off by one in the warm-up: step 0 gets learning rate 0 (lr * step / warmup_steps), a wasted "
        "update, and the warm-up never reaches lr; use lr * (step + 1) / warmup_steps":
            schedule(warm=lambda s: lr * s / warmup),
        "off by one in the warm-up: it divides by warmup_steps + 1 (or counts one step too many), so "
        "the last warm-up step does not reach lr; use lr * (step + 1) / warmup_steps":
            schedule(warm=lambda s: lr * (s + 1) / (warmup + 1)),
        "the cosine decays to 0 instead of min_lr: it must end at min_lr, lr - min_lr is the height of "
        "the wave": schedule(after=lambda s: _cos(lr, 0.0, min(1.0, (s - warmup) / decay))),
        "the cosine runs over the wrong number of steps: it divides by steps - warmup_steps, so it ends "
        "one step after the last update and the last update does not get min_lr; the decay has "
        "steps - 1 - warmup_steps steps": schedule(after=lambda s: _cos(lr, min_lr, min(1.0, (s - warmup) / max(1, steps - warmup)))),
        "the cosine runs over the wrong number of steps: its progress counts from step 0, not from the "
        "end of the warm-up, so it does not start at lr; use (step - warmup_steps) / (steps - 1 - warmup_steps)":
            schedule(after=lambda s: _cos(lr, min_lr, min(1.0, s / max(1, steps - 1)))),
        "the cosine does not start at lr: its progress counts from step 0, not from the end of the warm-up "
        "(step / (steps - 1 - warmup_steps)); subtract the warm-up: (step - warmup_steps) / (steps - 1 - warmup_steps)":
            schedule(after=lambda s: _cos(lr, min_lr, min(1.0, s / decay))),
        "the cosine runs over the wrong number of steps: it divides by steps, counted from step 0 "
        "(use (step - warmup_steps) / (steps - 1 - warmup_steps))":
            schedule(after=lambda s: _cos(lr, min_lr, min(1.0, s / steps))),
        "after the last step the learning rate climbs back up: the progress of the decay must stop at "
        "1 (min(1, ...)), so every step from the last one on gets min_lr":
            schedule(after=lambda s: _cos(lr, min_lr, (s - warmup) / decay)),
        "the cosine runs a whole period (cos(2 pi progress)), so the rate falls and climbs back to lr; the "
        "decay is half a period, cos(pi * progress), from lr down to min_lr":
            schedule(after=lambda s: _cos(lr, min_lr, 2 * min(1.0, (s - warmup) / decay))),
        "the half wave is in degrees, cos(180 * progress): math.cos takes radians, cos(pi * progress)":
            schedule(after=lambda s: min_lr + 0.5 * (1 + math.cos(180 * min(1.0, (s - warmup) / decay))) * (lr - min_lr)),
        "a linear decay, not a cosine: use min_lr + (lr - min_lr) * (1 + cos(pi * progress)) / 2":
            schedule(after=lambda s: lr - (lr - min_lr) * min(1.0, (s - warmup) / decay)),
        f"the decay ends at 0.1 × lr = {0.1 * lr:g}, not at config.min_lr = {min_lr:g}: a floor of a tenth of the "
        "peak (GPT-3's, nanoGPT's default min_lr) written in place of the config's own":
            schedule(after=lambda s: _cos(lr, 0.1 * lr, min(1.0, (s - warmup) / decay))),
    }
    if steps - 1 - warmup < 0:  # a negative span: only a rule that replaces just 0 departs here
        variants["the span of the decay, steps - 1 - warmup_steps, is replaced by 1 only when it is 0 "
                 "(`(...) or 1`, say), not whenever it is smaller than 1: here the warm-up outlasts the run, the span "
                 f"is {steps - 1 - warmup}, and progress counts down; max(1, steps - 1 - warmup_steps) covers both"] = \
            schedule(after=lambda s: _cos(lr, min_lr, min(1.0, (s - warmup) / ((steps - 1 - warmup) or 1))))
    if not cosine:
        variants["config.cosine is False, but you decayed anyway: without cosine the rate stays at lr "
                 "after the warm-up"] = [
            lr * (s + 1) / warmup if s < warmup else _cos(lr, min_lr, min(1.0, (s - warmup) / decay))
            for s in range(n)
        ]
    return variants


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= TOL * max(1.0, abs(b))


def _phases(case, bad: list[int]) -> str:
    """Which parts of the schedule the wrong steps fall in, in words."""
    steps, _, _, warmup, cosine = case
    parts = [("the warm-up", range(0, warmup)), ("the decay" if cosine else "the steps after the warm-up",
             range(warmup, steps)), (f"the {AFTER} steps after the last update", range(steps, steps + AFTER))]
    hit = [f"{name} ({sum(s in span for s in bad)} of {len(span)} steps)" for name, span in parts
           if any(s in span for s in bad)]
    return "wrong in " + " and in ".join(hit) + ", right everywhere else" if len(hit) < 3 else "wrong in every part"


def _fit(xs: list[float], ys: list[float]) -> tuple[float, float] | None:
    """Least squares ys = a * xs + b, when it fits every point (else None)."""
    n = len(xs)
    if n < 2:
        return None
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        return None
    a = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx
    b = my - a * mx
    return (a, b) if all(abs(a * x + b - y) <= 1e-6 for x, y in zip(xs, ys, strict=True)) else None


def _ratio(c: float, case) -> str:
    """'0.217391 (= warmup_steps / steps)' when c is a ratio of the case's numbers."""
    steps, _, _, warmup, _ = case
    named = {"warmup_steps": warmup, "steps": steps, "steps - 1": steps - 1, "warmup_steps + 1": warmup + 1,
             "2": 2, "π": math.pi, "1": 1}
    for (a, x), (b, y) in ((p, q) for p in named.items() for q in named.items()):
        if a != b and x and y and abs(c - x / y) <= 1e-9 * abs(c) and not (a == "1" and b == "1"):
            expr = f"{a} / {b}" if b != "1" else a
            return f"{c:.6g}" if expr == f"{c:.6g}" else f"{c:.6g} (= {expr})"
    return f"{c:.6g}"


def _pattern(case, want: list[float], got: list[float], bad: list[int]) -> str:
    """What the wrong rates have in common (a shift, a factor, a decay of another length...)."""
    steps, lr, min_lr, warmup, cosine = case
    where = _phases(case, bad)
    for d in (1, -1, 2, -2):
        if all(0 <= s + d < len(want) and _close(got[s], want[s + d]) for s in bad):
            return (f"the schedule is shifted by {abs(d)} step{'s' if abs(d) > 1 else ''}: step s gets the rate "
                    f"of step s {'+' if d > 0 else '-'} {abs(d)} (an off-by-{abs(d)} in the step count); {where}")
    if bad == [warmup] and warmup:
        return "the first step after the warm-up gets the peak, lr: only that step is wrong, so check the boundary (< or <=)"
    # zeros count here (unlike the diagnosis layer's rule_rounded): a rate of exactly 0 where the reference's is a
    # fraction of lr is what lr * (step + 1) // warmup_steps gives
    if all(float(got[s]).is_integer() and got[s] in (math.floor(want[s]), math.trunc(want[s])) for s in bad):
        return ("the wrong rates are the reference's rounded down to whole numbers: an integer division (//) or int() "
                f"where / was meant; {where}")
    named = {"lr": lr, "min_lr": min_lr}
    mine = [n for n, v in named.items() if all(_close(got[s], v) for s in bad)]
    theirs = [n for n, v in named.items() if all(_close(want[s], v) for s in bad)]
    if mine and theirs and mine[0] != theirs[0]:  # one named rate where another named rate belongs
        room = (f" There is no room for a decay here (steps - 1 - warmup_steps = {steps - 1 - warmup}): every step "
                "from the last update on still gets min_lr (is that case handled apart, returning lr?)"
                if cosine and steps - 1 - warmup <= 0 and mine[0] == "lr" else "")
        return (f"the {len(bad)} wrong step{'s' if len(bad) > 1 else ''} give {mine[0]} = {named[mine[0]]:g} where the "
                f"reference gives {theirs[0]} = {named[theirs[0]]:g}; {where}{'.' if room else ''}{room}")
    if all(want[s] for s in bad) and len({round(want[s], 12) for s in bad}) > 1:  # one value alone fits any factor
        ratios = [got[s] / want[s] for s in bad]
        if max(ratios) - min(ratios) <= 1e-9 * max(1.0, abs(ratios[0])):
            return f"every wrong rate is {_ratio(ratios[0], case)} × the reference's (a constant factor); {where}"
    warm = [s for s in bad if s < warmup]
    if warm and len(warm) == len(bad) and all(_close(got[s], lr) for s in warm):
        return f"there is no warm-up: steps 0 to {warmup - 1} already get lr (here cosine={cosine}); {where}"
    if cosine and all(_close(got[s], lr + min_lr - want[s]) for s in bad):
        return ("the decay runs backwards: it climbs from min_lr to lr instead of falling from lr to min_lr (the "
                f"cosine's sign, or lr and min_lr swapped); {where}")
    decay = [s for s in range(warmup, steps) if s in bad]
    if cosine and lr != min_lr and decay and all(s >= warmup for s in bad):
        heights = [(got[s] - min_lr) / (want[s] - min_lr) for s in decay if abs(want[s] - min_lr) > 1e-9]
        if heights and max(abs(h) for h in heights) <= 1e-9:
            return ("the decay is flat at min_lr from its first step: the progress does not grow with the step (it is "
                    f"already 1; it must be (step - warmup_steps) / (steps - 1 - warmup_steps)): does the decay's "
                    f"length come out 1 or less, where it is steps - 1 - warmup_steps = {steps - 1 - warmup}? {where}")
        if heights and max(heights) - min(heights) <= 1e-9 * max(1.0, abs(heights[0])):
            return (f"the wave is {_ratio(heights[0], case)} × as high as it should be (rate - min_lr is that "
                    f"multiple of the reference's): a factor of the cosine term is wrong or missing; {where}")
        inside = all(min_lr - 1e-12 <= got[s] <= lr + 1e-12 for s in decay)
        if inside:  # read the progress of the cosine back from the rates
            progress = [math.acos(max(-1.0, min(1.0, 2 * (got[s] - min_lr) / (lr - min_lr) - 1))) / math.pi for s in decay]
            if all(_close(got[s], lr) for s in range(warmup, steps)):  # lr at every step of the decay: none
                return (f"with cosine={cosine} the rate stays at lr after the warm-up, as it does without the cosine: "
                        f"the decay never happens (is the cosine's condition read the other way?); {where}")
            if all(min(p, 1 - p) <= 1e-9 for p in progress):
                return ("within the decay the rate jumps between lr and min_lr: the progress is 0 or 1 and nothing "
                        f"in between (an integer division //, or a rounded progress); {where}")
            line = _fit([float(s) for s in decay], progress)
            if line and line[0] > 0:
                span, start = 1 / line[0], -line[1] / line[0]
                right = max(1, steps - 1 - warmup)
                pi = " (the span is π times too long: cos(progress) instead of cos(π · progress))" if abs(
                    span / right - math.pi) < 1e-6 else ""
                return (f"the rates follow a cosine whose progress runs from step {start:.4g} over {span:.4g} steps; it "
                        f"should run from step {warmup} (the end of the warm-up) over {right} steps{pi}; {where}")
    if warm and len(warm) == len(bad):
        return (f"during the warm-up step s gets lr * (s + 1) / warmup_steps (step 0: {want[0]:.9g}, step "
                f"{warmup - 1}: lr), yours climbs from {got[0]:.9g} to {got[warmup - 1]:.9g}; {where}")
    if bad[0] == 0 and warmup == 0:
        return f"with warmup_steps = 0 there is no warm-up: step 0 already gets lr; {where}"
    if not cosine:
        return f"without cosine the rate stays at lr after the warm-up; {where}"
    return ("after the warm-up: min_lr + (lr - min_lr) * (1 + cos(pi * progress)) / 2, with progress = "
            f"(step - warmup_steps) / (steps - 1 - warmup_steps); {where}")


def _values(rates) -> list[float] | None:
    """A case's rates as floats, or None where one step raised or is not a float."""
    if not isinstance(rates, list):
        return None
    values = [item.get("value") if isinstance(item, dict) else None for item in rates]
    return values if all(isinstance(v, float) for v in values) else None


def _confirmed(label: str, cases, data: dict) -> bool:
    """Whether the mistake ``label`` also gives the student's rates in every other case where it is one
    of the mistakes considered: a mistake that one degenerate case cannot tell apart from the student's
    (no room for a decay, say) is named only when the other cases agree."""
    for case, rates in zip(cases, data.get("runs") or [], strict=False):
        got, variants = _values(rates), _variants(case)
        if got is None or label not in variants or len(got) != len(variants[label]):
            continue
        if not all(_close(g, v) for g, v in zip(got, variants[label], strict=True)):
            return False
    return True


def _judge(cases):
    def judge(data: dict) -> str:
        for case, rates in zip(cases, need(data.get("runs"), list, len(cases)), strict=True):
            steps, lr, min_lr, warmup, cosine = case
            what = _label(case)
            config = _config(case)
            want = [ref.learning_rate(s, config) for s in range(steps + AFTER)]
            got = []
            for s, item in enumerate(need(rates, list)):  # it stops at a step that raised
                need(item, dict)
                raise_caught(f"{what}: step {s}", item, [("division by zero", (
                    "With warmup_steps = 0 there is no warm-up; and the decay must divide by at least 1 "
                    "(max(1, steps - 1 - warmup_steps))."))])
                if "bad" in item:
                    raise CheckFailed(f"{what}: step {s} {item['bad']}; return the learning rate as a Python "
                                      "float (float(...), or .item() of a tensor).")
                got.append(need(item.get("value"), float))
            need(got, list, len(want))
            bad = [s for s in range(len(want)) if not _close(got[s], want[s])]
            if cosine and warmup == steps - 1 and warmup in bad and _close(got[warmup], min_lr):
                # the decay has no step: the first step after the warm-up is also the last update, where
                # the docstring asks for lr (the wave's start) and min_lr (its end): either is right
                bad.remove(warmup)
            if not bad:
                continue
            first = bad[0]
            evidence = (
                f"{len(bad)} of {len(want)} steps differ; first at step {first}: expected {want[first]:.9g}, "
                f"got {got[first]:.9g}"
            )
            for label, rates_v in _variants(case).items():
                if all(_close(g, v) for g, v in zip(got, rates_v, strict=True)) and _confirmed(label, cases, data):
                    raise CheckFailed(f"{what}: {label}. Evidence: {evidence}.")
            raise CheckFailed(f"{what}: {_pattern(case, want, got, bad)}. Evidence: {evidence}.")
        return (
            "learning_rate: " + "; ".join(f"steps={c[0]}, warmup_steps={c[3]}, cosine={c[4]}" for c in cases)
            + f": the rate of every step, and of {AFTER} steps after the last, matches the reference."
        )

    return judge


def _other_rates(case, rng):
    """While grading: other rates, the same steps and warm-up."""
    steps, _, _, warmup, cosine = case
    lr = round(rng.uniform(0.01, 1.0), 4)
    return steps, lr, round(lr * rng.uniform(0.01, 0.5), 6), warmup, cosine


check_learning_rate, check_learning_rate_hidden = visible_and_hidden(
    "check_learning_rate", _probe, _judge, CASES, HIDDEN_CASES, _other_rates)
