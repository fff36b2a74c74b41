"""Checks for lesson 06 (the TransformerLM): position embeddings and the model's forward pass.

Shape legend: B batch, T sequence length, C embedding size (emb_dim), V vocabulary size (n_vocab),
L layers (n_layers). Every input is chosen so that no two of its dimensions are equal.

Several classic mistakes make the student's code *raise* on one input and not on another (taking
T from the batch dimension, for instance). So the probes catch errors per input and return them as
data, and the judges recognise a mistake by its behaviour over all inputs: which ones raise, with
what kind of error, and what the others return. The reference is imported inside the judges only.
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass

import torch
from torch import nn

from helpers.checks.core import Check, CheckFailed, close, describe, first_mismatch


def _keeps_rng(half):
    """Run a probe or a judge without touching the global random state: building modules draws
    random numbers, and a check must not change what the rest of the notebook computes."""

    @functools.wraps(half)
    def wrapped(argument):
        with torch.random.fork_rng(devices=[]):
            return half(argument)

    return wrapped


def _ref():
    from helpers.reference import transformer_lm

    return transformer_lm


def _error(exc: BaseException) -> dict:
    return {"error": f"{type(exc).__name__}: {exc}"[:600], "kind": type(exc).__name__}


def _same_behaviour(got, wanted, tol: float) -> bool:
    """``got`` (student data: a tensor or an error dict) behaves like ``wanted`` (tensor or exception)."""
    if isinstance(wanted, BaseException):
        return isinstance(got, dict) and got.get("kind") == type(wanted).__name__
    return isinstance(got, torch.Tensor) and got.shape == wanted.shape and close(wanted, got, tol, tol)


def _attempt(fn):
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001 - a variant that raises is a behaviour too
        return exc


def _outcome(value) -> str:
    if isinstance(value, dict) and "error" in value:
        return f"raised {value['error']}"
    return f"returned {describe(value)}"


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


# ---------------------------------------------------------------------------------------------
# add_position_embeddings(x, pos_to_embedding): x (B, T, C) or (T, C) -> x + positions 0..T-1

# (seed, batch shape, T, C, max_len, dtype)
POS_CASES = [
    (50, (3,), 5, 4, 16, torch.float64),
    (51, (), 6, 5, 6, torch.float64),  # T == max_len: the last position is max_len - 1
    (52, (), 7, 3, 11, torch.float64),
]
POS_HIDDEN_CASES = [
    (54, (2,), 9, 3, 12, torch.float32),
    (55, (4,), 1, 6, 5, torch.float64),
    (56, (3,), 8, 5, 8, torch.float64),
    (57, (), 5, 2, 7, torch.float32),
]


def _pos_inputs(seed, batch, T, C, max_len, dtype):
    g = torch.Generator().manual_seed(seed)
    table = torch.randn(max_len, C, generator=g, dtype=torch.float64)  # (max_len, C)
    x = torch.randn(*batch, T, C, generator=g, dtype=torch.float64)  # (B, T, C)
    return table.to(dtype), x.to(dtype)


def _probe_positions(cases):
    def probe(add_position_embeddings) -> dict:
        if not callable(add_position_embeddings):
            raise CheckFailed(
                f"expected the function add_position_embeddings, got {describe(add_position_embeddings)}"
            )
        runs = []
        for seed, batch, T, C, max_len, dtype in cases:
            table, x = _pos_inputs(seed, batch, T, C, max_len, dtype)
            pos_to_embedding = nn.Embedding(max_len, C).to(dtype)
            with torch.no_grad():
                pos_to_embedding.weight.copy_(table)
            x_before = x.clone()
            try:
                with torch.no_grad():
                    result = add_position_embeddings(x, pos_to_embedding)
            except NotImplementedError:
                raise  # not answered yet: the grader says so
            except Exception as exc:  # noqa: BLE001 - the judge reads the error as evidence
                result = _error(exc)
            runs.append({"result": result, "x_changed": not torch.equal(x_before, x)})
        return {"runs": runs}

    return _keeps_rng(probe)


def position_variants(x: torch.Tensor, table: torch.Tensor) -> dict[str, object]:
    """What add_position_embeddings computes under each classic mistake (a tensor, or the error
    that mistake raises on this input)."""
    emb = nn.Embedding.from_pretrained(table)
    T, C = x.shape[-2], x.shape[-1]

    def across_batch():
        flat = x.reshape(-1, C)  # (B*T, C)
        return (flat + emb(torch.arange(flat.shape[0]))).reshape(x.shape)  # positions 0 .. B*T-1

    makers = {
        "the positions are off by one: they must run 0, 1, ..., T-1 (torch.arange(T)), not 1, ..., T": lambda: x
        + emb(torch.arange(1, T + 1)),
        "you took T from x.shape[0], which is the batch size B for a batched (B, T, C) input: "
        "T is x.shape[-2], for (T, C) and (B, T, C) alike": lambda: x + emb(torch.arange(x.shape[0])),
        "you took T from x.shape[1], which is C for a single sequence (T, C): T is x.shape[-2], "
        "for (T, C) and (B, T, C) alike": lambda: x + emb(torch.arange(x.shape[1])),
        "the positions do not restart for each sequence of the batch: you numbered the B*T rows of "
        "the flattened batch 0 ... B*T-1; every sequence needs positions 0 ... T-1, the same (T, C) "
        "embeddings broadcast over the batch": across_batch,
        "you added all max_len rows of the table (pos_to_embedding.weight); only the first T belong "
        "to a sequence of length T": lambda: x + emb.weight,
        "the position embeddings are multiplied with x; they are added": lambda: x * emb(torch.arange(T)),
        "you returned the position embeddings alone; add them to x": lambda: emb(torch.arange(T)).expand_as(x),
    }
    return {label: _attempt(make) for label, make in makers.items()}


def _judge_positions(cases):
    def judge(data: dict) -> str:
        runs = data.get("runs")
        if not isinstance(runs, list) or len(runs) != len(cases):
            raise CheckFailed("the check's data is incomplete")
        expected, variants, tolerances, problems = {}, {}, {}, []
        for seed, batch, T, C, max_len, dtype in cases:
            table, x = _pos_inputs(seed, batch, T, C, max_len, dtype)
            x, table = x.double(), table.double()
            expected[seed] = x + table[:T]  # (B, T, C) + (T, C)
            tolerances[seed] = 1e-12 if dtype == torch.float64 else 1e-5
            for label, value in position_variants(x, table).items():
                variants.setdefault(label, {})[seed] = value
        for case, run in zip(cases, runs, strict=True):
            seed, batch, T, C, max_len, dtype = case
            what = (
                f"add_position_embeddings(x, pos_to_embedding) for x of shape {(*batch, T, C)} and "
                f"nn.Embedding({max_len}, {C})"
            )
            if run.get("x_changed") is not False:
                raise CheckFailed(
                    f"{what} modified x in place (x += ...): the caller's token embeddings changed. "
                    "Return x + positions, a new tensor."
                )
            if not _same_behaviour(run.get("result"), expected[seed], tolerances[seed]):
                problems.append((case, run, what))
        if problems:
            case, run, what = problems[0]
            tol = tolerances[case[0]]
            got, wanted = run.get("result"), expected[case[0]]
            if isinstance(got, torch.Tensor) and got.shape == wanted.shape:
                evidence = first_mismatch(wanted, got, tol, tol)
            else:
                evidence = f"it {_outcome(got)}; expected a tensor of shape {tuple(wanted.shape)}"
            for label, by_seed in variants.items():
                if all(_same_behaviour(r.get("result"), by_seed[c[0]], tolerances[c[0]]) for c, r in zip(cases, runs, strict=True)):
                    raise CheckFailed(f"{what}: {label}. Evidence: {evidence}.")
            if isinstance(got, dict) and "error" in got:
                raise CheckFailed(f"{what} raised {got['error']}")
            if not isinstance(got, torch.Tensor) or got.shape != wanted.shape:
                raise CheckFailed(
                    f"{what} should return {tuple(wanted.shape)}, the shape of x; it {_outcome(got)}. "
                    "The (T, C) position embeddings broadcast over the batch: x + pos works for "
                    "(T, C) and (B, T, C) alike."
                )
            raise CheckFailed(f"{what} differs from x + pos_to_embedding(0 ... T-1). Evidence: {evidence}.")
        shapes = ", ".join(f"{(*c[1], c[2], c[3])} with max_len {c[4]}" for c in cases)
        return (
            f"add_position_embeddings: x of shape {shapes}: positions 0 ... T-1 (up to T = max_len), "
            "the same for every sequence of the batch, x untouched."
        )

    return _keeps_rng(judge)


check_position_embeddings = Check(
    "check_position_embeddings", _probe_positions(POS_CASES), _judge_positions(POS_CASES)
)
check_position_embeddings_hidden = Check(
    "check_position_embeddings_hidden",
    _probe_positions(POS_HIDDEN_CASES),
    _judge_positions(POS_HIDDEN_CASES),
    hidden=True,
)

# ---------------------------------------------------------------------------------------------
# TransformerLM(config).forward: input_ids (B, T) or (T,) -> logits (B, T, V) or (T, V)


@dataclass
class ProbeConfig:
    """The fields of lesson 06's Config, so that a probe can build a model without the reference."""

    n_vocab: int = 256
    max_len: int = 50
    emb_dim: int = 5
    n_hidden: int = 16
    head_dim: int = 256
    n_heads: int = 2
    n_layers: int = 1
    tie_weights: bool = True
    bare_bones: bool = False
    final_norm: bool = True


