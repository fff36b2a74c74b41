"""Block diagrams of the course's models, drawn with matplotlib patches and annotations only.

``draw_transformer_lm(config)`` draws a whole ``TransformerLM`` (lesson 06): token ids, the two
embedding tables, the stack of layers, the final norm, the output layer and the logits, with the
shape of the tensor on every arrow and the parameter count of every component, computed from the
configuration. ``draw_head_split(B, T, nh, hs)`` draws how lesson 04 splits ``(B, T, nh·hs)``
into heads, ``view`` then ``transpose``, and merges them back.

Both functions are pure: they take sizes (a ``Config``, or plain integers), draw into ``ax`` (a
new figure when ``ax`` is None), set a title that describes the picture in words, and return
``(fig, ax)``. They never call ``plt.show()`` and never change matplotlib's global settings.

Shape letters, as in the lessons: ``B`` batch, ``T`` sequence length, ``C`` embedding size
(``emb_dim``), ``V`` vocabulary size (``n_vocab``), ``nh`` heads (``n_heads``), ``hs`` head size
(``head_dim``).
"""

from __future__ import annotations

from typing import Any

import matplotlib.pyplot as plt
from matplotlib.patches import Circle, FancyArrowPatch, FancyBboxPatch, Rectangle

from helpers.plotting._style import COLUMN_WIDTH_IN

__all__ = ["draw_head_split", "draw_transformer_lm", "transformer_lm_parameters"]

#: Okabe-Ito colours: distinguishable by colour-blind readers
HEAD_COLOURS = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#999999"]
EMBEDDING_COLOUR = "#dbe9f6"
NORM_COLOUR = "#fff2cc"
ATTENTION_COLOUR = "#f8d7c4"
MLP_COLOUR = "#d9f0d3"
HEAD_OUT_COLOUR = "#e8dff5"
DATA_COLOUR = "#eeeeee"


def _sizes(config: Any) -> dict[str, Any]:
    """The fields of a lesson-06 ``Config`` (any object with those attributes)."""
    names = ("n_vocab", "max_len", "emb_dim", "n_hidden", "head_dim", "n_heads", "n_layers",
             "tie_weights", "bare_bones", "final_norm")
    missing = [name for name in names if not hasattr(config, name)]
    if missing:
        raise TypeError(f"config has no {', '.join(missing)}: pass a lesson-06 Config")
    return {name: getattr(config, name) for name in names}


def transformer_lm_parameters(config: Any) -> dict[str, int]:
    """Trainable parameters of each component of ``TransformerLM(config)``, from the sizes alone.

    Keys: ``word_to_embedding``, ``pos_to_embedding``, the parts of ONE layer (``attention``,
    ``norm_1``, ``mlp``, ``norm_2``: the two norms in the order the layer uses them), ``layer``
    (one whole layer), ``layers`` (all of them), ``final_norm``, ``lm_head`` (0 when tied) and
    ``total``. A tied head's weight is the token table, counted once, with the table.
    """
    s = _sizes(config)
    V, C, n_hidden = s["n_vocab"], s["emb_dim"], s["n_hidden"]
    inner = s["n_heads"] * s["head_dim"]  # nh·hs
    counts = {
        "word_to_embedding": V * C,
        "pos_to_embedding": s["max_len"] * C,
        "attention": 3 * C * inner + inner * C,  # query, key, value (C -> nh·hs), to_output (nh·hs -> C)
        "norm_1": 2 * C,  # weight and bias, (C,) each
        "mlp": C * n_hidden + n_hidden + n_hidden * C + C,  # two Linear layers with biases
        "norm_2": 2 * C,
    }
    counts["layer"] = counts["attention"] + counts["norm_1"] + counts["mlp"] + counts["norm_2"]
    counts["layers"] = s["n_layers"] * counts["layer"]
    counts["final_norm"] = 2 * C if s["final_norm"] else 0
    counts["lm_head"] = 0 if s["tie_weights"] else V * C
    counts["total"] = (counts["word_to_embedding"] + counts["pos_to_embedding"] + counts["layers"]
                       + counts["final_norm"] + counts["lm_head"])
    return counts


def _new_axes(ax, figsize):
    if ax is None:
        fig, ax = plt.subplots(figsize=figsize, layout="constrained")
    return ax.figure, ax


