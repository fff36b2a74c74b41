"""Tests for helpers.plotting: shapes, colours, labels and errors of the attention plots."""

import io
import math

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.colors import to_rgba  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from helpers import plotting  # noqa: E402
from helpers.plotting import (  # noqa: E402
    plot_attention_grid,
    plot_attention_weights,
    plot_causal_mask,
    plot_loss_curves,
    plot_query_key_products,
    plot_tokens_kept,
)

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(autouse=True)
def _headless(monkeypatch):
    """Fail any test that calls plt.show(), and close every figure afterwards."""

    def _no_show(*args, **kwargs):
        raise AssertionError("plotting functions must not call plt.show()")

    monkeypatch.setattr(plt, "show", _no_show)
    yield
    plt.close("all")


def causal_scores(n: int, seed: int = 0) -> torch.Tensor:
    """Random (n, n) scores with the future (j > i) set to -inf."""
    gen = torch.Generator().manual_seed(seed)
    scores = torch.randn(n, n, generator=gen)
    future = torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1)
    return scores.masked_fill(future, float("-inf"))


def png_bytes(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=40)
    return buf.getvalue()


def tick_texts(ax, axis: str) -> list[str]:
    ticks = ax.get_xticklabels() if axis == "x" else ax.get_yticklabels()
    return [t.get_text() for t in ticks]


def cell_texts(ax) -> list[str]:
    return [t.get_text() for t in ax.texts]


def luminance(colour) -> float:
    r, g, b, _ = to_rgba(colour)
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


# --- every plot: types, PNG, no show, no global state -----------------------------------------

ALL_PLOTS = {
    "query_key_products": lambda: plot_query_key_products(causal_scores(5), "hello"),
    "attention_weights": lambda: plot_attention_weights(
        torch.softmax(causal_scores(5), dim=-1), "hello"
    ),
    "causal_mask": lambda: plot_causal_mask(5, "hello"),
    "attention_grid": lambda: plot_attention_grid(
        torch.softmax(torch.randn(2, 3, 5, 5), dim=-1), "hello"
    ),
    "loss_curves": lambda: plot_loss_curves({"train": [3.0, 2.0, 1.5]}),
    "tokens_kept": lambda: plot_tokens_kept(torch.tensor([3, 1, 7, 2, 2]), "hello", p=0.9, k=3),
}


@pytest.mark.parametrize("name", sorted(ALL_PLOTS))
def test_every_plot_returns_a_figure_and_renders_png_headless(name):
    rc_before = dict(matplotlib.rcParams)
    fig, ax_or_axes = ALL_PLOTS[name]()
    assert isinstance(fig, Figure)
    if name == "attention_grid":
        assert isinstance(ax_or_axes, np.ndarray) and ax_or_axes.ndim == 2
        assert all(isinstance(a, Axes) for a in ax_or_axes.flat)
    else:
        assert isinstance(ax_or_axes, Axes)
        assert ax_or_axes.figure is fig
    data = png_bytes(fig)
    assert data.startswith(PNG_SIGNATURE) and len(data) > 1000
    assert dict(matplotlib.rcParams) == rc_before, "a plotting function changed rcParams"


@pytest.mark.parametrize(
    "plot, data",
    [
        (plot_query_key_products, causal_scores(4)),
        (plot_attention_weights, torch.softmax(causal_scores(4), dim=-1)),
        (plot_causal_mask, torch.tril(torch.ones(4, 4, dtype=torch.bool))),
    ],
)
def test_draws_into_a_given_axes_without_making_a_figure(plot, data):
    fig, ax = plt.subplots()
    n_figures = len(plt.get_fignums())
    got_fig, got_ax = plot(data, "abcd", ax=ax)
    assert got_ax is ax and got_fig is fig
    assert len(plt.get_fignums()) == n_figures
    assert ax.images, "nothing was drawn into the given axes"


def test_tokens_kept_draws_into_a_given_axes():
    fig, ax = plt.subplots()
    n_figures = len(plt.get_fignums())
    got_fig, got_ax = plot_tokens_kept([2, 5, 1], "abc", p=0.8, k=2, ax=ax)
    assert got_ax is ax and got_fig is fig
    assert len(plt.get_fignums()) == n_figures
    assert len(ax.get_lines()) == 2