# (seed, Config fields, dtype, B, T)
LM_CASES = [
    (60, dict(n_vocab=13, max_len=9, emb_dim=6, n_hidden=10, head_dim=4, n_heads=3, n_layers=2), torch.float64, 3, 7),
    (61, dict(n_vocab=11, max_len=8, emb_dim=5, n_hidden=7, head_dim=3, n_heads=3, tie_weights=False), torch.float64, 2, 6),
]
LM_HIDDEN_CASES = [
    (
        62,
        dict(n_vocab=17, max_len=12, emb_dim=5, n_hidden=16, head_dim=8, n_heads=2, bare_bones=True, final_norm=False),
        torch.float32,
        2,
        10,
    ),
    (63, dict(n_vocab=19, max_len=14, emb_dim=7, n_hidden=12, head_dim=5, n_heads=2, n_layers=3, tie_weights=False), torch.float64, 4, 11),
]


def _config_text(fields: dict) -> str:
    return "Config(" + ", ".join(f"{k}={v}" for k, v in fields.items()) + ")"


def _lm_weights(seed: int, shapes: list[tuple[str, list[int]]]) -> dict[str, torch.Tensor]:
    """Known weights for parameters given as (name, shape), in sorted name order."""
    g = torch.Generator().manual_seed(seed)
    weights = {}
    for name, shape in sorted(shapes):
        noise = torch.randn(*shape, generator=g, dtype=torch.float64)
        if "norm" in name and name.endswith(".weight"):
            weights[name] = 1 + 0.3 * noise
        elif "to_embedding" in name:
            weights[name] = 0.5 * noise
        elif len(shape) == 1:
            weights[name] = 0.3 * noise
        else:
            weights[name] = noise / math.sqrt(shape[1])
    return weights