def _box(ax, x, y, width, height, title, detail="", colour=DATA_COLOUR, dashed=False):
    """A rounded box centred on (x, y), a bold first line and a smaller second one."""
    ax.add_patch(FancyBboxPatch((x - width / 2, y - height / 2), width, height,
                                boxstyle="round,pad=0.02,rounding_size=0.08", facecolor=colour,
                                edgecolor="#333333", linewidth=1.2, linestyle="--" if dashed else "-"))
    if detail:
        ax.text(x, y + height * 0.17, title, ha="center", va="center", fontsize=10.5, fontweight="bold")
        ax.text(x, y - height * 0.22, detail, ha="center", va="center", fontsize=9)
    else:
        ax.text(x, y, title, ha="center", va="center", fontsize=10.5, fontweight="bold")


def _arrow(ax, start, end, label="", side="right", colour="#333333"):
    """An arrow from start to end, with a shape label beside its middle."""
    ax.add_patch(FancyArrowPatch(start, end, arrowstyle="-|>", mutation_scale=14, color=colour,
                                 linewidth=1.3, shrinkA=0, shrinkB=0))
    if label:
        mid_x, mid_y = (start[0] + end[0]) / 2, (start[1] + end[1]) / 2
        offset = 0.12 if side == "right" else -0.12
        ax.text(mid_x + offset, mid_y, label, ha="left" if side == "right" else "right", va="center",
                fontsize=9, family="monospace", color="#1d3f6e")


def _plus(ax, x, y, radius=0.17):
    ax.add_patch(Circle((x, y), radius, facecolor="white", edgecolor="#333333", linewidth=1.2))
    ax.text(x, y, "+", ha="center", va="center", fontsize=13, fontweight="bold")