def test_loss_curves_draw_into_a_given_axes():
    fig, ax = plt.subplots()
    got_fig, got_ax = plot_loss_curves({"train": [2.0, 1.0]}, ax=ax)
    assert got_ax is ax and got_fig is fig
    assert len(ax.get_lines()) == 1


def test_tensors_requiring_grad_and_numpy_arrays_are_accepted():
    scores = causal_scores(4).clone().requires_grad_(False)
    leaf = torch.randn(4, 4, requires_grad=True)
    with_grad = leaf * 2  # a non-leaf tensor in the autograd graph
    fig, ax = plot_query_key_products(with_grad, "abcd")
    expected = with_grad.detach().numpy()
    np.testing.assert_allclose(np.asarray(ax.images[0].get_array()), expected, rtol=1e-6)

    weights = torch.softmax(leaf, dim=-1)
    assert weights.requires_grad
    plot_attention_weights(weights)
    plot_attention_grid(weights.unsqueeze(0))

    plot_query_key_products(scores.numpy())
    plot_attention_weights(torch.softmax(scores, -1).numpy())


# --- tokens --------------------------------------------------------------------------------------


def test_tick_labels_show_positions_and_readable_tokens():
    fig, ax = plot_query_key_products(causal_scores(6), "a b\n\tc")
    expected = ["0: a", "1: ␣", "2: b", "3: ↵", "4: ⇥", "5: c"]
    assert tick_texts(ax, "x") == expected
    assert tick_texts(ax, "y") == expected
    assert ax.get_xlabel() == "key (position: token)"
    assert ax.get_ylabel() == "query (position: token)"


def test_tokens_may_be_a_list_of_strings():
    fig, ax = plot_attention_weights(torch.full((3, 3), 1 / 3), ["the", " cat", "$"])
    assert tick_texts(ax, "x") == ["0: the", "1: ␣cat", r"2: \$"]
    png_bytes(fig)  # "$" must not break the maths parser


def test_without_tokens_ticks_are_positions():
    fig, ax = plot_attention_weights(torch.full((3, 3), 1 / 3))
    assert tick_texts(ax, "x") == ["0", "1", "2"]
    assert "key" in ax.get_xlabel() and "query" in ax.get_ylabel()


@pytest.mark.parametrize(
    "plot, data",
    [
        (plot_query_key_products, causal_scores(5)),
        (plot_attention_weights, torch.full((5, 5), 0.2)),
        (plot_causal_mask, 5),
        (plot_attention_grid, torch.full((2, 5, 5), 0.2)),
    ],
)
def test_token_count_mismatch_is_a_clear_error(plot, data):
    with pytest.raises(ValueError, match=r"tokens has 4 entries but the \w+ axis has 5 positions"):
        plot(data, "abcd")


# --- query-key products --------------------------------------------------------------------------


def test_query_key_products_use_a_diverging_map_centred_on_zero():
    scores = torch.tensor([[3.0, -1.0], [0.5, 0.0]])
    fig, ax = plot_query_key_products(scores, "ab")
    image = ax.images[0]
    assert image.norm.vmin == -image.norm.vmax == -3.0
    cmap = image.cmap
    low, mid, high = cmap(0.0), cmap(0.5), cmap(1.0)
    assert not np.allclose(low, high), "the two ends of a diverging map differ"
    assert luminance(mid) > luminance(low) + 0.3 and luminance(mid) > luminance(high) + 0.3
    assert ax.get_title() == "Query-key products"
    assert "query·key" in image.colorbar.ax.get_ylabel()


