"""Checks for lesson 12 (fine-tuning), exercise 4: ``SpeakerClassifier.forward``, a
classification head on a language model's pooled features.

Shape legend: B batch, T time (the padded window), C embedding size, K classes. The probe builds
lesson 06's reference ``TransformerLM`` (importable while grading), wraps it in the student's
class, loads known head weights and runs batches whose sequences end before T, with padding that
is not zero. A cause is named only when its output, computed here from the model's own hidden
states, is the student's.
"""

from __future__ import annotations

import torch

from helpers.checks.core import (
    CheckFailed,
    close,
    describe,
    expect_module_class,
    first_mismatch,
    identify,
    need,
    runs,
    visible_and_hidden,
)
from helpers.checks.diagnose import case_sizes, explain_mismatch
from helpers.checks.errors import attempt, caught, raise_caught
from helpers.checks.lora_known import small_lm
from helpers.checks.verdict import mode_changed, mode_told

__all__ = ["check_speaker_classifier"]

# (seed, V, C, nh, hs, L, H, T, K, lengths (B of them, 1 ... T), pooling); B, T, K and C all differ
CLASSIFIER_CASES = [(180, 11, 12, 2, 4, 2, 20, 6, 3, (6, 2, 4, 1), "last"),
                    (181, 11, 12, 2, 4, 2, 20, 6, 3, (3, 6, 1, 5), "mean")]
CLASSIFIER_HIDDEN_CASES = [(182, 9, 10, 2, 3, 1, 14, 5, 4, (5, 3, 2), "mean"),
                           (183, 13, 8, 2, 4, 2, 12, 7, 2, (7, 1, 4, 6, 2), "last")]


def _inputs(case):
    seed, V, C, nh, hs, L, H, T, K, lengths, pooling = case
    g = torch.Generator().manual_seed(seed + 3)
    ids = torch.randint(V, (len(lengths), T), generator=g)  # (B, T): the padding is random ids, never all zeros
    other = ids.clone()
    for b, n in enumerate(lengths):
        other[b, n:] = (ids[b, n:] + 1 + torch.randint(V - 1, (T - n,), generator=g)) % V  # other padding
    head = {"head.weight": torch.randn(K, C, generator=g, dtype=torch.float64),
            "head.bias": 0.3 * torch.randn(K, generator=g, dtype=torch.float64)}
    return ids, other, torch.tensor(lengths, dtype=torch.long), head


def _lm(case):
    seed, V, C, nh, hs, L, H, T, *_ = case
    return small_lm(seed, V, C, nh, hs, L, H, max_len=T)


def _text(case) -> str:
    seed, V, C, nh, hs, L, H, T, K, lengths, pooling = case
    return (f"SpeakerClassifier(lm, n_classes={K}, pooling={pooling!r}) on ids of shape ({len(lengths)}, {T}) with "
            f"lengths {list(lengths)}")


