"""Lesson 06's classic mistakes as behaviours: for each input, the tensor a mistake computes or
the error it raises, and the student's own outcomes as the same kind of data.

Several classic mistakes make the student's code *raise* on one input and not on another (taking
T from the batch dimension, for instance). So the probes of ``position_embeddings`` and
``transformer_lm`` catch errors per input and return them as data (``errors.caught``), and their
judges recognise a mistake by its behaviour over all inputs (``errors.same_behaviour``): which ones
raise, with what kind of error, and what the others return.
"""

from __future__ import annotations

import torch
from torch import nn


def _attempt(fn):
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001 - a variant that raises is a behaviour too
        return exc


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
            elif positions == "token ids":
                x = x + model.pos_to_embedding(ids)  # (B, T, C): the table indexed by which token, not where
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
        "you looked the position table up with the token ids (pos_to_embedding(input_ids)): it is indexed by "
        "each token's place in its sequence, torch.arange(T), not by which token it is": run(positions="token ids"),
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
