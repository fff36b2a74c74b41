"""helpers.training: the loop learns, evaluation is clean, runs repeat, checkpoints round-trip."""

import math
import pickle

import pandas as pd
import pytest
import torch

from helpers.data import CORPORA, TINY_SHAKESPEARE_SHA256, CharVocab, get_batch
from helpers.reference.transformer_lm import Config, TransformerLM
from helpers.training import (
    LOG_COLUMNS,
    CheckpointError,
    LiveLossPlot,
    TrainConfig,
    checkpoint_name,
    configure_optimizer,
    course_checkpoint_path,
    estimate_loss,
    learning_rate,
    load_checkpoint,
    load_training_state,
    read_checkpoint,
    save_checkpoint,
    seed_everything,
    train,
)

TEXT = "to be or not to be, that is the question. " * 60


@pytest.fixture(scope="module")
def tiny():
    vocab = CharVocab.from_text(TEXT)
    ids = vocab.encode(TEXT)
    split = int(0.9 * len(ids))
    config = Config(n_vocab=len(vocab), max_len=16, emb_dim=24, n_hidden=48, head_dim=8, n_heads=3, n_layers=1)
    return vocab, (ids[:split], ids[split:]), config


def quick(**overrides):
    settings = dict(steps=40, batch_size=8, block_size=16, lr=1e-2, min_lr=1e-3, warmup_steps=5,
                    eval_every=20, eval_batches=4, log_every=5, progress=False)
    return TrainConfig(**{**settings, **overrides})


def test_loss_decreases_on_a_tiny_text(tiny):
    vocab, data, config = tiny
    seed_everything(0)
    model = TransformerLM(config)
    log = train(model, data, quick())
    assert list(log.columns) == list(LOG_COLUMNS)
    evals = log.val_loss.dropna()
    assert list(log.step[log.val_loss.notna()]) == [0, 20, 40]
    assert evals.iloc[0] == pytest.approx(math.log(len(vocab)), abs=0.3)  # untrained: about uniform
    assert evals.iloc[-1] < evals.iloc[0] - 1.0
    assert log.train_loss.iloc[0] == pytest.approx(math.log(len(vocab)), abs=0.3)  # measured before training
    assert log.train_loss.iloc[-1] < log.train_loss.iloc[0] - 1.0
    assert (log.tokens_per_s.dropna() > 0).all() and log.elapsed_s.is_monotonic_increasing
    assert log.attrs["config"]["steps"] == 40 and log.attrs["train_s"] > 0


def test_same_seed_same_run(tiny):
    _, data, config = tiny
    runs = []
    for _ in range(2):
        seed_everything(3)
        model = TransformerLM(config)
        log = train(model, data, quick(steps=12, eval_every=6))
        runs.append((log, model.state_dict()))
    (log_a, state_a), (log_b, state_b) = runs
    pd.testing.assert_series_equal(log_a.train_loss, log_b.train_loss)
    pd.testing.assert_series_equal(log_a.val_loss, log_b.val_loss)
    assert all(torch.equal(state_a[k], state_b[k]) for k in state_a)


def test_a_custom_step_and_callback_are_used(tiny):
    _, data, config = tiny
    calls, frames = [], []

    def step(model, optimizer, x, y, grad_clip=None):
        calls.append((tuple(x.shape), grad_clip, optimizer.param_groups[0]["lr"]))
        return 1.5

    train(TransformerLM(config), data, quick(steps=10, eval_every=5, grad_clip=0.5), step_fn=step, callback=frames.append)
    assert len(calls) == 10 and calls[0][:2] == ((8, 16), 0.5)
    assert calls[0][2] == pytest.approx(1e-2 / 5)  # warm-up starts at lr / warmup_steps
    assert [len(f) for f in frames] == [1, 2, 3]  # after the evaluations at steps 0, 5 and 10
    assert frames[-1].train_loss.iloc[1:].eq(1.5).all()  # row 0: the untrained model, measured


