"""Tests for helpers.diagrams: the TransformerLM block diagram and the head split picture.

Every picture is rendered headless (Agg) to PNG. The parameter counts written on the diagram are
compared with ``num_parameters`` of the components of a real ``TransformerLM``, so a wrong formula
in the diagram fails here.
"""

import io

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from helpers.diagrams import draw_head_split, draw_transformer_lm, transformer_lm_parameters  # noqa: E402
from helpers.params import num_parameters  # noqa: E402
from helpers.reference.transformer_lm import Config, TransformerLM  # noqa: E402

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"

CONFIGS = {
    # lesson 07's model: four pre-LN blocks, a final norm, a tied head
    "proper": Config(n_vocab=256, max_len=128, emb_dim=64, n_hidden=256, head_dim=16, n_heads=4, n_layers=4),
    # the seed's model: one bare-bones layer, no final norm, tied: 11971 parameters
    "seed": Config(bare_bones=True, final_norm=False),
    # sizes that are all different, an untied head, three blocks
    "untied": Config(n_vocab=97, max_len=11, emb_dim=6, n_hidden=13, head_dim=3, n_heads=5, n_layers=3,
                     tie_weights=False),
}


@pytest.fixture(autouse=True)
def _headless(monkeypatch):
    """Fail any test that calls plt.show(), and close every figure afterwards."""

    def _no_show(*args, **kwargs):
        raise AssertionError("diagram functions must not call plt.show()")

    monkeypatch.setattr(plt, "show", _no_show)
    yield
    plt.close("all")


def png_bytes(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=40)
    return buf.getvalue()


def all_text(fig) -> str:
    """Every string drawn on the figure (titles included), joined by newlines."""
    return "\n".join(t.get_text() for t in fig.findobj(matplotlib.text.Text))


def real_counts(config) -> dict[str, int]:
    """num_parameters of the components of a real TransformerLM(config)."""
    model = TransformerLM(config)
    layer = model.layers[0]
    if config.bare_bones:
        attention, norm_1, mlp, norm_2 = (layer.self_attention, layer.norm_after_attn, layer.mlp,
                                          layer.norm_after_mlp)
    else:
        attention, norm_1, mlp, norm_2 = layer.attention, layer.norm_before_attn, layer.mlp, layer.norm_before_mlp
    head_own = 0 if model.lm_head.weight is model.word_to_embedding.weight else num_parameters(model.lm_head)
    return {
        "word_to_embedding": num_parameters(model.word_to_embedding),
        "pos_to_embedding": num_parameters(model.pos_to_embedding),
        "attention": num_parameters(attention),
        "norm_1": num_parameters(norm_1),
        "mlp": num_parameters(mlp),
        "norm_2": num_parameters(norm_2),
        "layer": num_parameters(layer),
        "layers": num_parameters(model.layers),
        "final_norm": num_parameters(model.final_norm),
        "lm_head": head_own,
        "total": num_parameters(model),
    }


@pytest.mark.parametrize("name", list(CONFIGS))
def test_parameter_formulas_match_the_real_model(name):
    assert transformer_lm_parameters(CONFIGS[name]) == real_counts(CONFIGS[name])


def test_the_seed_model_has_11971_parameters():
    assert transformer_lm_parameters(CONFIGS["seed"])["total"] == 11971


@pytest.mark.parametrize("name", list(CONFIGS))
def test_transformer_lm_diagram_renders_and_returns_fig_ax(name):
    fig, ax = draw_transformer_lm(CONFIGS[name])
    assert isinstance(fig, Figure) and isinstance(ax, Axes)
    assert ax.figure is fig
    assert png_bytes(fig).startswith(PNG_SIGNATURE)
    assert ax.get_title(), "the diagram needs a title that describes it"


@pytest.mark.parametrize("name", list(CONFIGS))
def test_transformer_lm_diagram_shows_the_real_counts_and_shapes(name):
    config = CONFIGS[name]
    fig, ax = draw_transformer_lm(config)
    text = all_text(fig)
    counts = real_counts(config)
    for key in ("word_to_embedding", "pos_to_embedding", "attention", "mlp", "layer", "layers", "total"):
        assert f"{counts[key]:,} " in text, f"{key}: {counts[key]:,} parameters missing from the diagram"
    assert f"{counts['norm_1']} parameters" in text
    if config.final_norm:
        assert f"final_norm: {counts['final_norm']} parameters" in text
    else:
        assert "nn.Identity: 0 parameters" in text
    if config.tie_weights:
        assert "0 new parameters" in text
    else:
        assert f"{counts['lm_head']:,} parameters" in text
    V, C = config.n_vocab, config.emb_dim
    for shape in (f"(V, C) = ({V}, {C})", f"(max_len, C) = ({config.max_len}, {C})", f"(B, T, C={C})",
                  f"(B, T, V={V})", "(B, T)", f"C={C} → n_hidden={config.n_hidden} → C={C}",
                  f"{config.n_heads} heads of hs={config.head_dim}", f"{config.n_layers} × "):
        assert shape in text, f"{shape!r} missing from the diagram"
    assert f"{counts['total']:,} parameters" in ax.get_title()