def test_masked_entries_are_drawn_grey_and_named_in_the_colorbar():
    scores = causal_scores(4)
    fig, ax = plot_query_key_products(scores, "abcd", title="Masked scores")
    image = ax.images[0]
    drawn = image.get_array()
    np.testing.assert_array_equal(np.ma.getmaskarray(drawn), torch.isinf(scores).numpy())
    rgba = image.to_rgba(drawn)
    grey = to_rgba(plotting.MASKED_COLOR)
    assert np.allclose(rgba[0, 3], grey), "a -inf entry is not drawn in the masked colour"
    assert not np.allclose(rgba[3, 0], grey), "a finite entry is drawn in the masked colour"
    r, g, b, _ = grey
    assert r == g == b, "the masked colour is a neutral grey"
    assert "grey = masked (-inf)" in image.colorbar.ax.get_ylabel()
    assert ax.get_title() == "Masked scores"
    assert cell_texts(ax).count("-inf") == 6
    # the limits come from the finite entries only
    finite_max = scores[torch.isfinite(scores)].abs().max().item()
    assert image.norm.vmax == pytest.approx(finite_max)


def test_no_masked_note_when_nothing_is_masked():
    fig, ax = plot_query_key_products(torch.randn(3, 3))
    assert "masked" not in ax.images[0].colorbar.ax.get_ylabel()


@pytest.mark.parametrize(
    "scores",
    [torch.zeros(3, 3), torch.full((3, 3), float("-inf"))],
    ids=["all-zero", "all-masked"],
)
def test_degenerate_scores_get_finite_symmetric_limits(scores):
    fig, ax = plot_query_key_products(scores)
    norm = ax.images[0].norm
    assert math.isfinite(norm.vmax) and norm.vmax > 0 and norm.vmin == -norm.vmax
    png_bytes(fig)


def test_small_matrices_are_annotated_and_large_ones_are_not():
    scores = torch.tensor([[1.234, -0.001], [-2.5, float("-inf")]])
    fig, ax = plot_query_key_products(scores)
    assert sorted(cell_texts(ax)) == sorted(["1.23", "0.00", "-2.50", "-inf"])

    side = math.isqrt(plotting.ANNOTATE_MAX_CELLS) + 1
    fig, ax = plot_query_key_products(torch.randn(side, side))
    assert cell_texts(ax) == []


def test_annotation_colour_contrasts_with_the_cell():
    scores = torch.tensor([[-4.0, 0.0], [4.0, 0.0]])
    fig, ax = plot_query_key_products(scores)
    colour = {(round(t.get_position()[1]), round(t.get_position()[0])): t for t in ax.texts}
    assert to_rgba(colour[(0, 0)].get_color()) == to_rgba("white"), "dark cell, light text"
    assert to_rgba(colour[(0, 1)].get_color()) == to_rgba("black"), "light cell, dark text"


def test_query_key_products_reject_a_3d_tensor():
    with pytest.raises(ValueError, match=r"2-D \(queries x keys\).*\(2, 3, 4\)"):
        plot_query_key_products(torch.randn(2, 3, 4))


# --- attention weights ---------------------------------------------------------------------------


def test_attention_weights_use_a_fixed_sequential_scale():
    weights = torch.softmax(causal_scores(5), dim=-1)
    fig, ax = plot_attention_weights(weights, "hello")
    image = ax.images[0]
    assert image.norm.vmin == 0.0 and image.norm.vmax == 1.0
    assert image.cmap.name == plotting.WEIGHTS_CMAP
    # sequential: lightness increases along the map
    lum = [luminance(image.cmap(x)) for x in np.linspace(0, 1, 5)]
    assert lum == sorted(lum)
    assert image.colorbar.ax.get_ylabel() == "weight (each row sums to 1)"
    assert ax.get_title() == "Attention weights"
    assert "1.00" in cell_texts(ax) and "0.00" in cell_texts(ax)
    # the scale stays 0..1 even when the weights span less (here: all 1/3)
    fig, ax = plot_attention_weights(torch.full((3, 3), 1 / 3))
    assert (ax.images[0].norm.vmin, ax.images[0].norm.vmax) == (0.0, 1.0)


@pytest.mark.parametrize(
    "weights, message",
    [
        (torch.randn(3, 3) * 5, "softmax"),
        (torch.tensor([[float("nan"), 1.0], [0.5, 0.5]]), "NaN"),
        (torch.full((2, 3, 3), 0.3), "2-D"),
    ],
)
def test_attention_weights_reject_bad_input(weights, message):
    with pytest.raises(ValueError, match=message):
        plot_attention_weights(weights)