def test_a_callback_with_every_row_is_called_after_every_row(tiny):
    _, data, config = tiny

    class Rows(list):
        every_row = True

        def __call__(self, log):
            self.append(len(log))

    rows = Rows()
    train(TransformerLM(config), data, quick(steps=20, eval_every=10, log_every=5), callback=rows)
    assert rows == [1, 2, 3, 4, 5]  # step 0, then every 5 steps, evaluations (10, 20) called once


def test_the_live_plot_draws_the_training_loss_between_evaluations(tiny, monkeypatch):
    import IPython.display

    shown = []

    class Handle:
        def update(self, figure):
            shown.append(figure)

    def display(figure, display_id=None):
        shown.append(figure)
        return Handle()

    monkeypatch.setattr(IPython.display, "display", display)
    _, data, config = tiny
    live = LiveLossPlot()
    train(TransformerLM(config), data, quick(steps=20, eval_every=10, log_every=5), callback=live)
    assert len(shown) >= 3  # at least at every evaluation (steps 0, 10 and 20), the last one included
    ax = live.figure.axes[0]
    assert ax.get_xlim() == (0, 20)  # the whole run, from the first drawing on
    curves = {line.get_label(): line.get_xdata() for line in ax.get_lines()}
    assert list(curves["train_loss"]) == [0, 5, 10, 15, 20] and list(curves["val_loss"]) == [0, 10, 20]


def test_a_step_that_returns_a_tensor_is_refused(tiny):
    _, data, config = tiny

    def step(model, optimizer, x, y, grad_clip=None):
        return torch.tensor(1.0, requires_grad=True)

    with pytest.raises(TypeError, match=r"loss\.item\(\)"):
        train(TransformerLM(config), data, quick(steps=2), step_fn=step)


def test_learning_rate_schedule():
    cfg = TrainConfig(steps=1000, lr=1e-3, min_lr=1e-4, warmup_steps=100)
    assert learning_rate(0, cfg) == pytest.approx(1e-5)
    assert learning_rate(99, cfg) == pytest.approx(1e-3)
    assert learning_rate(100, cfg) == pytest.approx(1e-3)
    assert learning_rate(999, cfg) == pytest.approx(1e-4)
    rates = [learning_rate(s, cfg) for s in range(100, 1000)]
    assert all(a >= b for a, b in zip(rates, rates[1:], strict=False))
    flat = TrainConfig(steps=10, lr=3e-3, warmup_steps=0, cosine=False)
    assert {learning_rate(s, flat) for s in range(10)} == {3e-3}


def test_schedule_and_batches_are_the_lesson_07_reference():
    """One source of truth: helpers use the reference generated from lesson 07's exercises."""
    from helpers.reference import training_step as reference

    for cfg in (TrainConfig(steps=50, warmup_steps=7), TrainConfig(steps=9, warmup_steps=8, cosine=True),
                TrainConfig(steps=12, warmup_steps=3, cosine=False)):
        assert [learning_rate(s, cfg) for s in range(cfg.steps + 3)] == [
            reference.learning_rate(s, cfg) for s in range(cfg.steps + 3)]
    ids = torch.arange(100) * 3
    ours = get_batch(ids, 4, 9, generator=torch.Generator().manual_seed(5))
    theirs = reference.get_batch(ids, 4, 9, generator=torch.Generator().manual_seed(5))
    assert all(torch.equal(a, b) for a, b in zip(ours, theirs, strict=True))


def test_a_custom_schedule_and_batch_function_are_used(tiny):
    _, data, config = tiny
    steps, cut_from = [], set()

    def lr_fn(step, cfg):
        steps.append(step)
        return 2e-3

    def batch_fn(ids, batch_size, block_size, generator=None):
        cut_from.add(len(ids))
        return get_batch(ids, batch_size, block_size, generator=generator)

    log = train(TransformerLM(config), data, quick(steps=6, eval_every=3), lr_fn=lr_fn, batch_fn=batch_fn)
    assert steps[-6:] == list(range(6)) and (log.lr == 2e-3).all()
    assert cut_from == {len(data[0]), len(data[1])}  # training and validation batches


