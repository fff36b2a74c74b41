"""Checks for lesson 09 (fast generation): generation with a KV cache.

``generate_cached`` must give the very token ids of lesson 08's ``generate`` (the reference), on a
small float64 model with seeded weights and a seeded generator, before and after the text
outgrows ``max_len``. While it runs, the notebook's ``CachedSelfAttention`` and ``forward_cached``
are replaced by the course's own, which record every call (new positions, autograd graph, mode): a
mistake in Exercise 1 is not counted here, and a loop that does not use the cache is seen.

A batch of prompts (``batch_mask_and_positions``) is checked in ``helpers.checks.batch_mask``.

Shape legend: B batch, T time, T0 prompt length, V vocabulary size, C embedding size, nh heads,
hs head size. No two sizes are equal.
"""

from __future__ import annotations

import inspect
from contextlib import contextmanager

import torch

from helpers.checks.core import CheckFailed, describe, expect_callable, runs, visible_and_hidden
from helpers.checks.diagnose import case_sizes
from helpers.checks.errors import caught, raise_caught
from helpers.checks.kv_cache_known import CONFIG, known_good_forward_cached, small_model
from helpers.checks.kv_cache_known import KnownGoodCachedAttention as KnownGood
from helpers.reference import sampling


@contextmanager
def _swapped(fn, replacements: dict):
    """Replace names in the namespace ``fn`` looks them up in (a decorator's wrapper unwrapped), then restore."""
    scope = getattr(inspect.unwrap(fn), "__globals__", None)
    if not isinstance(scope, dict) or scope.get("__name__", "").startswith("torch"):
        scope = {}
    saved = {name: scope[name] for name in replacements if name in scope}
    scope.update(replacements)
    try:
        yield
    finally:
        for name in replacements:
            scope.pop(name, None)
        scope.update(saved)


# (name, prompt shape, new tokens, temperature, top_k, top_p, seed, train mode before)
GEN_CASES = [
    ("one prompt of 4 tokens, 12 new (past max_len = 9), temperature 1", (4,), 12, 1.0, None, None, 1, False),
    ("a (2, 3) batch, 10 new, greedy, the model in training mode", (2, 3), 10, 0.0, None, None, 2, True),
]
GEN_HIDDEN_CASES = [
    ("a prompt of 12 tokens (longer than max_len), 5 new, temperature 0.8, top_k 5", (12,), 5, 0.8, 5, None, 3, False),
    ("a (3, 1) batch, 14 new, top_p 0.9, the model in training mode", (3, 1), 14, 1.0, None, 0.9, 4, True),
    ("a batch of one, (1, 5), 3 new, greedy", (1, 5), 3, 0.0, None, None, 5, False),
]


def _used_generator(seed: int) -> torch.Generator:
    """A generator seeded with ``seed`` that has already given 5 numbers (as one that generated before)."""
    generator = torch.Generator().manual_seed(seed)
    torch.rand(5, generator=generator)
    return generator


def _prompt(shape, seed):
    return torch.randint(0, CONFIG["n_vocab"], shape, generator=torch.Generator().manual_seed(seed))