# --- causal mask ---------------------------------------------------------------------------------


def test_causal_mask_from_a_length_hides_the_future():
    fig, ax = plot_causal_mask(5, "hello")
    image = ax.images[0]
    drawn = np.asarray(image.get_array())
    np.testing.assert_array_equal(drawn, np.tril(np.ones((5, 5))))
    rgba = image.to_rgba(image.get_array())
    visible, hidden = rgba[4, 0], rgba[0, 4]
    assert np.allclose(visible, to_rgba(plotting.VISIBLE_COLOR))
    assert np.allclose(hidden, to_rgba(plotting.MASKED_COLOR))
    assert abs(luminance(visible) - luminance(hidden)) > 0.4, "weak greyscale contrast"
    labels = tick_texts(image.colorbar.ax, "y")
    assert "visible" in labels and "hidden (future)" in labels
    assert tick_texts(ax, "x")[1] == "1: e"
    assert ax.get_title() == "Causal mask"


@pytest.mark.parametrize(
    "mask",
    [
        torch.tril(torch.ones(4, 4, dtype=torch.bool)),
        causal_scores(4),  # -inf = hidden
        torch.zeros(4, 4).masked_fill(torch.triu(torch.ones(4, 4), 1) == 1, float("-inf")),
        torch.tril(torch.ones(4, 4)),  # a float 0/1 mask
        torch.tril(torch.ones(4, 4, dtype=torch.long)),
    ],
    ids=["bool", "scores", "additive", "float01", "int01"],
)
def test_causal_mask_accepts_bool_float_and_int_masks(mask):
    fig, ax = plot_causal_mask(mask)
    np.testing.assert_array_equal(np.asarray(ax.images[0].get_array()), np.tril(np.ones((4, 4))))


def test_causal_mask_float_without_minus_inf_is_all_visible():
    fig, ax = plot_causal_mask(torch.randn(3, 3))
    assert np.asarray(ax.images[0].get_array()).all()


@pytest.mark.parametrize(
    "bad, message",
    [
        (0, "at least 1"),
        (torch.ones(1, 1, 4, 4, dtype=torch.bool), r"2-D.*mask\[0, 0\]"),
        (torch.tensor([[0, 2], [1, 1]]), "only 0"),
        (True, "bool"),
    ],
)
def test_causal_mask_rejects_bad_input(bad, message):
    with pytest.raises(ValueError, match=message):
        plot_causal_mask(bad)


# --- attention grid ------------------------------------------------------------------------------


def test_grid_of_layers_by_heads():
    weights = torch.softmax(torch.randn(2, 3, 4, 4), dim=-1)
    fig, axes = plot_attention_grid(weights, "abcd")
    assert axes.shape == (2, 3)
    assert axes[1, 2].get_title() == "layer 1, head 2"
    assert axes[0, 0].get_title() == "layer 0, head 0"
    np.testing.assert_allclose(
        np.asarray(axes[1, 2].images[0].get_array()), weights[1, 2].numpy(), rtol=1e-6
    )
    # one shared colorbar for all panels, on the weights' fixed scale
    colorbars = {id(a.images[0].colorbar) for a in axes.flat if a.images[0].colorbar}
    assert len(colorbars) == 1
    assert len(fig.axes) == 6 + 1
    assert all(a.images[0].norm.vmin == 0 and a.images[0].norm.vmax == 1 for a in axes.flat)
    # tokens on the outer axes only
    tokens = ["0: a", "1: b", "2: c", "3: d"]
    assert tick_texts(axes[1, 1], "x") == tokens
    assert tick_texts(axes[0, 0], "y") == tokens
    assert tick_texts(axes[1, 0], "y") == tokens
    assert not any(tick_texts(axes[0, 1], "x")) and not any(tick_texts(axes[0, 1], "y"))
    assert fig.get_suptitle()