def test_estimate_loss_uses_the_batch_function(tiny):
    _, (_, val_ids), config = tiny
    model = TransformerLM(config)
    calls = []

    def batch_fn(ids, batch_size, block_size, generator=None):
        calls.append((batch_size, block_size))
        return get_batch(ids, batch_size, block_size, generator=generator)

    a = estimate_loss(model, val_ids, batch_size=3, block_size=8, n_batches=2, batch_fn=batch_fn)
    assert calls == [(3, 8), (3, 8)]
    assert a == estimate_loss(model, val_ids, batch_size=3, block_size=8, n_batches=2)


def test_weight_decay_on_the_linear_weights_only_and_tied_weights_once(tiny):
    """Lesson 07's rule: decayed exactly when a parameter is an nn.Linear's weight that no
    nn.Embedding holds; a tied table is a table. The lesson's groups_fn replaces the reference's."""
    _, _, config = tiny
    model = TransformerLM(config)
    decay, no_decay = configure_optimizer(model, lr=1e-3, weight_decay=0.1).param_groups
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    names = {id(p): n for n, p in model.named_parameters()}
    decayed = {names[id(p)] for p in decay["params"]}
    assert decayed == {n for n, p in model.named_parameters() if p.dim() == 2 and "embedding" not in n}
    assert "word_to_embedding.weight" not in decayed  # tied to lm_head, a Linear: still a table
    ids = [id(p) for g in (decay, no_decay) for p in g["params"]]
    assert len(ids) == len(set(ids)) == len(list(model.parameters()))
    everything = configure_optimizer(model, lr=1e-3, groups_fn=lambda m, wd: [{"params": list(m.parameters()),
                                                                                "weight_decay": wd}])
    assert len(everything.param_groups) == 1 and everything.param_groups[0]["weight_decay"] == 0.1


def test_estimate_loss_is_clean(tiny):
    _, (train_ids, val_ids), config = tiny
    model = TransformerLM(config).train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    a = estimate_loss(model, val_ids, batch_size=4, block_size=16, n_batches=3)
    b = estimate_loss(model, val_ids, batch_size=4, block_size=16, n_batches=3)
    assert a == b and model.training  # the same batches; the mode is restored
    assert all(p.grad is None for p in model.parameters())
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


# --------------------------------------------------------------------------------------------
# Checkpoints


def test_checkpoint_round_trip_gives_identical_logits(tiny, tmp_path):
    vocab, data, config = tiny
    seed_everything(1)
    model = TransformerLM(config)
    train(model, data, quick(steps=5, eval_every=0))
    path = save_checkpoint(tmp_path / "sub" / "model.pt", model, config, vocab, extra={"val_loss": 1.25, "note": [1, "a"]})
    loaded, loaded_config, loaded_vocab = load_checkpoint(path)
    x = data[1][:16].unsqueeze(0)  # (1, T)
    with torch.no_grad():
        assert torch.equal(model.eval()(x), loaded(x))
    assert loaded_config == config and loaded_vocab == vocab and not loaded.training
    assert read_checkpoint(path)["extra"] == {"val_loss": 1.25, "note": [1, "a"]}
    assert [p.name for p in tmp_path.joinpath("sub").iterdir()] == ["model.pt"]  # nothing left behind


def test_the_same_model_gives_the_same_bytes(tiny, tmp_path):
    vocab, _, config = tiny
    model = TransformerLM(config)
    first = save_checkpoint(tmp_path / "a" / "m.pt", model, config, vocab, extra={"x": 1}).read_bytes()
    second = save_checkpoint(tmp_path / "b" / "m.pt", model, config, vocab, extra={"x": 1}).read_bytes()
    assert first == second