def _probe_generate(cases):
    def probe(generate_cached) -> dict:
        expect_callable(generate_cached, "generate_cached")
        steps: list[dict] = []  # every forward_cached call: new tokens, cached ones, the largest position

        def recording_forward_cached(model, ids, caches, positions, mask=None):
            steps.append({"T_new": int(ids.shape[-1]), "T_past": 0 if not caches else int(caches[0][0].shape[2]),
                          "top": int(torch.as_tensor(positions).max()) if torch.as_tensor(positions).numel() else -1})
            return known_good_forward_cached(model, ids, caches, positions, mask)

        runs = []
        with _swapped(generate_cached, {"CachedSelfAttention": KnownGood,
                                        "forward_cached": recording_forward_cached}):
            for _, shape, n, temperature, top_k, top_p, seed, training in cases:
                model = small_model()
                model.train(training)
                KnownGood.calls, steps[:] = [], []
                cfg = CONFIG
                sizes = {"V": cfg["n_vocab"], "C": cfg["emb_dim"], "H": cfg["n_hidden"], "hs": cfg["head_dim"],
                         "nh": cfg["n_heads"], "T0": shape[-1], **({"B": shape[0]} if len(shape) == 2 else {})}
                options = dict(temperature=temperature, top_k=top_k, top_p=top_p)
                try:
                    with case_sizes(sizes):
                        out = generate_cached(model, _prompt(shape, seed), n, **options, generator=torch.Generator().manual_seed(seed))
                        run = {"out": out, "calls": list(KnownGood.calls), "training": model.training,
                               "modes": sorted({m.training for m in model.modules()}), "steps": list(steps)}
                        model.train(training)  # the same seed again: the same ids?
                        run["again"] = generate_cached(model, _prompt(shape, seed), n, **options,
                                                       generator=torch.Generator().manual_seed(seed))
                        if temperature > 0:  # a generator already used: generation goes on from its state
                            used = _used_generator(seed)
                            model.train(training)
                            run["used"] = generate_cached(model, _prompt(shape, seed), n, **options, generator=used)
                            run["used_state"] = used.get_state()
                    runs.append(run)
                except Exception as exc:  # noqa: BLE001 - the judge explains the error
                    runs.append({**caught(exc, sizes), "steps": list(steps)})
        return {"runs": runs}

    return probe


def _cached_positions(T0: int, n: int, max_len: int) -> int:
    """How many positions a cached loop that follows the lesson's rule computes, per layer."""
    return sum(t for t, _ in _schedule(T0, n, max_len))


def _schedule(T0: int, n: int, max_len: int) -> list[tuple[int, int]]:
    """What the lesson's rule gives forward_cached at each of the ``n`` steps: (new tokens, text length)."""
    out, T = [], None
    for _ in range(n):
        if T is not None and T < max_len:
            out.append((1, T0))
            T += 1
        else:
            T = min(T0, max_len)
            out.append((T, T0))
        T0 += 1
    return out


def _extra_work(steps: list, T0: int, n: int, max_len: int) -> str:
    """Which steps gave forward_cached more than the lesson's rule does, said with the text's length
    then; empty when the recorded calls are not one per step."""
    rule = _schedule(T0, n, max_len)
    if len(steps) != n or not all(isinstance(s, dict) for s in steps):
        return ""
    over = [(k, s["T_new"], length) for k, (s, (want, length)) in enumerate(zip(steps, rule, strict=True)) if s["T_new"] > want]
    if not over:
        return ""
    cached = [k for k, (want, _) in enumerate(rule) if want == 1]
    if {k for k, _, _ in over} == set(cached) and all(t == min(length, max_len) for _, t, length in over):
        return " At every step that can use the cache, the whole window was run again."
    shown = ", ".join(f"step {k + 1} ({t} tokens, the text then {length} long)" for k, t, length in over[:3])
    at_limit = all(length == max_len for _, _, length in over)
    return (f" {len(over)} of the {n} steps ran more than the newest token: {shown}."
            + (f" {'Each time t' if len(over) > 1 else 'T'}he text was exactly max_len = {max_len} tokens long, which still fits (a cache of "
               "max_len positions is full, not overfull): is the test for 'fits' < max_len where <= is meant?"
               if at_limit else ""))