def _probe(cases):
    def probe(classifier_class) -> dict:
        expect_module_class(classifier_class, "SpeakerClassifier")
        found = []
        for case in cases:
            seed, V, C, nh, hs, L, H, T, K, lengths, pooling = case
            ids, other, lengths_t, head = _inputs(case)
            sizes = {"B": len(lengths), "T": T, "C": C, "K": K}
            with case_sizes(sizes):
                try:
                    model = classifier_class(_lm(case), K, pooling=pooling).double()
                    with torch.no_grad():
                        for name, value in head.items():
                            model.get_parameter(name).copy_(value)
                except Exception as exc:  # noqa: BLE001 - the error is evidence
                    found.append(caught(exc))
                    continue
                model.eval()
                before, ids_before = lengths_t.clone(), ids.clone()
                with torch.no_grad():
                    run = attempt(model, ids, lengths_t, sizes=sizes)
                    run["ids_changed"] = int((ids != ids_before).sum())  # entries of the caller's ids it overwrote
                    ids = ids_before  # the other calls get the ids as they were
                    if "out" in run:
                        run["padding_changed"] = attempt(model, other, lengths_t.clone(), sizes=sizes).get("out")
                        run["alone"] = [attempt(model, ids[b:b + 1], lengths_t[b:b + 1].clone(), sizes=sizes).get("out")
                                        for b in range(len(lengths))]
                run["lengths_changed"] = not torch.equal(before, lengths_t)
                if isinstance(run.get("out"), torch.Tensor) and run["out"].is_floating_point():
                    try:
                        with torch.enable_grad():
                            weight = torch.randn(run["out"].shape, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
                            loss = (model(ids, lengths_t.clone()) * weight).sum()
                            named = [(n, p) for n, p in model.named_parameters()
                                     if n in ("head.weight", "lm.word_to_embedding.weight")]
                            grads = torch.autograd.grad(loss, [p for _, p in named], allow_unused=True)
                        run["grads"] = {n: None if g is None else g for (n, _), g in zip(named, grads, strict=True)}
                    except Exception as exc:  # noqa: BLE001
                        run["grads"] = f"{type(exc).__name__}: {exc}"[:500]
                    model.train()  # a call while the classifier trains: the mode is the caller's, before and after
                    modes = {n: m.training for n, m in model.named_modules()}
                    attempt(model, ids, lengths_t.clone(), sizes=sizes)
                    run["mode_changed"] = mode_changed(model, modes)
            found.append(run)
        return {"runs": found}

    return probe


def _variants(hidden, lengths, pooling, head) -> dict[str, torch.Tensor]:
    """What forward returns under each classic mistake, from the model's hidden states (B, T, C)."""
    B, T, C = hidden.shape
    rows = torch.arange(B)
    real = (torch.arange(T)[None] < lengths[:, None]).to(hidden.dtype)[..., None]  # (B, T, 1)
    one_more = (torch.arange(T)[None] <= lengths[:, None]).to(hidden.dtype)[..., None]
    masked_max = hidden.masked_fill(real == 0, float("-inf")).amax(dim=1)
    out = {
        "the last column, hidden[:, -1], is taken for every sequence: for one shorter than T that position is "
        "padding; the last real position of sequence b is lengths[b] - 1": head(hidden[:, -1]),
        "the first position, hidden[:, 0], is taken: it has seen one character only (argmax of a 0/1 mask, or "
        "max's index, gives the first 1, the first real position; the last is lengths - 1)": head(hidden[:, 0]),
        "the mean runs over all T positions, padding included: average the first lengths[b] positions only": head(hidden.mean(dim=1)),
        "the real positions are summed but divided by T, not by each sequence's length": head((hidden * real).sum(dim=1) / T),
        "the real positions are summed and not divided by their number": head((hidden * real).sum(dim=1)),
        "the mask keeps one position too many (t <= lengths[b]): the first padding position is averaged in":
            head((hidden * one_more).sum(dim=1) / lengths[:, None]),
        "the maximum over the real positions is taken, not their mean": head(masked_max),
    }
    other = "mean" if pooling == "last" else "last"
    if other == "mean":
        out["pooling='last' was given, but forward averaged the real positions, what pooling='mean' asks for"] = \
            head((hidden * real).sum(dim=1) / lengths[:, None])
    else:
        out["pooling='mean' was given, but forward took the last real position, what pooling='last' asks for"] = \
            head(hidden[rows, lengths - 1])
    return out


def _judge(cases):
    def judge(data: dict) -> str:
        from helpers.reference import fine_tuning as ref

        for case, run in zip(cases, runs(data, len(cases)), strict=True):
            seed, V, C, nh, hs, L, H, T, K, lengths, pooling = case
            what = _text(case)
            raise_caught(what, run)
            ids, other, lengths_t, head = _inputs(case)
            model = ref.SpeakerClassifier(_lm(case), K, pooling=pooling).double().eval()
            with torch.no_grad():
                for name, value in head.items():
                    model.get_parameter(name).copy_(value)
                expected = model(ids, lengths_t)
                hidden = model.lm(ids)  # (B, T, C)
            out, B = run.get("out"), len(lengths)
            if run.get("lengths_changed"):
                raise CheckFailed(f"{what} changed the lengths tensor it was given in place: compute new tensors.")
            if run.get("ids_changed"):
                raise CheckFailed(f"{what} changed the ids tensor it was given in place ({run['ids_changed']} of its "
                                  f"{ids.numel()} entries are other ids after the call): the caller's batch is theirs "
                                  "(the next epoch, a loss on the same ids). Leave it alone; to ignore the padding, "
                                  "mask the hidden states, or work on a copy (ids.clone()).")
            if not isinstance(out, torch.Tensor) or out.shape != expected.shape:
                if isinstance(out, torch.Tensor) and tuple(out.shape) == (B, T, K):
                    raise CheckFailed(f"{what} returned shape {(B, T, K)}: a prediction for every position. Pool the hidden "
                                      f"states to one vector per sequence, (B, C), then apply the head: ({B}, {K}).")
                if isinstance(out, torch.Tensor) and tuple(out.shape) == (B, B, K):
                    raise CheckFailed(f"{what} returned shape {(B, B, K)}: hidden[:, lengths - 1] picks, for every sequence, "
                                      "the positions of all B sequences. Index the rows and the positions together: "
                                      "hidden[torch.arange(B), lengths - 1].")
                raise CheckFailed(f"{what} should return shape {tuple(expected.shape)}, got {describe(out)}.")
            if not close(expected, out, 1e-9, 1e-9):
                with torch.no_grad():
                    label = identify(out, _variants(hidden, lengths_t, pooling, model.head), 1e-9, 1e-9)
                if label:
                    raise CheckFailed(f"{what}: {label}. Evidence: {first_mismatch(expected, out, 1e-9, 1e-9)}.")
                changed = run.get("padding_changed")
                if isinstance(changed, torch.Tensor) and changed.shape == out.shape and not close(out, changed, 1e-9, 1e-9):
                    raise CheckFailed(f"{what}: the output moves when only the padding (the ids after each sequence's length) "
                                      "changes, so padding reaches the features: only the first lengths[b] positions of "
                                      f"sequence b may count. Evidence: {first_mismatch(expected, out, 1e-9, 1e-9)}.")
                raise CheckFailed(explain_mismatch(expected, out, what=what, atol=1e-9, rtol=1e-9, dtype=torch.float64))
            alone = need(run.get("alone"), list, B)
            for b, row in enumerate(alone):
                if isinstance(row, torch.Tensor) and row.shape == (K,) and close(expected[b], row, 1e-9, 1e-9):
                    raise CheckFailed(f"{what}: right on the batch, but sequence {b} alone (ids[{b}:{b + 1}], lengths[{b}:{b + 1}]) "
                                      f"gives the right values with shape ({K},), not (1, {K}): a batch of one lost its batch "
                                      "axis. Is there a squeeze() (or an index [0]) that removes every axis of size 1? "
                                      "Keep the batch axis whatever B is.")
                if not isinstance(row, torch.Tensor) or row.shape != (1, K) or not close(expected[b:b + 1], row, 1e-9, 1e-9):
                    raise CheckFailed(f"{what}: right on the batch, but sequence {b} alone (ids[{b}:{b + 1}], lengths[{b}:{b + 1}]) "
                                      f"gives {describe(row)}: the batch's sequences must not depend on each other.")
            grads = run.get("grads")
            if isinstance(grads, str):
                raise CheckFailed(f"{what}: the output is right, but backpropagating through it raised {grads}.")
            for name in ("head.weight", "lm.word_to_embedding.weight"):
                if not isinstance(need(grads, dict).get(name), torch.Tensor):
                    raise CheckFailed(f"{what}: the output is right, but no gradient reaches {name}: the features must stay "
                                      "in the graph (no .detach(), torch.no_grad() or .item()), or the model cannot be "
                                      "fine-tuned through them.")
            if run.get("mode_changed"):
                raise CheckFailed(mode_told(what, run["mode_changed"], came_in_training=True))
        return ("SpeakerClassifier: the last real position or the mean of the real positions, as pooling says; padding "
                "never counts; the head's outputs and the gradients match the reference; a call leaves the mode as it was.")

    return judge


check_speaker_classifier, check_speaker_classifier_hidden = visible_and_hidden(
    "check_speaker_classifier", _probe, _judge, CLASSIFIER_CASES, CLASSIFIER_HIDDEN_CASES)