def test_tied_weights_stay_tied_and_untied_stay_untied(tiny, tmp_path):
    vocab, _, config = tiny
    tied = load_checkpoint(save_checkpoint(tmp_path / "tied.pt", TransformerLM(config), config, vocab))[0]
    assert tied.lm_head.weight is tied.word_to_embedding.weight
    with torch.no_grad():
        tied.word_to_embedding.weight[0, 0] = 7.0
    assert tied.lm_head.weight[0, 0] == 7.0
    untied_config = Config(**{**config.__dict__, "tie_weights": False})
    untied_model = TransformerLM(untied_config)
    untied = load_checkpoint(save_checkpoint(tmp_path / "untied.pt", untied_model, untied_config, vocab))[0]
    assert untied.lm_head.weight is not untied.word_to_embedding.weight
    assert torch.equal(untied.lm_head.weight, untied_model.lm_head.weight)


class Opaque:
    pass


def test_bad_checkpoints_give_clear_errors(tiny, tmp_path):
    vocab, _, config = tiny
    model = TransformerLM(config)
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        load_checkpoint(tmp_path / "missing.pt")
    garbage = tmp_path / "garbage.pt"
    garbage.write_bytes(b"not a checkpoint at all")
    with pytest.raises(CheckpointError, match="could not be read"):
        load_checkpoint(garbage)
    other = tmp_path / "other.pt"
    torch.save({"weights": torch.zeros(3)}, other)
    with pytest.raises(CheckpointError, match="not a checkpoint of this course"):
        load_checkpoint(other)
    pickled = tmp_path / "pickled.pt"
    pickled.write_bytes(pickle.dumps({"format": Opaque()}, protocol=2))
    with pytest.raises(CheckpointError):
        load_checkpoint(pickled)

    good = save_checkpoint(tmp_path / "good.pt", model, config, vocab)
    payload = torch.load(good, weights_only=True)
    del payload["state_dict"]["final_norm.weight"]
    torch.save(payload, tmp_path / "incomplete.pt")
    with pytest.raises(CheckpointError, match="final_norm.weight"):
        load_checkpoint(tmp_path / "incomplete.pt")
    payload = torch.load(good, weights_only=True)
    payload["config"]["sliding_window"] = 16
    torch.save(payload, tmp_path / "newer.pt")
    with pytest.raises(CheckpointError, match="sliding_window"):
        load_checkpoint(tmp_path / "newer.pt")
    with pytest.raises(TypeError, match=r"extra\['when'\]"):
        save_checkpoint(tmp_path / "bad.pt", model, config, vocab, extra={"when": Opaque()})


def test_each_text_has_its_own_checkpoint_file(tmp_path, monkeypatch):
    """Both texts have 65 characters: a model of one would load for the other and read every id as
    the wrong character. The cache keeps one file per text; an explicit path is taken as it is."""
    names = {corpus.name: checkpoint_name(corpus.name) for corpus in CORPORA.values()}
    assert names[CORPORA[TINY_SHAKESPEARE_SHA256].name] == "shakespeare-char.pt"
    assert len(set(names.values())) == len(CORPORA), names
    assert checkpoint_name("an unchecked text") not in names.values()

    monkeypatch.delenv("TRANSFORMER_COURSE_CHECKPOINT", raising=False)
    monkeypatch.delenv("TRANSFORMER_COURSE_DATA", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    folder = tmp_path / "transformer-course"
    for corpus in CORPORA.values():
        assert course_checkpoint_path(corpus.name) == folder / checkpoint_name(corpus.name)
    assert course_checkpoint_path() == folder / "shakespeare-char.pt"  # no text yet: Tiny Shakespeare's

    plays = next(c for c in CORPORA.values() if c.sha256 != TINY_SHAKESPEARE_SHA256)
    text_file = tmp_path / "plays-elsewhere.txt"
    text_file.write_text("not the plays")
    monkeypatch.setenv("TRANSFORMER_COURSE_DATA", str(text_file))
    assert course_checkpoint_path() == folder / "shakespeare-char.pt"  # a file that fails its check: no text
    monkeypatch.setattr("helpers.training.corpus_name", lambda path: plays.name)
    monkeypatch.setattr("helpers.training.tiny_shakespeare_path", lambda **kwargs: text_file)
    assert course_checkpoint_path() == folder / checkpoint_name(plays.name)  # the text read now decides

    monkeypatch.setenv("TRANSFORMER_COURSE_CHECKPOINT", str(tmp_path / "mine.pt"))
    assert course_checkpoint_path(plays.name) == tmp_path / "mine.pt"


def _resumable_run(config, data, seed):
    """A model, its AdamW and the batches' generator, built from ``seed``; and a function that
    trains them for given step numbers of a short schedule (the lesson's section 8, in small)."""
    settings = quick(steps=12, warmup_steps=3)
    seed_everything(seed)
    model = TransformerLM(config)
    optimizer = configure_optimizer(model, settings.lr)
    generator = torch.Generator().manual_seed(seed)

    def go_on(steps):
        for step in steps:
            for group in optimizer.param_groups:
                group["lr"] = learning_rate(step, settings)
            x, y = get_batch(data[0], 4, 16, generator=generator)
            model.train()
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten()).backward()
            optimizer.step()

    return model, optimizer, generator, go_on