def test_two_configs_give_different_labels():
    first = all_text(draw_transformer_lm(CONFIGS["proper"])[0])
    second = all_text(draw_transformer_lm(CONFIGS["untied"])[0])
    assert first != second
    assert "223,616" in first and "223,616" not in second


def test_transformer_lm_diagram_honours_ax_and_leaks_no_figure():
    fig, ax = plt.subplots()
    before = plt.get_fignums()
    got_fig, got_ax = draw_transformer_lm(CONFIGS["seed"], ax=ax)
    assert got_ax is ax and got_fig is fig
    assert plt.get_fignums() == before
    assert ax.patches, "the diagram must be drawn into the given axes"


def test_transformer_lm_diagram_refuses_something_that_is_not_a_config():
    with pytest.raises(TypeError, match="Config"):
        draw_transformer_lm({"emb_dim": 5})


@pytest.mark.parametrize("B, T, nh, hs", [(1, 3, 2, 2), (2, 6, 4, 3), (3, 5, 3, 7)])
def test_head_split_renders_with_its_shapes(B, T, nh, hs):
    fig, ax = draw_head_split(B, T, nh, hs)
    assert isinstance(fig, Figure) and isinstance(ax, Axes) and ax.figure is fig
    assert png_bytes(fig).startswith(PNG_SIGNATURE)
    text = all_text(fig)
    for shape in (f"(B, T, nh·hs) = ({B}, {T}, {nh * hs})", f"(B, T, nh, hs) = ({B}, {T}, {nh}, {hs})",
                  f"(B, nh, T, hs) = ({B}, {nh}, {T}, {hs})", ".view(B, T, nh, hs)", ".transpose(1, 2)",
                  f".contiguous().view(B, T, {nh * hs})"):
        assert shape in text, f"{shape!r} missing"
    for h in range(nh):
        assert f"head {h}" in text
    assert ax.get_title()


def test_head_split_colours_each_head_apart():
    """Stage 1 has T·nh·hs cells; the features of head h share one colour family."""
    fig, ax = draw_head_split(1, 3, 2, 2)
    colours = {tuple(round(v, 3) for v in p.get_facecolor()[:3]) for p in ax.patches
               if isinstance(p, matplotlib.patches.Rectangle)}
    assert len(colours) >= 2


def test_head_split_numbers_follow_memory_order():
    """Small tensors carry their memory positions: head 1's first row is hs..2·hs-1."""
    fig, ax = draw_head_split(1, 3, 2, 2)
    numbers = [t.get_text() for t in ax.texts if t.get_text().isdigit()]
    # three stages, each showing every one of the 12 numbers once
    assert sorted(numbers, key=int) == sorted([str(i) for i in range(12)] * 3, key=int)


def test_head_split_honours_ax_and_leaks_no_figure():
    fig, ax = plt.subplots()
    before = plt.get_fignums()
    got_fig, got_ax = draw_head_split(2, 4, 2, 3, ax=ax)
    assert got_ax is ax and got_fig is fig
    assert plt.get_fignums() == before


def test_head_split_refuses_bad_sizes():
    with pytest.raises(ValueError, match="nh"):
        draw_head_split(1, 3, 0, 2)


# ---------------------------------------------------------------------------------------------
# lesson 09: the KV cache growing, and one RoPE pair


def test_kv_cache_draws_a_row_per_pass_and_counts_the_cache():
    from helpers.diagrams import draw_kv_cache

    fig, ax = draw_kv_cache(T_prompt=4, n_steps=3)
    text = all_text(fig)
    assert "prompt: 4 positions" in text and "step 3: 1 new, 6 cached" in text
    assert png_bytes(fig)[:8] == PNG_SIGNATURE
    with pytest.raises(ValueError, match="T_prompt"):
        draw_kv_cache(0, 2)


def test_rotation_keeps_the_dot_product_when_both_positions_move():
    import re

    from helpers.diagrams import draw_rotation

    fig, ax = draw_rotation(theta=0.4, query_position=1, key_position=4, shift=3)
    before, after = re.findall(r"Dot product (-?[0-9.]+) before, (-?[0-9.]+) after", ax.get_title())[0]
    assert before == after
    assert "position 7" in all_text(fig)
    assert png_bytes(fig)[:8] == PNG_SIGNATURE


def test_rotation_labels_do_not_overlap():
    """Lesson 09's picture: the key at position 5 and the query at position 2 point nearly the same
    way; their labels used to sit on top of each other."""
    from helpers.diagrams import draw_rotation

    for args in ((0.35, 2, 5, 4), (0.4, 1, 4, 3), (0.1, 0, 1, 2)):
        fig, ax = draw_rotation(*args)
        renderer = fig.canvas.get_renderer()
        boxes = [t.get_window_extent(renderer) for t in ax.texts]
        assert len(boxes) == 4
        for i, box in enumerate(boxes):
            assert not any(box.overlaps(other) for other in boxes[i + 1 :]), f"{args}: label {i} overlaps"
            assert fig.bbox.contains(box.x0, box.y0) and fig.bbox.contains(box.x1, box.y1), f"{args}: label {i} cut off"
        plt.close(fig)