def test_grid_of_heads_wraps_into_ncols_and_hides_unused_panels():
    weights = torch.full((5, 3, 3), 1 / 3)
    fig, axes = plot_attention_grid(weights, "xyz", ncols=2, suptitle="Layer 0")
    assert axes.shape == (3, 2)
    assert [a.get_title() for a in axes.flat][:5] == [f"head {h}" for h in range(5)]
    assert not axes[2, 1].axison and not axes[2, 1].images
    # head 3 sits above the empty panel, so it carries the key labels of its column
    assert tick_texts(axes[1, 1], "x") == ["0: x", "1: y", "2: z"]
    assert fig.get_suptitle() == "Layer 0"


def test_grid_figure_size_grows_with_the_grid():
    small, _ = plot_attention_grid(torch.full((1, 2, 4, 4), 0.25))
    large, _ = plot_attention_grid(torch.full((3, 4, 4, 4), 0.25))
    assert large.get_figwidth() > small.get_figwidth()
    assert large.get_figheight() > small.get_figheight()


def test_grid_custom_titles():
    fig, axes = plot_attention_grid(torch.full((2, 3, 3), 1 / 3), titles=["prev", "self"])
    assert [a.get_title() for a in axes.flat] == ["prev", "self"]


@pytest.mark.parametrize(
    "weights, kwargs, message",
    [
        (torch.full((3, 3), 1 / 3), {}, r"\(H, T, T\).*\(L, H, T, T\).*\(3, 3\)"),
        (torch.full((2, 3, 3), 1 / 3), {"titles": ["only one"]}, "titles has 1"),
        (torch.full((2, 2, 3, 3), 1 / 3), {"ncols": 1}, "one row per layer"),
        (torch.full((2, 3, 3), 1 / 3), {"ncols": 0}, "ncols"),
        (torch.full((2, 3, 3), 2.0), {}, r"\[0, 1\]"),
    ],
)
def test_grid_rejects_bad_input(weights, kwargs, message):
    with pytest.raises(ValueError, match=message):
        plot_attention_grid(weights, **kwargs)


# --- loss curves ---------------------------------------------------------------------------------


def loss_log() -> pd.DataFrame:
    steps = np.arange(0, 100, 10)
    train = 5.0 - 0.03 * steps
    val = np.where(steps % 30 == 0, 5.2 - 0.03 * steps, np.nan)
    return pd.DataFrame({"step": steps, "train_loss": train, "val_loss": val, "lr": 3e-4})


def test_loss_curves_from_a_dataframe_plot_only_measured_points():
    log = loss_log()
    fig, ax = plot_loss_curves(log, reference={"uniform guess ln 256": math.log(256)})
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert set(lines) == {"train_loss", "val_loss", "uniform guess ln 256 (5.55)"}
    val = lines["val_loss"]
    np.testing.assert_array_equal(val.get_xdata(), [0, 30, 60, 90])
    assert not np.isnan(val.get_ydata()).any()
    assert val.get_marker() not in (None, "None", ""), "a sparse column needs markers"
    assert len(lines["train_loss"].get_xdata()) == len(log)
    ref = lines["uniform guess ln 256 (5.55)"]
    assert ref.get_linestyle() == "--"
    assert np.allclose(ref.get_ydata(), math.log(256))
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "train_loss" in legend and "val_loss" in legend
    assert any("uniform guess ln 256" in t for t in legend)
    assert ax.get_title() == "Loss" and ax.get_ylabel() == "cross-entropy (nats)"
    assert ax.get_xlabel() == "step"


def test_loss_curves_from_a_dict_of_sequences():
    log = {"train": torch.tensor([3.0, 2.0, 1.0]), "val": [3.5, float("nan"), 2.5]}
    fig, ax = plot_loss_curves(log, title="Training", ylabel="loss")
    lines = {line.get_label(): line for line in ax.get_lines()}
    np.testing.assert_array_equal(lines["train"].get_xdata(), [0, 1, 2])
    np.testing.assert_array_equal(lines["val"].get_xdata(), [0, 2])
    assert ax.get_title() == "Training" and ax.get_ylabel() == "loss"