def _lm_ids(seed: int, V: int, B: int, T: int, max_len: int):
    g = torch.Generator().manual_seed(seed + 1000)
    ids = torch.randint(V, (B, T), generator=g)  # (B, T)
    full = torch.randint(V, (B, max_len), generator=g)  # (B, max_len)
    long = torch.randint(V, (B, max_len + 1), generator=g)  # (B, max_len + 1)
    replacement = torch.randint(V, (B, T), generator=g)  # (B, T)
    return ids, full, long, replacement


def _probe_lm(cases):
    def probe(model_class) -> dict:
        if not isinstance(model_class, type) or not issubclass(model_class, nn.Module):
            raise CheckFailed(f"expected the class TransformerLM (an nn.Module), got {describe(model_class)}")
        runs = []
        for seed, fields, dtype, B, T in cases:
            config = ProbeConfig(**fields)
            model = model_class(config)
            shapes = [(name, list(p.shape)) for name, p in model.named_parameters()]
            weights = _lm_weights(seed, shapes)
            model = model.to(dtype)
            with torch.no_grad():
                for name, param in model.named_parameters():
                    param.copy_(weights[name])
            model.eval()
            ids, full, long, replacement = _lm_ids(seed, config.n_vocab, B, T, config.max_len)
            run: dict = {"shapes": shapes}
            with torch.no_grad():
                for key, inputs in (("out", ids), ("single", ids[0]), ("full", full), ("long", long)):
                    try:
                        run[key] = model(inputs)
                    except NotImplementedError:
                        raise  # not answered yet: the grader says so
                    except Exception as exc:  # noqa: BLE001 - errors are evidence here
                        run[key] = _error(exc)
                leaks = []
                for j in range(1, T):
                    changed = ids.clone()
                    changed[:, j] = replacement[:, j]
                    try:
                        leaks.append(model(changed))
                    except Exception as exc:  # noqa: BLE001
                        leaks.append(_error(exc))
                run["leaks"] = leaks
            runs.append(run)
        return {"runs": runs}

    return _keeps_rng(probe)


MULTI_LAYER = (
    "every layer read the embeddings instead of the previous layer's output, and only the last "
    "layer's result was kept: feed each layer's output into the next (x = layer(x))",
    "the layers ran in reverse order",
    "only the first layer ran: loop over every layer in self.layers",
)