def _mistaken(model, ids, n, options, flavour):
    """What the classic mistakes generate: new tokens at position 0 ("zero") or at the position of the
    token before them ("early"), a cache slid past max_len
    ("slide"), each token sampled from the logits of the input's first position ("first"), the argmax
    instead of a sample ("greedy"), an option not passed on to sample_next ("no-top-k", "no-top-p",
    "no-temperature"), the
    from-scratch window cut from the start of the text instead of its end ("head"): the ids it
    generates, and how many positions (per layer) its loop computes."""
    max_len = model.config.max_len
    ids = ids if ids.dim() == 2 else ids.unsqueeze(0)
    dropped = {"no-top-k": "top_k", "no-top-p": "top_p", "no-temperature": "temperature"}.get(flavour)
    options = {k: v for k, v in options.items() if k != dropped}  # an option never passed on to sample_next
    caches, computed = None, 0  # and the positions the loop computes (per layer)
    with torch.no_grad():
        for _ in range(n):
            T = 0 if caches is None else caches[0][0].shape[2]
            if caches is None or (flavour != "slide" and T >= max_len):
                context = ids[:, :max_len] if flavour == "head" else ids[:, -max_len:]
                logits, caches = known_good_forward_cached(model, context, None, torch.arange(context.shape[1]))
                computed += context.shape[1]
            else:
                if T >= max_len:  # "slide": drop the oldest cached position, keep the last position id
                    caches = [(k[:, :, 1:], v[:, :, 1:]) for k, v in caches]
                    T = max_len - 1
                position = torch.tensor([0 if flavour == "zero" else T - 1 if flavour == "early" else T])
                logits, caches = known_good_forward_cached(model, ids[:, -1:], caches, position)
                computed += 1
            last = logits[:, 0 if flavour == "first" else -1]
            next_ids = (last.argmax(dim=-1) if flavour == "greedy" else
                        sampling.sample_next(logits, **options)[:, -1] if flavour == "every-position" else
                        sampling.sample_next(last, **options))
            ids = torch.cat([ids, next_ids.unsqueeze(1)], dim=1)
    return ids, computed