@pytest.mark.parametrize(
    "log, message",
    [
        (pd.DataFrame({"iteration": [0, 1], "loss": [2.0, 1.0]}), "'step' column"),
        (pd.DataFrame({"step": [0, 1], "note": ["a", "b"]}), "no numeric loss column"),
        ([2.0, 1.0], "DataFrame"),
        ({}, "empty"),
        ({"train": [float("nan")]}, "no measured"),
    ],
)
def test_loss_curves_reject_bad_input(log, message):
    with pytest.raises(ValueError, match=message):
        plot_loss_curves(log)


# --- tokens kept by top-p against top-k ---------------------------------------------------------


def test_tokens_kept_draws_top_p_as_steps_and_top_k_as_a_flat_line():
    kept = torch.tensor([4, 1, 12, 3, 3, 7])
    fig, ax = plot_tokens_kept(kept, "ab c\nd", p=0.9, k=5, n_vocab=65)
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert set(lines) == {"top-p (p = 0.9)", "top-k (k = 5)", "no filter (all 65)"}
    top_p = lines["top-p (p = 0.9)"]
    np.testing.assert_array_equal(top_p.get_xdata(), np.arange(6))
    np.testing.assert_array_equal(top_p.get_ydata(), kept.numpy())
    assert top_p.get_drawstyle().startswith("steps"), "top-p is drawn as steps, one level per position"
    assert top_p.get_marker() not in (None, "None", "")
    flat = lines["top-k (k = 5)"]
    assert np.all(np.asarray(flat.get_ydata()) == 5), "top-k keeps the same count everywhere"
    assert flat.get_xdata()[0] <= 0 and flat.get_xdata()[-1] >= 5, "the top-k line spans every position"
    assert flat.get_linestyle() == "--"
    assert np.allclose(lines["no filter (all 65)"].get_ydata(), 65)
    assert not np.allclose(to_rgba(top_p.get_color()), to_rgba(flat.get_color()))
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "top-p (p = 0.9)" in legend and "top-k (k = 5)" in legend
    assert tick_texts(ax, "x") == ["0: a", "1: b", "2: ␣", "3: c", "4: ↵", "5: d"]
    assert "top-p" in ax.get_title() and "top-k" in ax.get_title()
    assert ax.get_xlabel() == "position: the token just read"
    assert "kept" in ax.get_ylabel()
    assert ax.get_ylim()[0] == 0 and ax.get_ylim()[1] > 65, "counts start at 0 and nothing is cut off"
    png_bytes(fig)


def test_tokens_kept_without_k_or_tokens_draws_only_top_p():
    fig, ax = plot_tokens_kept(np.array([2.0, 2.0, 9.0]), title="Nucleus size")
    assert [line.get_label() for line in ax.get_lines()] == ["top-p"]
    assert tick_texts(ax, "x") == ["0", "1", "2"]
    assert ax.get_xlabel() == "position" and ax.get_title() == "Nucleus size"


def test_tokens_kept_thins_out_ticks_on_a_long_text():
    text = "To be, or not to be, that is the question:\n" * 3
    fig, ax = plot_tokens_kept(torch.ones(len(text), dtype=torch.long), text, k=1)
    labels = tick_texts(ax, "x")
    assert 0 < len(labels) <= len(text) and labels[0] == "0: T"
    png_bytes(fig)


@pytest.mark.parametrize(
    "kept, kwargs, message",
    [
        (torch.ones(2, 3), {}, r"1-D.*\(2, 3\)"),
        ([], {}, "non-empty"),
        ([1, -2], {}, "counts"),
        ([1, float("nan")], {}, "counts"),
        ([1, 2], {"k": 0}, "k must be"),
        ([1, 2], {"p": 1.5}, r"p must lie in \(0, 1\]"),
        ([1, 2, 3], {"tokens": "ab"}, r"tokens has 2 entries but the \w+ axis has 3 positions"),
    ],
)
def test_tokens_kept_rejects_bad_input(kept, kwargs, message):
    with pytest.raises(ValueError, match=message):
        plot_tokens_kept(kept, **kwargs)