@pytest.mark.parametrize("dropped", [None, "optimizer", "generator"])
def test_resuming_continues_exactly_and_the_comparison_can_fail(tiny, tmp_path, dropped):
    """The lesson's section 8: a run stopped after 6 steps, saved with its optimizer state, step and
    generator, and resumed into objects built from another seed ends with the weights of the run that
    never stopped, bit for bit. Leave out the optimizer state or the generator's and the same
    comparison fails: it can tell."""
    vocab, data, config = tiny
    straight, *_, straight_go_on = _resumable_run(config, data, 0)
    straight_go_on(range(12))
    model, optimizer, generator, go_on = _resumable_run(config, data, 0)
    go_on(range(6))
    path = save_checkpoint(tmp_path / "resume.pt", model, config, vocab, optimizer=optimizer, step=6, generator=generator)
    model, optimizer, generator, go_on = _resumable_run(config, data, 1)
    step = load_training_state(path, model, None if dropped == "optimizer" else optimizer,
                               None if dropped == "generator" else generator)
    assert step == 6
    go_on(range(step, 12))
    same = all(torch.equal(a, b) for a, b in zip(straight.state_dict().values(), model.state_dict().values(), strict=True))
    assert same == (dropped is None)


def test_old_checkpoints_still_load_and_say_they_cannot_resume(tiny, tmp_path):
    """Lessons 08 to 10 load the checkpoint lesson 07 left in the cache, perhaps written before the
    training state was kept (version 1: no optimizer, step or generator)."""
    vocab, _, config = tiny
    model = TransformerLM(config)
    payload = torch.load(save_checkpoint(tmp_path / "new.pt", model, config, vocab, extra={"steps": 5}), weights_only=True)
    assert payload["version"] == 2 and payload["optimizer"] is None and payload["step"] is None
    old = {k: v for k, v in payload.items() if k not in ("optimizer", "step", "generator")}
    old["version"] = 1
    torch.save(old, tmp_path / "old.pt")
    loaded, loaded_config, loaded_vocab = load_checkpoint(tmp_path / "old.pt")
    assert loaded_config == config and loaded_vocab == vocab
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), loaded.state_dict().values(), strict=True))
    assert read_checkpoint(tmp_path / "old.pt")["extra"] == {"steps": 5}
    assert load_training_state(tmp_path / "old.pt", TransformerLM(config)) is None  # the weights alone: fine
    with pytest.raises(CheckpointError, match="holds no optimizer state"):
        load_training_state(tmp_path / "old.pt", loaded, configure_optimizer(loaded, lr=1e-3))
    old["version"] = 3
    torch.save(old, tmp_path / "future.pt")
    with pytest.raises(CheckpointError, match="version 3"):
        load_checkpoint(tmp_path / "future.pt")
