"""Checks for lesson 07 (training): the learning-rate schedule, ``learning_rate(step, config)``.

The probe asks the student's function for the learning rate of every step of a few short
schedules (warm-up, cosine decay, no decay, no warm-up), and of a few steps after the last one.
The judge computes the same with the reference and with each classic mistake, and names the
mistake whose rates the student's reproduce, with the first step where they differ.
"""

from __future__ import annotations

import math

import torch

from helpers.checks.core import Check, CheckFailed, describe

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
    if isinstance(out, torch.Tensor) and out.numel() == 1 and out.is_floating_point():
        return {"value": float(torch.Tensor.detach(out).reshape(-1)[0]), "tensor": True}
    return {"bad": f"returned {describe(out)}"}


def _probe(cases):
    def probe(learning_rate) -> dict:
        if not callable(learning_rate):
            raise CheckFailed(f"expected the function learning_rate, got {describe(learning_rate)}")
        runs = []
        for case in cases:
            config = _config(case)
            rates = []
            try:
                for step in range(case[0] + AFTER):
                    rates.append(_value(learning_rate(step, config)))
            except Exception as exc:  # noqa: BLE001 - the judge explains the error
                rates.append({"error": f"{type(exc).__name__}: {exc}"[:1500]})
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
        "the cosine runs over the wrong number of steps: it divides by steps, counted from step 0 "
        "(use (step - warmup_steps) / (steps - 1 - warmup_steps))":
            schedule(after=lambda s: _cos(lr, min_lr, min(1.0, s / steps))),
        "after the last step the learning rate climbs back up: the progress of the decay must stop at "
        "1 (min(1, ...)), so every step from the last one on gets min_lr":
            schedule(after=lambda s: _cos(lr, min_lr, (s - warmup) / decay)),
        "a linear decay, not a cosine: use min_lr + (lr - min_lr) * (1 + cos(pi * progress)) / 2":
            schedule(after=lambda s: lr - (lr - min_lr) * min(1.0, (s - warmup) / decay)),
    }
    if not cosine:
        variants["config.cosine is False, but you decayed anyway: without cosine the rate stays at lr "
                 "after the warm-up"] = [
            lr * (s + 1) / warmup if s < warmup else _cos(lr, min_lr, min(1.0, (s - warmup) / decay))
            for s in range(n)
        ]
    return variants


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= TOL * max(1.0, abs(b))


def _judge(cases):
    def judge(data: dict) -> str:
        from helpers.reference.training_step import learning_rate as reference

        runs = data.get("runs")
        if not isinstance(runs, list) or len(runs) != len(cases):
            raise CheckFailed("the check's data is incomplete")
        for case, rates in zip(cases, runs, strict=True):
            steps, lr, min_lr, warmup, cosine = case
            what = _label(case)
            config = _config(case)
            want = [reference(s, config) for s in range(steps + AFTER)]
            if not isinstance(rates, list) or not rates:
                raise CheckFailed("the check's data is incomplete")
            got = []
            for s, item in enumerate(rates):
                if not isinstance(item, dict):
                    raise CheckFailed("the check's data is incomplete")
                if "error" in item:
                    error = str(item["error"])
                    hint = ""
                    if "division by zero" in error:
                        hint = (" With warmup_steps = 0 there is no warm-up; and the decay must divide by "
                                "at least 1 (max(1, steps - 1 - warmup_steps)).")
                    raise CheckFailed(f"{what}: step {s} raised {error}.{hint}")
                if "bad" in item:
                    raise CheckFailed(f"{what}: step {s} {item['bad']}; return the learning rate as a Python float.")
                value = item.get("value")
                if not isinstance(value, float):
                    raise CheckFailed("the check's data is incomplete")
                got.append(value)
            if len(got) != len(want):
                raise CheckFailed("the check's data is incomplete")
            bad = [s for s in range(len(want)) if not _close(got[s], want[s])]
            if not bad:
                continue
            first = bad[0]
            evidence = (
                f"{len(bad)} of {len(want)} steps differ; first at step {first}: expected {want[first]:.9g}, "
                f"got {got[first]:.9g}"
            )
            for label, rates_v in _variants(case).items():
                if all(_close(g, v) for g, v in zip(got, rates_v, strict=True)):
                    raise CheckFailed(f"{what}: {label}. Evidence: {evidence}.")
            if first == 0 and warmup == 0:
                reason = "with warmup_steps = 0 there is no warm-up: step 0 already gets lr"
            elif first < warmup:
                reason = f"during the warm-up step s gets lr * (s + 1) / warmup_steps (step 0: {want[0]:.9g}, step {warmup - 1}: lr)"
            elif first == warmup:
                reason = "the first step after the warm-up gets the peak, lr"
            elif first >= steps - 1:
                reason = "the last update and every step after it get min_lr"
            elif not cosine:
                reason = "without cosine the rate stays at lr after the warm-up"
            else:
                reason = ("after the warm-up: min_lr + (lr - min_lr) * (1 + cos(pi * progress)) / 2, with progress = "
                          "(step - warmup_steps) / (steps - 1 - warmup_steps)")
            raise CheckFailed(f"{what}: {reason}. Evidence: {evidence}.")
        return (
            "learning_rate: " + "; ".join(f"steps={c[0]}, warmup_steps={c[3]}, cosine={c[4]}" for c in cases)
            + f": the rate of every step, and of {AFTER} steps after the last, matches the reference."
        )

    return judge


check_learning_rate = Check("check_learning_rate", _probe(CASES), _judge(CASES))
check_learning_rate_hidden = Check(
    "check_learning_rate_hidden", _probe(HIDDEN_CASES), _judge(HIDDEN_CASES), hidden=True
)