def lm_variants(model, inputs: dict[str, torch.Tensor]) -> dict[str, dict[str, object]]:
    """What the forward pass computes under each classic mistake, for each named input (a
    tensor, or the error that the mistake raises). ``model`` is a reference TransformerLM."""
    cfg = model.config

    def run(positions="arange", final=True, chain="chain", head="lm_head", post=None):
        def forward(ids):
            unbatched = ids.dim() == 1
            if unbatched:
                ids = ids.unsqueeze(0)  # (T,) -> (1, T), as the given wrapper does
            B, T = ids.shape
            if T > cfg.max_len:
                raise ValueError(f"{T} > {cfg.max_len}")
            x = model.word_to_embedding(ids)  # (B, T, C)
            if positions == "arange":
                x = x + model.pos_to_embedding(torch.arange(T))
            elif positions == "from 1":
                x = x + model.pos_to_embedding(torch.arange(1, T + 1))
            elif positions == "batch dim":
                x = x + model.pos_to_embedding(torch.arange(B))
            elif positions == "across batch":
                flat = x.reshape(B * T, -1)  # (B*T, C)
                x = (flat + model.pos_to_embedding(torch.arange(B * T))).reshape(B, T, -1)
            embedded = x
            layers = list(model.layers)
            if chain == "reverse":
                layers = layers[::-1]
            if chain == "first only":
                layers = layers[:1]
            for layer in layers:
                x = layer(embedded if chain == "unchained" else x)
            if final:
                x = model.final_norm(x)
            logits = x @ model.word_to_embedding.weight.T if head == "embedding" else model.lm_head(x)
            if post == "softmax":
                logits = torch.softmax(logits, dim=-1)
            elif post == "log_softmax":
                logits = torch.log_softmax(logits, dim=-1)
            return logits.squeeze(0) if unbatched else logits

        return forward

    unchained, reverse, first_only = MULTI_LAYER
    makers = {
        "the position embeddings are missing: add pos_to_embedding(positions 0 ... T-1) to the token "
        "embeddings": run(positions=None),
        "the positions are off by one: they must run 0, 1, ..., T-1 (torch.arange(T))": run(positions="from 1"),
        "you took T from the batch dimension: input_ids is (B, T), so T is input_ids.shape[-1]": run(
            positions="batch dim"
        ),
        "the positions do not restart for each sequence of the batch (you numbered all B*T tokens "
        "in a row); every sequence has positions 0 ... T-1": run(positions="across batch"),
        unchained: run(chain="unchained"),
        reverse: run(chain="reverse"),
        first_only: run(chain="first only"),
        "you returned probabilities (softmax); forward returns logits, the loss applies the "
        "log-softmax itself": run(post="softmax"),
        "you returned log-probabilities (log_softmax); forward returns the raw logits": run(post="log_softmax"),
        "you multiplied by word_to_embedding.weight instead of calling lm_head: that only equals "
        "lm_head when the weights are tied (tie_weights=False here)": run(head="embedding"),
    }
    if cfg.final_norm:
        makers["the final LayerNorm is missing: apply self.final_norm after the last layer, before lm_head"] = run(
            final=False
        )
    if len(model.layers) < 2:  # one layer: chaining and order cannot go wrong
        makers = {k: v for k, v in makers.items() if k not in MULTI_LAYER}
    if cfg.tie_weights:
        makers = {k: v for k, v in makers.items() if "tie_weights=False" not in k}
    return {
        label: {key: _attempt(lambda forward=forward, ids=ids: forward(ids)) for key, ids in inputs.items()}
        for label, forward in makers.items()
    }