def test_bars_are_drawn_in_order_with_their_values(tmp_path):
    from helpers.plotting import plot_bars

    fig, ax = plot_bars(["aten::mm", "aten::softmax", "aten::add"], torch.tensor([3.5, 1.25, 0.5]), unit="ms per step",
                        title="Where the time goes")
    assert [round(p.get_width(), 2) for p in ax.patches] == [3.5, 1.25, 0.5]
    assert ax.patches[0].get_y() > ax.patches[-1].get_y()  # the first label on top
    assert [t.get_text() for t in ax.texts] == ["3.5", "1.2", "0.5"]
    assert ax.get_xlabel() == "ms per step" and ax.get_title() == "Where the time goes"
    fig.savefig(tmp_path / "bars.png")
    plt.close(fig)
    fig, own = plt.subplots()
    assert plot_bars(["a"], [1.0], ax=own)[1] is own
    plt.close(fig)
    with pytest.raises(ValueError, match="same length"):
        plot_bars(["a", "b"], [1.0])
    with pytest.raises(ValueError, match=">= 0"):
        plot_bars(["a"], [float("nan")])


# ---------------------------------------------------------------------------------------------
# lesson 09: curves, and the masks of a padded batch


def test_series_draws_one_line_per_label_with_a_marked_x():
    x = {"learned": torch.arange(4), "rope": torch.arange(8)}
    curves = {"learned": torch.tensor([3.0, 2.0, 1.8, 1.7]), "rope": torch.linspace(3, 1.5, 8)}
    fig, ax = plotting.plot_series(x, curves, xlabel="position", ylabel="loss", vline=4, vline_label="training length")
    lines = ax.get_lines()
    assert [line.get_label() for line in lines[:2]] == ["learned", "rope"]
    assert len(lines[0].get_xdata()) == 4 and len(lines[1].get_xdata()) == 8
    assert "training length" in [t.get_text() for t in ax.get_legend().get_texts()]
    assert png_bytes(fig)[:4] == b"\x89PNG"


def test_series_with_shared_x_and_bad_input():
    fig, ax = plotting.plot_series([16, 32, 64], {"cached": [90.0, 88.0, 85.0], "uncached": [80.0, 40.0, 20.0]}, logy=True)
    assert ax.get_yscale() == "log" and len(ax.get_lines()) == 2
    with pytest.raises(ValueError, match="non-empty mapping"):
        plotting.plot_series([1], {})
    with pytest.raises(ValueError, match="2 values for 3 x values"):
        plotting.plot_series([1, 2, 3], {"a": [1.0, 2.0]})


def test_batch_mask_draws_one_panel_per_row_and_labels_padding():
    real = torch.tensor([[False, True, True], [True, True, True]])
    causal = torch.ones(3, 3, dtype=torch.bool).tril()
    mask = causal & (real.unsqueeze(1) | torch.eye(3, dtype=torch.bool))  # (B, T, T)
    fig, axes = plotting.plot_batch_mask(mask.unsqueeze(1), real, suptitle="padded")
    assert len(axes) == 2
    assert tick_texts(axes[0], "x")[0] == "pad" and tick_texts(axes[1], "x")[0] == "0"
    assert "2 real tokens" in axes[0].get_title()
    assert png_bytes(fig)[:4] == b"\x89PNG"
    with pytest.raises(ValueError, match="real must have shape"):
        plotting.plot_batch_mask(mask, real[:, :2])
    with pytest.raises(ValueError, match="mask must have shape"):
        plotting.plot_batch_mask(torch.ones(3, 3, dtype=torch.bool))


# --- readable in a notebook column ----------------------------------------------------------------


def test_a_grid_of_many_heads_fits_a_notebook_column_with_labels_at_their_minimum_size():
    """Lesson 08's 4 layers x 4 heads on 32 characters was 2004 x 2070 px: shown in a column of
    960 px its labels were a few pixels high. Now the figure is never wider than the column and its
    tick labels never smaller than MIN_GRID_LABEL_PT (thinned out instead)."""
    from helpers.plotting._style import MIN_GRID_LABEL_PT

    T = 32
    weights = torch.softmax(torch.randn(4, 4, T, T), dim=-1)
    for fig, axes in (plot_attention_grid(weights, "x" * T), plot_attention_grid(weights[0], "x" * T, ncols=2)):
        assert fig.get_figwidth() <= plotting.COLUMN_WIDTH_IN + 1e-9
        for ax in axes.flat:
            sizes = [t.get_fontsize() for t in ax.get_xticklabels() + ax.get_yticklabels() if t.get_text()]
            assert all(size >= MIN_GRID_LABEL_PT for size in sizes), sizes


