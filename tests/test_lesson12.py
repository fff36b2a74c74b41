"""Lesson 12: every catalogued mistake loses exactly its exercise's points and is named; correct
answers written differently get full marks; the checks' known-good LoRA layer (``lora_known``,
used while the lesson's reference is hidden) is the reference's; the tasks' data and pictures."""

import copy

import pytest
import torch
from harness import CatalogueTests, catalogue

from helpers.checks.lora_known import LoRALinear as KnownGood
from helpers.checks.lora_known import small_lm, wrap_known_good
from helpers.data import CharVocab
from helpers.diagrams import draw_lora
from helpers.plotting import confusion_counts, plot_confusion
from helpers.reference import fine_tuning as ref
from helpers.tasks import docstring_text, speaker_dataset, speeches

A = "12-fine-tuning"


class TestCatalogue(CatalogueTests):
    catalogue = catalogue(A)


def test_known_good_lora_is_the_reference():
    base = torch.nn.Linear(7, 5)
    torch.manual_seed(3)
    ours = KnownGood(copy.deepcopy(base), 3, 6.0)
    torch.manual_seed(3)
    theirs = ref.LoRALinear(copy.deepcopy(base), 3, 6.0)
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in theirs.named_parameters()]
    assert all(torch.equal(a, b) for a, b in zip(ours.parameters(), theirs.parameters(), strict=True))
    with torch.no_grad():
        for m in (ours, theirs):
            m.lora_B.copy_(torch.randn(5, 3, generator=torch.Generator().manual_seed(1)))
    x = torch.randn(4, 7)
    assert torch.allclose(ours(x), theirs(x), atol=1e-6)


@pytest.mark.parametrize("targets", [("query", "value"), ("to_output",), ("query", "key", "value", "to_output")])
def test_add_then_merge_gives_the_adapted_logits_and_the_plain_names(targets):
    model = small_lm(5, V=11, C=12, nh=2, hs=4, L=2, H=20, max_len=8).double()
    plain_names = [n for n, _ in model.named_parameters()]
    wrapped = ref.add_lora(model, targets, 2, 4.0)
    assert all(n.rpartition(".")[2] in targets for n in wrapped) and len(wrapped) == 2 * len(targets)
    assert {n for n, p in model.named_parameters() if p.requires_grad} == {f"{n}.lora_{m}" for n in wrapped for m in "AB"}
    with torch.no_grad():
        for name in wrapped:
            model.get_submodule(name).lora_B.normal_()
    ids = torch.randint(11, (3, 8))
    with torch.no_grad():
        adapted = model(ids)
        merged = ref.merge_lora(model)(ids)
    assert [n for n, _ in model.named_parameters()] == plain_names
    assert torch.allclose(adapted, merged, atol=1e-12)


def test_wrap_known_good_changes_the_output():
    model = small_lm(6, V=9, C=8, nh=2, hs=3, L=1, H=12, max_len=5).double()
    ids = torch.randint(9, (2, 5))
    with torch.no_grad():
        before = model(ids)
        after = wrap_known_good(model, ["layers.0.attention.query"], 2, 3.0, seed=1)(ids)
    assert not torch.allclose(before, after)


def test_docstring_text_reads_a_folder_and_keeps_the_vocabulary(tmp_path):
    (tmp_path / "a.py").write_text('"""Module doc (1)."""\n\ndef f():\n    """Return x_y."""\n', encoding="utf-8")
    (tmp_path / "broken.py").write_text("def (:\n", encoding="utf-8")
    assert docstring_text(folder=tmp_path) == "Module doc (1).\n\nReturn x_y.\n"
    vocab = CharVocab.from_text("Module doc.Returnxy \n")
    assert docstring_text(vocab, folder=tmp_path) == "Module doc    .\n\nReturn x y.\n"


def test_speaker_dataset_labels_pads_and_holds_out_whole_speeches():
    text = "A:\nhello there\n\nB:\nhi\n\nA:\nthe longest speech of all\n\nC:\nbye\n\nA:\nagain\n\nB:\nyes"
    assert speeches(text)[0] == ("A", "hello there")
    vocab = CharVocab.from_text(text)
    data = speaker_dataset(text, vocab, n_speakers=2, window=8, val_fraction=0.34, pad_id=0)
    assert data.names == ["A", "B"]
    assert data.train_ids.shape[1] == 8 and int(data.train_lengths.max()) <= 8 and int(data.train_lengths.min()) >= 1
    for ids, lengths in ((data.train_ids, data.train_lengths), (data.val_ids, data.val_lengths)):
        for row, n in zip(ids, lengths, strict=True):
            assert bool((row[int(n):] == 0).all())
    # the longest speech is cut into windows that stay on one side
    total = len(data.train_labels) + len(data.val_labels)
    assert total == sum(-(-len(s) // 8) for name, s in speeches(text) if name in ("A", "B"))


def test_confusion_counts_and_plot_are_pure():
    import matplotlib.pyplot as plt

    counts = confusion_counts(torch.tensor([0, 1, 1, 2]), torch.tensor([0, 2, 1, 2]), 3)
    assert counts.tolist() == [[1, 0, 0], [0, 1, 1], [0, 0, 1]]
    fig, ax = plot_confusion(torch.tensor([0, 1]), torch.tensor([1, 1]), ["x", "y"])
    assert "x" in [t.get_text() for t in ax.get_yticklabels()]
    plt.close(fig)
    with pytest.raises(ValueError):
        confusion_counts([0, 3], [0, 0], 3)


def test_draw_lora_counts_the_parameters():
    import matplotlib.pyplot as plt

    fig, ax = draw_lora(128, 64, 8, 16)
    texts = " ".join(t.get_text() for t in ax.texts)
    assert "8,192 parameters" in texts and "(8, 128): 1,024" in texts and "(64, 8): 512" in texts
    assert "1,536 trainable" in ax.get_title()
    plt.close(fig)


def test_course_model_trains_saves_then_loads(tmp_path, monkeypatch):
    from helpers.data import shakespeare_dataset
    from helpers.training import course_model

    monkeypatch.setenv("TRANSFORMER_COURSE_CHECKPOINT", str(tmp_path / "model.pt"))
    data = shakespeare_dataset()
    said = []
    first, config, vocab, _ = course_model(data, fallback_steps=2, eval_batches=1, saved_by="a test", report=said.append)
    assert "Training the same model here" in said[0] and (tmp_path / "model.pt").exists() and vocab == data.vocab
    again, _, _, _ = course_model(data, eval_batches=1, report=said.append)
    assert said[-1].startswith("loaded the trained model")
    assert all(torch.equal(a, b) for a, b in zip(first.state_dict().values(), again.state_dict().values(), strict=True))
    unsaved = tmp_path / "other.pt"
    monkeypatch.setenv("TRANSFORMER_COURSE_CHECKPOINT", str(unsaved))
    course_model(data, fallback_steps=1, eval_batches=1, save=False, report=said.append)
    assert not unsaved.exists() and "not saved" in said[-1]


def test_the_quick_settings_limits_keep_a_mix(tmp_path):
    for i in range(3):
        (tmp_path / f"m{i}.py").write_text(f'"""Doc {i}."""\n', encoding="utf-8")
    assert docstring_text(folder=tmp_path, max_files=2) == "Doc 0.\n\nDoc 1.\n"
    text = "\n\n".join(f"{name}:\n{'x' * (5 + i)}" for i in range(12) for name in ("A", "B"))
    data = speaker_dataset(text, CharVocab.from_text(text), n_speakers=2, window=4, max_windows=5)
    assert len(data.train_labels) == 5 and set(data.train_labels.tolist()) == {0, 1}