def _judge_lm(cases):
    def judge(data: dict) -> str:
        runs = data.get("runs")
        if not isinstance(runs, list) or len(runs) != len(cases):
            raise CheckFailed("the check's data is incomplete")
        ref = _ref()
        for (seed, fields, dtype, B, T), run in zip(cases, runs, strict=True):
            cfg = ref.Config(**fields)
            what = f"TransformerLM({_config_text(fields)})"
            with torch.no_grad():
                model = ref.TransformerLM(cfg)
                shapes = [(name, list(p.shape)) for name, p in model.named_parameters()]
                got_shapes = [tuple(s) if isinstance(s, list) else s for s in run.get("shapes", [])]
                if sorted(map(tuple, got_shapes)) != sorted(shapes):
                    want = ", ".join(f"{n} {tuple(s)}" for n, s in shapes)
                    have = ", ".join(f"{n} {tuple(s)}" for n, s in got_shapes)
                    raise CheckFailed(
                        f"{what} should have the parameters {want} (keep the constructor as given); "
                        f"it has {have}."
                    )
                weights = _lm_weights(seed, shapes)
                model = model.double()
                for name, param in model.named_parameters():
                    param.copy_(weights[name])
                model.eval()
                ids, full, long, replacement = _lm_ids(seed, cfg.n_vocab, B, T, cfg.max_len)
                inputs = {"out": ids, "single": ids[0], "full": full}
                expected = {key: model(value) for key, value in inputs.items()}
                tol = 1e-9 if dtype == torch.float64 else 1e-4
                described = {
                    "out": f"input_ids of shape ({B}, {T})",
                    "single": f"a single sequence of shape ({T},)",
                    "full": f"input_ids of shape ({B}, {cfg.max_len}), T = max_len",
                }
                bad = [key for key in inputs if not _same_behaviour(run.get(key), expected[key], tol)]
                if bad:
                    key = bad[0]
                    got, wanted = run.get(key), expected[key]
                    here = f"{what} on {described[key]}"
                    if isinstance(got, torch.Tensor) and got.shape == wanted.shape:
                        evidence = first_mismatch(wanted, got, tol, tol)
                    else:
                        evidence = f"it {_outcome(got)}; expected logits of shape {tuple(wanted.shape)}"
                    for label, outcomes in lm_variants(model, inputs).items():
                        if all(_same_behaviour(run.get(k), outcomes[k], tol) for k in inputs):
                            raise CheckFailed(f"{here}: {label}. Evidence: {evidence}.")
                    if key == "full" and isinstance(got, dict) and got.get("kind") == "ValueError":
                        raise CheckFailed(
                            f"{here} raised {got['error']}, but T = max_len = {cfg.max_len} fits: the "
                            "positions run 0 ... max_len-1. Raise only when T > max_len (not >=)."
                        )
                    if isinstance(got, dict) and "error" in got:
                        raise CheckFailed(f"{here} raised {got['error']}")
                    if isinstance(got, torch.Tensor) and got.shape != wanted.shape:
                        raise CheckFailed(
                            f"{here} should return logits of shape {tuple(wanted.shape)} (B, T, n_vocab); "
                            f"got {tuple(got.shape)}."
                        )
                    raise CheckFailed(f"{here} differs from the reference. Evidence: {evidence}.")
            long = run.get("long")
            L = cfg.max_len + 1
            here = f"{what} on input_ids of shape ({B}, {L}), longer than max_len = {cfg.max_len}"
            if not isinstance(long, dict) or "error" not in long:
                raise CheckFailed(f"{here} {_outcome(long)}; it must raise a ValueError naming both lengths.")
            if long.get("kind") != "ValueError":
                raise CheckFailed(
                    f"{here} raised {long['error']}: check the length yourself before the lookup and raise "
                    f"a ValueError that names both lengths ({L} and {cfg.max_len}), so the user knows what "
                    "went wrong."
                )
            message = long["error"].split(":", 1)[-1]
            numbers = {int(n) for n in re.findall(r"\d+", message)}
            if L not in numbers or cfg.max_len not in numbers:
                raise CheckFailed(
                    f"{here} raised a ValueError, good, but its message should name both lengths, "
                    f"{L} and {cfg.max_len}; it says: {message.strip()!r}."
                )
            leaks = run.get("leaks")
            if not isinstance(leaks, list) or len(leaks) != T - 1:
                raise CheckFailed("the check's data is incomplete")
            out = run["out"]
            for j, changed in enumerate(leaks, start=1):
                if not isinstance(changed, torch.Tensor) or changed.shape != out.shape:
                    raise CheckFailed(f"{what}: changing token {j} made forward return {_outcome(changed)}.")
                moved = ~torch.isclose(changed[:, :j].double(), out[:, :j].double(), atol=tol, rtol=tol)
                if moved.any():
                    b, i = (int(v) for v in moved.nonzero()[0][:2])
                    raise CheckFailed(
                        f"{what}: changing only token {j} changed the logits at position {i} (sequence {b}), "
                        "an earlier one: the model must not see the future."
                    )
        configs = "; ".join(f"{_config_text(c[1])} on ({c[3]}, {c[4]})" for c in cases)
        return (
            f"TransformerLM.forward: {configs}: logits match the reference, batched and unbatched, "
            "up to T = max_len; a longer input raises a ValueError naming both lengths; no logit "
            "moves when a later token changes."
        )

    return _keeps_rng(judge)


check_transformer_lm = Check("check_transformer_lm", _probe_lm(LM_CASES), _judge_lm(LM_CASES))
check_transformer_lm_hidden = Check(
    "check_transformer_lm_hidden", _probe_lm(LM_HIDDEN_CASES), _judge_lm(LM_HIDDEN_CASES), hidden=True
)
