"""Checks for lesson 06 (the TransformerLM): position embeddings and the model's forward pass.

Shape legend: B batch, T sequence length, C embedding size (emb_dim), V vocabulary size (n_vocab),
L layers (n_layers). Every input is chosen so that no two of its dimensions are equal.

Several classic mistakes make the student's code *raise* on one input and not on another (taking
T from the batch dimension, for instance). So the probes catch errors per input and return them as
data, and the judges recognise a mistake by its behaviour over all inputs: which ones raise, with
what kind of error, and what the others return. The reference is imported inside the judges only.
"""

from __future__ import annotations

import copy
import math
import re
from dataclasses import dataclass

import torch
from torch import nn

from helpers.checks.core import CheckFailed, close, describe, first_mismatch, visible_and_hidden
from helpers.checks.diagnose import (
    case_sizes,
    diagnose,
    explain_exception,
    first_divergence,
    precision_lost,
    trace,
)

# Check.__call__ and Check.record run every probe and judge inside torch.random.fork_rng: building
# modules here draws random numbers without moving the notebook's.
#: what diagnose establishes that is worth more than the plain comparison
_WEAK = ("generic", "rule_localised")


def _ref():
    from helpers.reference import transformer_lm

    return transformer_lm


def _error(exc: BaseException, sizes: dict[str, int]) -> dict:
    """An exception of the student's code as data: its text, its kind, and what it means."""
    plain = f"{type(exc).__name__}: {exc}"[:600]
    explained = explain_exception(exc, sizes=sizes)
    if "'indices' to have one of the following scalar types" in plain:
        explained = (
            "An embedding looks its rows up by integer index, and the positions given to it are not "
            "integers: torch.arange(T) makes int64 positions; a dtype= of a float type makes them "
            f"floats.\n{explained}"
        )
    return {"error": plain, "kind": type(exc).__name__, "explained": explained[:1500]}


def _raised(here: str, got: dict) -> str:
    """The message for an error of the student's code that no catalogued mistake explains."""
    explained = got.get("explained") if isinstance(got.get("explained"), str) else got.get("error")
    return f"{here} raised an error. {explained}"


def _same_behaviour(got, wanted, tol: float) -> bool:
    """``got`` (student data: a tensor or an error dict) behaves like ``wanted`` (tensor or exception)."""
    if isinstance(wanted, BaseException):  # the same error, word for word (not just the same kind)
        return isinstance(got, dict) and got.get("error") == f"{type(wanted).__name__}: {wanted}"[:600]
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
                with torch.no_grad(), case_sizes(_pos_sizes(batch, T, C)):
                    result = add_position_embeddings(x, pos_to_embedding)
            except NotImplementedError:
                raise  # not answered yet: the grader says so
            except Exception as exc:  # noqa: BLE001 - the judge reads the error as evidence
                result = _error(exc, _pos_sizes(batch, T, C))
            runs.append({"result": result, "x_changed": not torch.equal(x_before, x)})
        return {"runs": runs}

    return probe


def _pos_sizes(batch, T, C) -> dict[str, int]:
    return {**({"B": batch[0]} if batch else {}), "T": T, "C": C}


def _rows_added(x: torch.Tensor, got: torch.Tensor, table: torch.Tensor, tol: float) -> str | None:
    """When every vector added to x is one row of the table: which row, at which position."""
    added = (got.double() - x).reshape(-1, x.shape[-2], x.shape[-1])  # (B or 1, T, C)
    found = torch.isclose(added[:, :, None, :], table[None, None], atol=tol, rtol=tol).all(dim=-1)  # (B, T, max_len)
    if not found.any(dim=-1).all():
        return None
    rows = found.double().argmax(dim=-1)  # (B, T): the first row that matches
    shown = [f"{rows[b].tolist()}" for b in range(rows.shape[0])]
    each = f"at positions 0 ... {x.shape[-2] - 1} rows {shown[0]}"
    if len(set(shown)) > 1:
        each = "; ".join(f"in sequence {b}, rows {s}" for b, s in enumerate(shown[:3])) + ("; ..." if len(shown) > 3 else "")
    return (
        f"the vectors your function adds to x are rows of the table, but not rows 0 ... T-1: {each} "
        "(position t needs row t, the same rows for every sequence of the batch)"
    )


def _pos_mismatch(what: str, x, got, expected, table, tol, sizes) -> str:
    """The message for a wrong tensor of the right shape: which table rows were added, or what
    the added part (output - x), or the rest (output - positions), establishes."""
    axes = (*("B" * (x.dim() - 2)), "T", "C")
    rows = _rows_added(x, got, table, tol)
    if rows:
        return f"{what}: {rows}. Evidence: {first_mismatch(expected, got, tol, tol)}."
    kinds = {"atol": tol, "rtol": tol, "axes": axes, "sizes": sizes, "dtype": expected.dtype}
    positions = expected - x  # (B, T, C): each sequence's position embeddings
    for part, want, have in (("the part added to x, output - x", positions, got.double() - x),
                             ("the output minus the position embeddings (which should be x itself)", x,
                              got.double() - positions)):
        rule, message = diagnose(want, have, what="PART", **kinds)
        if rule not in _WEAK:
            return f"{what}: {part}: {message.removeprefix('PART: ')}"
    return diagnose(expected, got, what=what, **kinds)[1]


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
        "you took T from x.shape[-1], which is C: T is x.shape[-2], the second to last dimension": lambda: x
        + emb(torch.arange(C)),
        "torch.arange(1, T) has only T - 1 positions, 1 ... T-1: the positions are torch.arange(T), "
        "0 ... T-1": lambda: x + emb(torch.arange(1, T)),
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
                raise CheckFailed(_raised(what, got))
            seed, batch, T, C, max_len, dtype = case
            if not isinstance(got, torch.Tensor) or got.shape != wanted.shape:
                raise CheckFailed(
                    diagnose(wanted, got, what=what, atol=tol, rtol=tol, sizes=_pos_sizes(batch, T, C))[1]
                    + " The (T, C) position embeddings broadcast over the batch: x + pos works for (T, C) "
                    "and (B, T, C) alike."
                )
            table, x = _pos_inputs(seed, batch, T, C, max_len, dtype)
            raise CheckFailed(_pos_mismatch(what, x.double(), got, wanted, table.double(), tol, _pos_sizes(batch, T, C)))
        shapes = ", ".join(f"{(*c[1], c[2], c[3])} with max_len {c[4]}" for c in cases)
        return (
            f"add_position_embeddings: x of shape {shapes}: positions 0 ... T-1 (up to T = max_len), "
            "the same for every sequence of the batch, x untouched."
        )

    return judge