def draw_transformer_lm(config: Any, ax=None):
    """The whole TransformerLM of ``config`` as a block diagram, top to bottom; returns (fig, ax).

    Token ids (B, T) -> token embedding (V, C) + position embedding (max_len, C) -> n_layers
    layers (pre-LN blocks, or the seed's bare-bones layers when ``config.bare_bones``) -> final
    norm (if any) -> lm_head (tied or not) -> logits (B, T, V). Every arrow carries its shape with
    the config's numbers, every box its parameter count (``transformer_lm_parameters``).
    """
    s = _sizes(config)
    p = transformer_lm_parameters(config)
    V, C, L = s["n_vocab"], s["emb_dim"], s["n_layers"]
    nh, hs, n_hidden = s["n_heads"], s["head_dim"], s["n_hidden"]
    fig, ax = _new_axes(ax, (10, 14))
    ax.set_xlim(0, 10)
    ax.set_ylim(0, 14)
    ax.set_axis_off()
    cx, w, h = 5.0, 4.6, 0.8  # centre column, box width and height
    btc = f"(B, T, C={C})"

    _box(ax, cx, 13.4, 3.4, 0.55, "token ids  (B, T)", colour="white")
    _box(ax, 2.9, 12.0, 3.9, h, "token embedding", f"word_to_embedding (V, C) = ({V}, {C})\n"
         f"{p['word_to_embedding']:,} parameters", EMBEDDING_COLOUR)
    _box(ax, 7.3, 12.0, 3.9, h, "position embedding", f"pos_to_embedding (max_len, C) = "
         f"({s['max_len']}, {C})\n{p['pos_to_embedding']:,} parameters", EMBEDDING_COLOUR)
    ax.text(7.75, 13.3, "positions 0 … T−1", ha="center", va="center", fontsize=9, style="italic")
    _arrow(ax, (2.9, 13.12), (2.9, 12.4), "(B, T)", side="left")
    _arrow(ax, (7.3, 13.05), (7.3, 12.4), "(T,)")
    _plus(ax, cx, 10.95)
    _arrow(ax, (2.9, 11.6), (cx - 0.17, 10.95), btc, side="left")
    _arrow(ax, (7.3, 11.6), (cx + 0.17, 10.95), f"(T, C={C})")

    # the stack of layers, in a dashed frame
    top, bottom = 10.45, 4.55
    ax.add_patch(FancyBboxPatch((1.2, bottom), 7.6, top - bottom, boxstyle="round,pad=0.02,rounding_size=0.15",
                                facecolor="#f7f7f7", edgecolor="#666666", linestyle="--", linewidth=1.2))
    kind = "bare-bones layer (no residuals)" if s["bare_bones"] else "pre-LN transformer block"
    ax.text(1.4, top - 0.25, f"{L} × {kind}", ha="left", va="center", fontsize=10.5, fontweight="bold")
    ax.text(8.6, top - 0.25, f"{p['layer']:,} per layer, {p['layers']:,} in all",
            ha="right", va="center", fontsize=9)
    attention = ("multi-head causal attention", f"{nh} heads of hs={hs}: C → nh·hs={nh * hs} → C\n"
                 f"{p['attention']:,} parameters", ATTENTION_COLOUR)
    mlp = ("MLP", f"C={C} → n_hidden={n_hidden} → C={C}, ReLU between\n{p['mlp']:,} parameters", MLP_COLOUR)
    norm = ("LayerNorm", f"{2 * C} parameters (weight, bias)", NORM_COLOUR)
    if s["bare_bones"]:
        stages = [attention, norm, mlp, norm]
        ys = [9.35, 8.05, 6.75, 5.45]
        _arrow(ax, (cx, 10.78), (cx, ys[0] + h / 2), btc)
        for (title, detail, colour), y in zip(stages, ys, strict=True):
            _box(ax, cx, y, w, h, title, detail, colour)
        for upper, lower in zip(ys, ys[1:], strict=False):
            _arrow(ax, (cx, upper - h / 2), (cx, lower + h / 2), btc)
        last = ys[-1] - h / 2
    else:
        _arrow(ax, (cx, 10.78), (cx, 9.35 + 0.3), btc)
        for y0, (title, detail, colour) in ((9.35, attention), (6.75, mlp)):
            _box(ax, cx, y0, 2.6, 0.5, "LayerNorm", colour=NORM_COLOUR)
            ax.text(cx + 1.42, y0, f"{2 * C} parameters", ha="left", va="center", fontsize=9)
            _arrow(ax, (cx, y0 - 0.25), (cx, y0 - 0.58), btc)
            _box(ax, cx, y0 - 0.98, w, h, title, detail, colour)
            _plus(ax, cx, y0 - 1.8)
            _arrow(ax, (cx, y0 - 1.38), (cx, y0 - 1.63))
            # the residual stream: around the sub-layer, into the sum
            ax.plot([cx, 1.75, 1.75], [y0 + 0.4, y0 + 0.4, y0 - 1.8], color="#1d3f6e", linewidth=1.6)
            _arrow(ax, (1.75, y0 - 1.8), (cx - 0.17, y0 - 1.8), colour="#1d3f6e")
            ax.text(1.85, y0 - 0.7, "residual", rotation=90, ha="left", va="center", fontsize=9,
                    color="#1d3f6e")
        _arrow(ax, (cx, 9.35 - 1.97), (cx, 6.75 + 0.25), btc)
        last = 6.75 - 1.97

    # after the stack
    y_norm, y_head, y_out = 3.85, 2.55, 1.3
    _arrow(ax, (cx, last), (cx, y_norm + 0.3), btc)
    if s["final_norm"]:
        _box(ax, cx, y_norm, w, 0.6, "final LayerNorm", f"final_norm: {p['final_norm']} parameters", NORM_COLOUR)
    else:
        _box(ax, cx, y_norm, w, 0.6, "no final norm", "final_norm = nn.Identity: 0 parameters", "white",
             dashed=True)
    _arrow(ax, (cx, y_norm - 0.3), (cx, y_head + h / 2), btc)
    if s["tie_weights"]:
        head_detail = "Linear(C, V), no bias; weight tied to the token table:\n0 new parameters"
    else:
        head_detail = f"Linear(C, V), no bias; its own ({V}, {C}) weight:\n{p['lm_head']:,} parameters"
    _box(ax, cx, y_head, w + 0.6, h, "lm_head", head_detail, HEAD_OUT_COLOUR)
    if s["tie_weights"]:
        # the shared (V, C) tensor: a dotted line from the token table down to the head
        left = cx - (w + 0.6) / 2
        ax.plot([0.95, 0.6, 0.6, left], [12.0, 12.0, y_head, y_head], color="#888888", linestyle=":",
                linewidth=1.5)
        ax.text(0.5, 7.5, "one (V, C) tensor: lm_head.weight is word_to_embedding.weight", rotation=90,
                ha="right", va="center", fontsize=8.5, color="#555555")
    _arrow(ax, (cx, y_head - h / 2), (cx, y_out + 0.28), f"(B, T, V={V})")
    _box(ax, cx, y_out, 4.2, 0.55, f"logits  (B, T, V={V})", colour="white")
    ax.text(cx, 0.55, f"total: {p['total']:,} parameters", ha="center", va="center", fontsize=11,
            fontweight="bold")

    layer_words = "bare-bones layer" if s["bare_bones"] else "pre-LN block"
    ax.set_title(f"TransformerLM: {L} {layer_words}{'s' if L != 1 else ''}, C = {C}, {nh} heads of {hs}, "
                 f"V = {V}, {'tied' if s['tie_weights'] else 'untied'} head: {p['total']:,} parameters",
                 fontsize=11)
    return fig, ax