def test_one_layer_in_two_columns_labels_every_character():
    """What lesson 08 draws per layer: four heads, two by two, every position labelled."""
    T = 32
    fig, axes = plot_attention_grid(torch.softmax(torch.randn(4, T, T), dim=-1), "abcdefgh" * 4, ncols=2)
    assert axes.shape == (2, 2)
    assert len([t for t in tick_texts(axes[1, 0], "x") if t]) == T
    assert len([t for t in tick_texts(axes[0, 0], "y") if t]) == T
    assert fig.get_figwidth() * fig.dpi <= 960 + 1e-6


def test_head_scores_tick_every_layer_and_head_at_an_integer():
    scores = torch.rand(2, 4, generator=torch.Generator().manual_seed(0))
    fig, ax = plotting.plot_head_scores(scores, title="Induction scores")
    assert list(ax.get_xticks()) == [0, 1, 2, 3] and list(ax.get_yticks()) == [0, 1]
    assert tick_texts(ax, "x") == ["0", "1", "2", "3"] and tick_texts(ax, "y") == ["0", "1"]
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("head", "layer")
    assert len(ax.texts) == 8, "every score written in its cell"
    np.testing.assert_allclose(np.asarray(ax.images[0].get_array()), scores.numpy())
    big, big_ax = plotting.plot_head_scores(torch.rand(12, 12))
    assert all(float(t).is_integer() for t in big_ax.get_xticks()), "no half-integer ticks"
    assert len(big_ax.get_xticks()) == 12 and big.get_figwidth() <= plotting.COLUMN_WIDTH_IN
    assert png_bytes(big)[:8] == PNG_SIGNATURE
    with pytest.raises(ValueError, match="finite"):
        plotting.plot_head_scores(torch.tensor([[0.5, float("nan")]]))


def test_a_table_shows_html_and_prints_its_frame_never_an_object_repr():
    frame = pd.DataFrame({"setting": ["greedy", "top-k"], "share": [0.25, 0.5]})
    styler = frame.style.format({"share": "{:.0%}"})
    assert " at 0x" in repr(styler), "what a bare Styler prints where only text shows"
    table = plotting.Table(styler)
    assert " at 0x" not in repr(table) and "greedy" in repr(table) and "top-k" in repr(table)
    assert "50%" in table._repr_html_() and "<table" in table._repr_html_()
    with pytest.raises(TypeError, match="Styler"):
        plotting.Table(frame)


def test_the_pictures_of_lessons_08_to_10_fit_a_notebook_column():
    """Each no wider than COLUMN_WIDTH_IN at the sizes the lessons draw them (they were 13.9 in:
    the tokens kept on a 42-character line; 9.9 in: three prompts' masks; 9.9 in: the KV cache)."""
    from helpers.diagrams import draw_kv_cache, draw_rotation

    line = "Made glorious summer by this sun of York;\n"
    real = torch.tensor([[True] * 5, [False] * 3 + [True] * 2, [False] + [True] * 4])
    mask = torch.ones(5, 5, dtype=torch.bool).tril() & (real.unsqueeze(1) | torch.eye(5, dtype=torch.bool))
    drawn = {
        "tokens kept": plot_tokens_kept(torch.randint(1, 20, (len(line),)), line, p=0.9, k=6, n_vocab=65),
        "batch mask": plotting.plot_batch_mask(mask.unsqueeze(1), real),
        "a long line's weights": plot_attention_weights(torch.full((30, 30), 1 / 30), "x" * 30),
        "KV cache": draw_kv_cache(T_prompt=5, n_steps=4),
        "RoPE pair": draw_rotation(0.35, 2, 5, 4),
    }
    for name, (fig, _) in drawn.items():
        assert fig.get_figwidth() <= plotting.COLUMN_WIDTH_IN + 1e-9, f"{name}: {fig.get_figwidth():.1f} in"