def _judge_generate(cases):
    def judge(data: dict) -> str:
        found = runs(data, len(cases))
        model = small_model()
        max_len = model.config.max_len
        L = model.config.n_layers
        for (name, shape, n, temperature, top_k, top_p, seed, training), run in zip(cases, found, strict=True):
            what = f"generate_cached on {name}"
            if "error" in run:
                plain, last = str(run.get("error")), (run.get("steps") or [{}])[-1]
                hint = ""
                T_new, T_past, top = last.get("T_new", 0), last.get("T_past", 0), last.get("top", -1)
                if "index out of range" in plain and top >= max_len:
                    hint = (f" The failing forward_cached call had {T_new} new tokens after {T_past} cached ones, "
                            f"positions up to {top}: the position table has max_len = {max_len} rows (0 ... {max_len - 1}).")
                    if T_new > max_len:
                        hint += " Crop the prompt to its last max_len tokens first, as lesson 08's generate does."
                    elif T_new == 1 and top != T_past:
                        hint += f" The token that follows {T_past} cached ones is at position T_past = {T_past}."
                    else:
                        hint += (" Once T_past reaches max_len, run the last max_len tokens from scratch at positions "
                                 "0 ... max_len - 1, with no cache.")
                if not hint and len(shape) == 1 and ("too many indices for tensor of dimension 1" in plain
                                                     or "range of [-1, 0]" in plain):
                    hint = (" The prompt here is 1-D, (T0,): make it a batch of one, ids.unsqueeze(0), before the "
                            "loop (and return ids.squeeze(0) at the end), as lesson 08's generate does.")
                if not hint and "inconsistent with step sign" in plain:
                    hint = " A step's new token is at position T_past alone: torch.arange(T_past, T_past + 1)."
                raise_caught(what, run, hint=hint)
            prompt = _prompt(shape, seed)
            options = {"temperature": temperature, "top_k": top_k, "top_p": top_p}
            expected = sampling.generate(model, prompt, n, **options, generator=torch.Generator().manual_seed(seed))
            out = run["out"]
            if not isinstance(out, torch.Tensor) or tuple(out.shape) != tuple(expected.shape):
                lost = (isinstance(out, torch.Tensor) and expected.dim() == 2 and expected.shape[0] == 1
                        and tuple(out.shape) == tuple(expected.shape[1:]))
                stopped = (isinstance(out, torch.Tensor) and out.dim() == expected.dim()
                           and out.shape[-1] == max_len + 1 < expected.shape[-1])
                capped = (isinstance(out, torch.Tensor) and out.dim() == expected.dim()
                          and out.shape[-1] == max_len < expected.shape[-1])
                raise CheckFailed(f"{what} should return ids of shape {tuple(expected.shape)}, got {describe(out)}."
                                  + (" A batch of one keeps its batch axis: squeeze(0) only a prompt that came "
                                     "without one (a squeeze() with no dim drops every axis of size 1)." if lost else "")
                                  + (f" It stopped when the text reached max_len + 1 = {max_len + 1} tokens: did the loop "
                                     "end once the cache was full? Past max_len generation goes on, running the last "
                                     "max_len tokens from scratch." if stopped else "")
                                  + (f" It returned max_len = {max_len} ids in all, fewer new ones than asked: is the "
                                     "number of new tokens cut so that the text stays within max_len? Past max_len "
                                     "generation goes on, the model reading the last max_len tokens." if capped else ""))
            again = run.get("again")
            if not torch.equal(out.long(), expected) and isinstance(again, torch.Tensor) and not torch.equal(again, out):
                raise CheckFailed(f"{what}: two runs with the same seed gave different ids ({out.tolist()} then "
                                  f"{again.tolist()}): draw every sample with the generator given, "
                                  "sample_next(..., generator=generator).")
            if not torch.equal(out.long(), expected):
                got, want = out.reshape(-1, out.shape[-1]), expected.reshape(-1, expected.shape[-1])
                bad = (got != want).any(dim=0).nonzero()
                i = int(bad[0]) if len(bad) else 0
                named = []
                steps = sum(int(c.get("T_new", 0)) for c in run.get("calls") or [] if isinstance(c, dict)) // L
                for flavour, words in (("zero", "every new token was given position 0: the positions must continue "
                                        "from the cache, T_past for the token that follows T_past cached ones"),
                                       ("early", "each new token was given the position of the token before it, "
                                        "T_past - 1: the cache holds positions 0 ... T_past - 1, so the token that "
                                        "follows them is at position T_past (torch.arange(T_past, T_past + 1))"),
                                       ("slide", "past max_len the cache slid (the oldest position dropped, the "
                                        "rest kept): with learned positions every cached key was computed at its "
                                        "old position and, beyond layer 0, from context that drops out; past "
                                        "max_len run the last max_len tokens from scratch"),
                                       ("first", "the next token was sampled from the logits of the first position "
                                        "given to the model, not the last: the prediction for the next token is "
                                        "logits[:, -1]"),
                                       ("greedy", "every token is the most likely one (argmax of the last "
                                        "logits): temperature, top_k, top_p and the generator were not used; "
                                        "draw each token with sample_next"),
                                       *(((f"no-{o.replace('_', '-')}", f"the ids are what sample_next gives without "
                                           f"{o} = {options[o]}: was {o} passed on to sample_next?"))
                                         for o in ("top_k", "top_p", "temperature")
                                         if options.get(o) is not None and options.get(o) != 1.0),
                                       ("every-position", "a token was drawn for every position of the logits, "
                                        "sample_next(logits, ...) kept at [:, -1]: the draws for the other positions "
                                        "use up the generator's numbers, so the last position's draw is not lesson 08's. "
                                        "Hand sample_next the last position's logits alone, logits[:, -1, :]"),
                                       ("head", "past max_len the window run from scratch was the first max_len "
                                        "tokens, ids[:, :max_len], not the last: the next token follows the "
                                        "end of the text, ids[:, -max_len:]")):
                    variant, work = _mistaken(model, prompt, n, {**options, "generator": torch.Generator().manual_seed(seed)}, flavour)
                    if torch.equal(variant.reshape(got.shape), got.long()) and work == steps:
                        named.append((flavour, words))
                # a cause is stated only when one mistake alone reproduces every id and the positions the
                # loop computed (a slid cache and a window cut from the start can give the same ids);
                # when none or several do, what was established is said instead
                label = f" {named[0][1][0].upper()}{named[0][1][1:]}." if len(named) == 1 else ""
                if not label and i >= max_len + 1:
                    label = (f" The tokens agree until the text outgrows max_len = {max_len}: past max_len, run "
                             "the last max_len tokens from scratch at positions 0 ... max_len - 1, as lesson 08 does.")
                raise CheckFailed(f"{what}: the ids differ from lesson 08's generate with the same seed, first at "
                                  f"index {i} (the prompt has {shape[-1]} tokens): expected {want[:, i].tolist()}, "
                                  f"got {got[:, i].tolist()}.{label}")
            calls = run.get("calls") or []
            if not calls:
                raise CheckFailed(f"{what}: the ids are right but the model never ran through forward_cached with "
                                  "this lesson's CachedSelfAttention: use the cache.")
            if any(c.get("training") for c in calls if isinstance(c, dict)):
                raise CheckFailed(f"{what}: the ids are right here, but the model ran in training mode while it "
                                  "generated (dropout would be on): call model.eval() first, and put the mode it was "
                                  "in back at the end, as lesson 08's generate does.")
            if any(c.get("grad") for c in calls if isinstance(c, dict)):
                raise CheckFailed(f"{what}: the cache was grown under autograd (its keys require grad and carry a "
                                  "grad_fn, so every step keeps the whole graph alive): run generation under "
                                  "torch.no_grad() (decorate the function with @torch.no_grad()).")
            computed = sum(int(c.get("T_new", 0)) for c in calls if isinstance(c, dict)) // L
            allowed = _cached_positions(shape[-1], n, max_len)
            if computed > allowed:
                extra = _extra_work(run.get("steps") or [], shape[-1], n, max_len)
                raise CheckFailed(f"{what}: the ids are right, but the model computed {computed} positions where a "
                                  f"cache needs {allowed}.{extra} While the text fits in max_len, give forward_cached "
                                  "the newest token alone, with the caches.")
            if "used" in run:
                used = _used_generator(seed)
                want_used = sampling.generate(model, prompt, n, **options, generator=used)
                got_used, state = run.get("used"), run.get("used_state")
                if isinstance(got_used, torch.Tensor) and isinstance(state, torch.Tensor) and (
                        not torch.equal(got_used.long(), want_used) or not torch.equal(state, used.get_state())):
                    fresh = torch.equal(got_used.long(), expected)
                    raise CheckFailed(
                        f"{what}, with a generator seeded with {seed} that had already given 5 numbers: "
                        + ("the ids are those of a new generator seeded the same, not of the one given: is a new "
                           "generator made from its seed (generator.initial_seed())? Draw with the generator given, "
                           "from the state it is in, as lesson 08's generate does" if fresh else
                           "the ids differ from lesson 08's generate with that generator" if not torch.equal(
                               got_used.long(), want_used) else
                           "the ids are right, but the generator given did not move on as lesson 08's generate moves "
                           "it: is the sampling done with a copy? Draw with the generator given")
                        + (", and the caller's generator did not move on" if fresh and not torch.equal(
                            state, used.get_state()) else "") + ".")
            if run.get("training") != training:
                raise CheckFailed(f"{what}: the model was left in {'training' if run.get('training') else 'evaluation'} "
                                  "mode: put it back in the mode it was in (model.train(was_training)).")
            if run.get("modes", [training]) != [training]:
                raise CheckFailed(f"{what}: model.training is back to {training}, but some of its sub-modules are "
                                  f"still in {'evaluation' if training else 'training'} mode: setting the attribute "
                                  "model.training changes the model alone; model.train(was_training) sets every "
                                  "sub-module (its dropout layers included).")
        return ("generate_cached: " + "; ".join(c[0] for c in cases) + ": the same ids as lesson 08's generate, "
                "one new position per step while the text fits, no autograd graph in the cache.")

    return judge


def _other_seed(case, rng):
    """While grading: another prompt and other draws (the case's seed is its seventh item)."""
    return (*case[:6], rng.randrange(1, 2**31), *case[7:])


check_generate_cached, check_generate_cached_hidden = visible_and_hidden(
    "check_generate_cached", _probe_generate, _judge_generate, GEN_CASES, GEN_HIDDEN_CASES, _other_seed)

__all__ = ["check_generate_cached", "check_generate_cached_hidden"]