def _cells(ax, x0, y0, rows, cols, colour_of, text_of, size, show_text):
    """A grid of square cells whose top-left corner is (x0, y0), one row per time step."""
    for r in range(rows):
        for c in range(cols):
            colour, alpha = colour_of(r, c)
            ax.add_patch(Rectangle((x0 + c * size, y0 - (r + 1) * size), size, size, facecolor=colour,
                                   alpha=alpha, edgecolor="white", linewidth=1.0))
            if show_text:
                ax.text(x0 + (c + 0.5) * size, y0 - (r + 0.5) * size, text_of(r, c), ha="center",
                        va="center", fontsize=8.5, color="black")


def draw_head_split(B: int, T: int, nh: int, hs: int, ax=None):
    """How (B, T, nh·hs) becomes (B, nh, T, hs) and back, for one sequence of the batch.

    Three stages, left to right: the projection's output (T rows of nh·hs features, coloured by
    the head each feature belongs to), ``.view(B, T, nh, hs)`` (the same memory, each row cut into
    nh groups of hs), ``.transpose(1, 2)`` (one (T, hs) matrix per head). The arrows below go back:
    ``.transpose(1, 2)``, then ``.contiguous().view(B, T, nh·hs)``. The numbers in the cells (drawn
    when the tensor is small) are each feature's place in memory, ``arange(T·nh·hs)``.
    """
    for name, value in (("B", B), ("T", T), ("nh", nh), ("hs", hs)):
        if int(value) != value or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    C = nh * hs
    size = min(0.5, 3.2 / max(C, 1), 7.0 / max(T * nh + nh, 1))  # a cell's side, so the figure stays readable
    show_text = size >= 0.3
    width1 = C * size
    gap_group = size * 0.6
    width2 = C * size + (nh - 1) * gap_group
    width3 = hs * size
    height3 = nh * T * size + (nh - 1) * 0.45
    x1 = 0.4
    x2 = x1 + width1 + 2.2
    x3 = x2 + width2 + 2.2
    total_w = x3 + width3 + 1.4
    top = max(T * size, height3) + 1.3
    y_top = top - 1.2
    lowest = y_top - max(T * size + 0.6, height3)  # below the "head h" labels and the last head
    y_note = lowest - 0.45
    bottom = y_note - 0.4
    fig, ax = _new_axes(ax, (max(9.0, total_w * 1.05), max(3.0, (top - bottom) * 1.1 + 0.6)))
    ax.set_xlim(0, total_w)
    ax.set_ylim(bottom, top)
    ax.set_aspect("equal")
    ax.set_axis_off()

    def colour(h, f):
        return HEAD_COLOURS[h % len(HEAD_COLOURS)], 0.45 + 0.5 * (f + 1) / hs

    # stage 1: (T, nh·hs)
    _cells(ax, x1, y_top, T, C, lambda r, c: colour(c // hs, c % hs), lambda r, c: str(r * C + c), size, show_text)
    ax.text(x1 + width1 / 2, y_top + 0.75, "projection output", ha="center", fontsize=10, fontweight="bold")
    ax.text(x1 + width1 / 2, y_top + 0.35, f"(B, T, nh·hs) = ({B}, {T}, {C})", ha="center", fontsize=9,
            family="monospace")
    for t in range(T):
        ax.text(x1 - 0.1, y_top - (t + 0.5) * size, f"t={t}", ha="right", va="center", fontsize=8)

    # stage 2: (T, nh, hs), the same rows cut into groups
    for h in range(nh):
        gx = x2 + h * (hs * size + gap_group)
        _cells(ax, gx, y_top, T, hs, lambda r, c, h=h: colour(h, c), lambda r, c, h=h: str(r * C + h * hs + c),
               size, show_text)
        ax.text(gx + hs * size / 2, y_top - T * size - 0.25, f"head {h}", ha="center", va="top", fontsize=8.5,
                color=HEAD_COLOURS[h % len(HEAD_COLOURS)], fontweight="bold")
    ax.text(x2 + width2 / 2, y_top + 0.75, "split the features", ha="center", fontsize=10, fontweight="bold")
    ax.text(x2 + width2 / 2, y_top + 0.35, f"(B, T, nh, hs) = ({B}, {T}, {nh}, {hs})", ha="center", fontsize=9,
            family="monospace")

    # stage 3: (nh, T, hs), one matrix per head
    for h in range(nh):
        gy = y_top - h * (T * size + 0.45)
        _cells(ax, x3, gy, T, hs, lambda r, c, h=h: colour(h, c), lambda r, c, h=h: str(r * C + h * hs + c),
               size, show_text)
        ax.text(x3 + width3 + 0.12, gy - T * size / 2, f"head {h}\n(T, hs)", ha="left", va="center",
                fontsize=8.5, color=HEAD_COLOURS[h % len(HEAD_COLOURS)], fontweight="bold")
    ax.text(x3 + width3 / 2, y_top + 0.75, "heads in front of time", ha="center", fontsize=10,
            fontweight="bold")
    ax.text(x3 + width3 / 2, y_top + 0.35, f"(B, nh, T, hs) = ({B}, {nh}, {T}, {hs})", ha="center", fontsize=9,
            family="monospace")

    # the operations: split above, merge below
    y_fwd = y_top - T * size / 2 + 0.35
    y_back = y_fwd - 0.7
    for (a, b), split_op, merge_op in (
        ((x1 + width1 + 0.2, x2 - 0.2), ".view(B, T, nh, hs)", f".contiguous().view(B, T, {C})"),
        ((x2 + width2 + 0.2, x3 - 0.2), ".transpose(1, 2)", ".transpose(1, 2)"),
    ):
        ax.add_patch(FancyArrowPatch((a, y_fwd), (b, y_fwd), arrowstyle="-|>", mutation_scale=13, color="#333333"))
        ax.text((a + b) / 2, y_fwd + 0.12, split_op, ha="center", va="bottom", fontsize=8.5, family="monospace")
        ax.add_patch(FancyArrowPatch((b, y_back), (a, y_back), arrowstyle="-|>", mutation_scale=13,
                                     color="#1d3f6e", linestyle="--"))
        ax.text((a + b) / 2, y_back - 0.12, merge_op, ha="center", va="top", fontsize=8.5, family="monospace",
                color="#1d3f6e")
    ax.text(total_w / 2, y_note, "split: solid arrows, left to right. merge after attention: dashed arrows, "
            "right to left (the numbers return to their places: the heads' outputs side by side)",
            ha="center", va="center", fontsize=8.5, wrap=True)
    ax.set_title(f"Splitting (B, T, nh·hs) = ({B}, {T}, {C}) into nh = {nh} heads of hs = {hs}, "
                 f"and merging them back (one sequence of the batch shown)", fontsize=10.5)
    return fig, ax


def draw_kv_cache(T_prompt: int, n_steps: int, ax=None):
    """How a KV cache grows during generation: one row per forward pass, one column per position.

    Row 0 is the prompt (``T_prompt`` positions, all computed); row s (1 ... ``n_steps``) adds one
    generated position. In each row, cells computed in that pass (their query, key and value) are
    orange and labelled "new"; cells whose key and value are read from the cache are blue and
    labelled "K,V". The query whose logits choose the next token is marked with a triangle.
    """
    for name, value in (("T_prompt", T_prompt), ("n_steps", n_steps)):
        if int(value) != value or value < (1 if name == "T_prompt" else 0):
            raise ValueError(f"{name} must be a positive integer (n_steps may be 0), got {value!r}")
    T_prompt, n_steps = int(T_prompt), int(n_steps)
    total = T_prompt + n_steps
    size = min(0.7, 9.0 / total)
    rows = n_steps + 1
    width, height = max(7.0, total * size + 3.5), max(2.6, rows * size + 1.8)
    shrink = min(1.0, COLUMN_WIDTH_IN / width)  # no wider than a notebook column
    fig, ax = _new_axes(ax, (width * shrink, height * shrink))
    ax.set_xlim(-2.8, total * size + 0.4)
    ax.set_ylim(-rows * size - 0.9, 0.9)
    ax.set_aspect("equal")
    ax.set_axis_off()
    new_colour, cached_colour = HEAD_COLOURS[5], HEAD_COLOURS[0]
    for r in range(rows):
        known = T_prompt + r  # positions that exist after this pass
        first_new = 0 if r == 0 else known - 1
        y = -(r + 1) * size
        for c in range(known):
            fresh = c >= first_new
            ax.add_patch(Rectangle((c * size, y), size, size, facecolor=new_colour if fresh else cached_colour,
                                   alpha=0.85 if fresh else 0.45, edgecolor="white", linewidth=1.0))
            if size >= 0.45:
                ax.text((c + 0.5) * size, y + size / 2, "new" if fresh else "K,V", ha="center", va="center",
                        fontsize=7, color="black")
        ax.plot([(known - 0.5) * size], [y + size * 0.12], marker="^", color="black", markersize=5)
        label = f"prompt: {T_prompt} positions" if r == 0 else f"step {r}: 1 new, {known - 1} cached"
        ax.text(-0.15, y + size / 2, label, ha="right", va="center", fontsize=8.5)
    for c in range(total):
        ax.text((c + 0.5) * size, 0.15, str(c), ha="center", va="bottom", fontsize=7.5)
    ax.text(total * size / 2, 0.55, "position", ha="center", va="bottom", fontsize=9)
    ax.add_patch(Rectangle((0, -rows * size - 0.75), size * 0.6, size * 0.4, facecolor=new_colour, alpha=0.85))
    ax.text(size * 0.8, -rows * size - 0.55, "computed in this pass", va="center", fontsize=8.5)
    ax.add_patch(Rectangle((total * size * 0.5, -rows * size - 0.75), size * 0.6, size * 0.4, facecolor=cached_colour,
                           alpha=0.45))
    ax.text(total * size * 0.5 + size * 0.8, -rows * size - 0.55, "keys and values read from the cache; "
            "▲ the query whose logits pick the next token", va="center", fontsize=8.5)
    ax.set_title(f"A KV cache: the prompt once, then one position per step ({T_prompt} + {n_steps} positions)",
                 fontsize=10.5)
    return fig, ax


def _apart(ax, labels, step: float = 0.1, tries: int = 12) -> None:
    """Move each label outward along its arrow until it overlaps no label placed before it."""
    try:
        renderer = ax.figure.canvas.get_renderer()
    except AttributeError:  # a canvas that cannot measure text: leave the labels where they are
        return
    placed = []
    for text, vec in labels:
        for n in range(tries):
            box = text.get_window_extent(renderer).expanded(1.1, 1.3)
            if not any(box.overlaps(other) for other in placed):
                break
            scale = 1.08 + step * (n + 1)
            text.set_position((vec[0] * scale, vec[1] * scale))
        placed.append(text.get_window_extent(renderer))


def draw_rotation(theta: float, query_position: int, key_position: int, shift: int, ax=None):
    """RoPE on one pair of features: a query and a key turned by their positions, then all shifted.

    A query pair and a key pair (two fixed unit vectors) are turned by ``query_position * theta``
    and ``key_position * theta`` (solid arrows), then both positions move by ``shift`` (dashed
    arrows): both turn further by ``shift * theta``, and the angle between them, which alone sets
    their dot product, stays ``(key_position - query_position) * theta``. Angles in radians.
    Returns ``(fig, ax)``; the title states both dot products.
    """
    import math

    q0, k0 = (1.0, 0.25), (0.8, -0.45)

    def turn(v, angle):
        c, s = math.cos(angle), math.sin(angle)
        return (v[0] * c - v[1] * s, v[0] * s + v[1] * c)

    fig, ax = _new_axes(ax, (6.4, 6.0))
    ax.set_xlim(-1.75, 1.75)
    ax.set_ylim(-1.75, 1.75)
    ax.set_aspect("equal")
    ax.axhline(0, color="0.85", linewidth=0.8)
    ax.axvline(0, color="0.85", linewidth=0.8)
    ax.add_patch(Circle((0, 0), 1.03, fill=False, color="0.85", linestyle=":"))
    dots, labels = [], []
    for moved, style in ((0, "-"), (shift, "--")):
        q = turn(q0, (query_position + moved) * theta)
        k = turn(k0, (key_position + moved) * theta)
        dots.append(q[0] * k[0] + q[1] * k[1])
        for vec, colour, name, pos in ((q, HEAD_COLOURS[0], "query", query_position), (k, HEAD_COLOURS[5], "key",
                                                                                       key_position)):
            ax.add_patch(FancyArrowPatch((0, 0), vec, arrowstyle="-|>", mutation_scale=14, color=colour,
                                         linestyle=style, linewidth=1.8))
            # beyond the tip, on the arrow's side of the picture, so it grows away from the centre
            ha = "left" if vec[0] > 0.2 else "right" if vec[0] < -0.2 else "center"
            va = "bottom" if vec[1] > 0.2 else "top" if vec[1] < -0.2 else "center"
            labels.append((ax.text(vec[0] * 1.08, vec[1] * 1.08, f"{name}, position {pos + moved}", color=colour,
                                   fontsize=9, ha=ha, va=va), vec))
    _apart(ax, labels)
    ax.set_axis_off()
    ax.set_title(f"One RoPE pair, θ = {theta:g} rad per position: solid at positions {query_position} and "
                 f"{key_position}, dashed {shift} later.\nDot product {dots[0]:.4f} before, {dots[1]:.4f} after: "
                 "only the distance counts", fontsize=9.5)
    return fig, ax


__all__ += ["draw_kv_cache", "draw_rotation"]


def block_parameters(config: Any) -> dict[str, int]:
    """Trainable parameters of one block of lesson 11's ``modern_lm(config)``, from the sizes alone:
    ``norm`` (each of the two), ``attention``, ``feed_forward`` and ``block``. LayerNorm has a weight
    and a bias, RMSNorm a weight; grouped-query attention's key and value maps have ``n_kv_heads``
    heads; SwiGLU has three bias-free matrices, lesson 02's MLP two with biases."""
    C, H = config.emb_dim, config.n_hidden
    nh, hs = config.n_heads, config.head_dim
    n_kv = getattr(config, "n_kv_heads", 0) or nh
    bias = getattr(config, "attn_bias", False)
    counts = {
        "norm": C if getattr(config, "norm", "layer") == "rms" else 2 * C,
        # query and to_output (C <-> nh·hs), key and value (C -> n_kv·hs); their biases when attn_bias
        "attention": 2 * C * nh * hs + 2 * C * n_kv * hs + ((nh + 2 * n_kv) * hs + C if bias else 0),
        "feed_forward": 3 * C * H if getattr(config, "mlp", "mlp") == "swiglu" else 2 * C * H + H + C,
    }
    counts["block"] = 2 * counts["norm"] + counts["attention"] + counts["feed_forward"]
    return counts


def _block_column(ax, x: float, config: Any, title: str) -> None:
    """One pre-norm block of ``config`` drawn in a column centred at ``x``, top to bottom."""
    p = block_parameters(config)
    C, H, nh, hs = config.emb_dim, config.n_hidden, config.n_heads, config.head_dim
    n_kv = getattr(config, "n_kv_heads", 0) or nh
    rms = getattr(config, "norm", "layer") == "rms"
    rope = getattr(config, "positions", "learned") == "rope"
    norm = ("RMSNorm" if rms else "LayerNorm", f"x / rms(x) · weight: {p['norm']}" if rms
            else f"(x − mean) / std · weight + bias: {p['norm']}")
    heads = f"{nh} query heads, {n_kv} key/value head{'s' * (n_kv > 1)}" if n_kv != nh else f"{nh} heads"
    attention = ("causal attention", f"{heads} of hs={hs}\n" + ("RoPE turns queries and keys" if rope else
                 "positions were added to the input") + ("; biases" if getattr(config, "attn_bias", False) else
                 "; no biases") + f"\n{p['attention']:,} parameters", ATTENTION_COLOUR)
    activation = {"gelu_tanh": "GELU", "relu": "ReLU"}.get(getattr(config, "activation", "relu"), "ReLU")
    if getattr(config, "mlp", "mlp") == "swiglu":
        feed = ("SwiGLU", f"down(silu(gate(x)) · up(x)), C={C} → H={H} → C\n{p['feed_forward']:,} parameters, no biases", MLP_COLOUR)
    else:
        feed = ("MLP", f"C={C} → H={H} → C, {activation} between\n{p['feed_forward']:,} parameters, with biases", MLP_COLOUR)
    ax.text(x, 9.6, title, ha="center", va="center", fontsize=12, fontweight="bold")
    ax.text(x, 9.15, f"{p['block']:,} parameters per block", ha="center", va="center", fontsize=9.5)
    _arrow(ax, (x, 8.85), (x, 8.35), f"(B, T, C={C})")
    for y0, (name, detail), (big, more, colour) in ((8.1, norm, attention), (4.4, norm, feed)):
        _box(ax, x, y0, 3.6, 0.5, name, colour=NORM_COLOUR)
        ax.text(x, y0 - 0.42, detail + " parameters", ha="center", va="center", fontsize=8.5)
        _arrow(ax, (x, y0 - 0.6), (x, y0 - 0.95))
        _box(ax, x, y0 - 1.55, 4.2, 1.1, big, more, colour)
        _plus(ax, x, y0 - 2.55)
        _arrow(ax, (x, y0 - 2.1), (x, y0 - 2.38))
        ax.plot([x, x - 2.45, x - 2.45], [y0 + 0.35, y0 + 0.35, y0 - 2.55], color="#1d3f6e", linewidth=1.4)
        _arrow(ax, (x - 2.45, y0 - 2.55), (x - 0.17, y0 - 2.55), colour="#1d3f6e")
    _arrow(ax, (x, 8.1 - 2.72), (x, 4.4 + 0.25))
    _arrow(ax, (x, 4.4 - 2.72), (x, 0.95), f"(B, T, C={C})")


def draw_block_pair(before: Any, after: Any, ax=None, titles=("GPT-2-style block", "Llama-style block")):
    """Two pre-norm blocks side by side, ``before`` on the left and ``after`` on the right (lesson
    11: GPT-2's and Llama's), each with its norms, attention (heads, key/value heads, where the
    positions enter) and feed-forward, and the parameter count of every part (``block_parameters``)
    computed from the two configurations; returns (fig, ax)."""
    fig, ax = _new_axes(ax, (13, 7.5))
    ax.set_xlim(0, 13)
    ax.set_ylim(0.6, 10)
    ax.set_axis_off()
    _block_column(ax, 3.4, before, titles[0])
    _block_column(ax, 9.8, after, titles[1])
    ax.set_title("One block before and after: what changes from GPT-2 to Llama", fontsize=12)
    return fig, ax


__all__ += ["draw_lora"]
FROZEN_COLOUR = "#e0e0e0"
ADAPTER_COLOUR = "#f8d7c4"


def draw_lora(in_features: int, out_features: int, r: int, alpha: float, ax=None):
    """A LoRA layer (lesson 12): the frozen weight W on one path, the adapters A and B on the
    other, their sum; each box with its shape and parameter count, computed from the sizes; the
    trainable share in the title. Returns (fig, ax)."""
    fig, ax = _new_axes(ax, (9.6, 5.2))
    ax.set_xlim(0, 10)
    ax.set_ylim(0, 7.4)
    ax.set_axis_off()
    frozen, trained = in_features * out_features, r * (in_features + out_features)
    _box(ax, 5, 0.7, 2.4, 0.8, "x", f"(..., {in_features})")
    _box(ax, 2.6, 3.4, 3.4, 1.2, "W (frozen)", f"({out_features}, {in_features}): {frozen:,} parameters", FROZEN_COLOUR)
    _box(ax, 7.4, 2.5, 3.2, 1.1, "A (trains)", f"({r}, {in_features}): {r * in_features:,}; starts random", ADAPTER_COLOUR)
    _box(ax, 7.4, 4.3, 3.2, 1.1, "B (trains)", f"({out_features}, {r}): {r * out_features:,}; starts at 0", ADAPTER_COLOUR)
    _arrow(ax, (4.4, 1.1), (3.0, 2.8))
    _arrow(ax, (5.6, 1.1), (7.0, 1.95))
    _arrow(ax, (7.4, 3.05), (7.4, 3.75), f"(..., {r})")
    _plus(ax, 5, 5.9)
    _arrow(ax, (2.6, 4.0), (4.83, 5.83), "base(x)", side="left")
    _arrow(ax, (7.4, 4.85), (5.17, 5.83), f"× alpha / r = {alpha / r:g}")
    _arrow(ax, (5, 6.08), (5, 6.62))
    _box(ax, 5, 6.95, 2.4, 0.6, "y", f"(..., {out_features})")
    ax.set_title(f"LoRA at rank {r}: {trained:,} trainable parameters beside {frozen:,} frozen ones "
                 f"({trained / frozen:.1%})", fontsize=11)
    return fig, ax