check_position_embeddings, check_position_embeddings_hidden = visible_and_hidden(
    "check_position_embeddings", _probe_positions, _judge_positions, POS_CASES, POS_HIDDEN_CASES
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
    attn_bias: bool = False  # lesson 10's GPT-2 options: the checks here keep the defaults
    activation: str = "relu"
    dropout: float = 0.0


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
            sizes = _lm_sizes(config, B, T)

            def call(inputs, model=model, sizes=sizes):
                here = {**sizes, "T": inputs.shape[-1]} if inputs.dim() == 2 else {"T": inputs.shape[-1], "V": sizes["V"]}
                try:
                    with torch.no_grad(), case_sizes(here):
                        return model(inputs)
                except NotImplementedError:
                    raise  # not answered yet: the grader says so
                except Exception as exc:  # noqa: BLE001 - errors are evidence here
                    return _error(exc, here)

            for key, inputs in (("out", ids), ("single", ids[0]), ("full", full), ("long", long)):
                run[key] = call(inputs)
            run["again"] = call(ids)  # the same input once more: deterministic?
            run["alone"] = [call(ids[b : b + 1]) for b in range(B)]  # each sequence as a batch of one
            leaks = []
            for j in range(1, T):
                changed = ids.clone()
                changed[:, j] = replacement[:, j]
                leaks.append(call(changed))
            run["leaks"] = leaks
            if isinstance(run["out"], torch.Tensor):  # what each submodule received and returned
                run["steps"] = trace(model, ids, with_inputs=True)
            runs.append(run)
        return {"runs": runs}

    return probe


def _lm_sizes(config, B: int, T: int) -> dict[str, int]:
    """The case's sizes by legend letter."""
    return {"B": B, "T": T, "C": config.emb_dim, "V": config.n_vocab, "nh": config.n_heads,
            "hs": config.head_dim, "H": config.n_hidden}


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


def _lm_mismatch(model, ids, expected, got, run, here, tol, key, cfg, dtype) -> str:
    """The message for logits that no catalogued mistake explains: what the logits establish, and
    for the batch, the first submodule whose input or output departs from the reference's."""
    B, T = (1, *ids.shape) if ids.dim() == 1 else ids.shape
    diagnosis = {"what": here, "atol": tol, "rtol": tol, "sizes": _lm_sizes(cfg, B, T), "dtype": dtype,
                 "axes": ("T", "V") if ids.dim() == 1 else ("B", "T", "V")}
    if key == "out":
        diagnosis.update(again=run.get("again"), alone=run.get("alone"))
    rule, message = diagnose(expected, got, **diagnosis)
    steps = run.get("steps")
    if rule not in _WEAK or key != "out" or not isinstance(steps, dict):
        return message
    lost = precision_lost(expected, got, here, dtype, tol, lambda: copy.deepcopy(model).float()(ids))
    if lost:
        return lost
    with torch.no_grad():
        ours = trace(model, ids, with_inputs=True)
        tokens = model.word_to_embedding(ids)  # (B, T, C)
        known = {"the token embeddings": tokens,
                 "the position embeddings": model.pos_to_embedding(torch.arange(T)).expand_as(tokens)}
    inside = first_divergence(steps, ours, tol, tol, known=known) or (
        "every submodule received and returned what the reference's did, so the difference comes from "
        f"forward's own arithmetic after the last call. Evidence: {first_mismatch(expected, got, tol, tol)}."
    )
    return f"{message.partition(' Evidence: ')[0].rstrip('.')}. Inside the model, {inside}"


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
                        raise CheckFailed(_raised(here, got))
                    raise CheckFailed(_lm_mismatch(model, inputs[key], wanted, got, run, here, tol, key, cfg, dtype))
            long = run.get("long")
            L = cfg.max_len + 1
            here = f"{what} on input_ids of shape ({B}, {L}), longer than max_len = {cfg.max_len}"
            if not isinstance(long, dict) or "error" not in long:
                raise CheckFailed(f"{here} {_outcome(long)}; it must raise a ValueError naming both lengths.")
            if long.get("kind") != "ValueError":
                raise CheckFailed(
                    f"{here}: check the length yourself before the lookup and raise a ValueError that names "
                    f"both lengths ({L} and {cfg.max_len}), so the user knows what went wrong. What it "
                    f"raised instead: {long['error']}"
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

    return judge


check_transformer_lm, check_transformer_lm_hidden = visible_and_hidden(
    "check_transformer_lm", _probe_lm, _judge_lm, LM_CASES, LM_HIDDEN_CASES
)
