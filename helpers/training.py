"""Training a language model: optimiser, schedule, evaluation, the loop, checkpoints.

Lesson 07 builds one training step by hand (``train_step``); everything around it lives here::

    from helpers.data import shakespeare_dataset
    from helpers.reference.transformer_lm import Config, TransformerLM
    from helpers.training import TrainConfig, train

    data = shakespeare_dataset()
    model = TransformerLM(Config(n_vocab=len(data.vocab), max_len=64, emb_dim=128, ...))
    log = train(model, data, TrainConfig(steps=2000))   # a pandas DataFrame, one row per log step

One source of truth: the step itself is the course's reference ``train_step``, generated from
lesson 07's solution notebook into ``helpers.reference.training_step``. Pass ``step_fn=`` to train
with another one (the lesson passes the student's own).

Shape legend: ``B`` batch size, ``T`` block size (time), ``V`` vocabulary size.
"""

from __future__ import annotations

import dataclasses
import math
import os
import random
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
import torch.nn as nn
import torch.nn.functional as F
from tqdm.auto import tqdm

from helpers.data import (
    CORPORA,
    TINY_SHAKESPEARE_SHA256,
    CharDataset,
    CharVocab,
    DataUnavailableError,
    corpus_name,
    default_cache_dir,
    get_batch,
    tiny_shakespeare_path,
)

__all__ = [
    "CHECKPOINT_FORMAT",
    "LOG_COLUMNS",
    "CheckpointError",
    "LiveLossPlot",
    "TrainConfig",
    "CHECKPOINT_ENV_VAR",
    "checkpoint_name",
    "configure_optimizer",
    "course_checkpoint_path",
    "estimate_loss",
    "learning_rate",
    "load_checkpoint",
    "load_training_state",
    "read_checkpoint",
    "save_checkpoint",
    "seed_everything",
    "train",
]

#: the columns of the log that ``train`` returns, in this order
LOG_COLUMNS = ("step", "train_loss", "val_loss", "lr", "tokens_per_s", "elapsed_s")
#: what ``save_checkpoint`` writes in its ``format`` field, and the version it writes
CHECKPOINT_FORMAT = "transformer-course/checkpoint"
CHECKPOINT_VERSION = 2
#: the versions ``read_checkpoint`` reads: version 1 (weights, config, vocabulary, extra) is version 2
#: without the training state (the optimizer's, the step, the batches' generator)
READABLE_VERSIONS = (1, 2)
#: the seed of the validation batches: every evaluation of a run sees the same windows
EVAL_SEED = 1234


# --------------------------------------------------------------------------------------------
# Seeding
# --------------------------------------------------------------------------------------------


def seed_everything(seed: int) -> torch.Generator:
    """Seed Python's, NumPy's and PyTorch's global generators; return a fresh seeded generator.

    The returned ``torch.Generator`` is meant for the batches, so that sampling batches does not
    depend on how many random numbers the model's initialisation happened to draw.
    """
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"seed must be an int, got {seed!r}")
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    return torch.Generator().manual_seed(seed)


# --------------------------------------------------------------------------------------------
# Configuration, optimiser and learning-rate schedule
# --------------------------------------------------------------------------------------------


@dataclass
class TrainConfig:
    """How to train. The defaults are nanoGPT's small character-level run on a CPU."""

    steps: int = 2000  # optimiser updates
    batch_size: int = 12  # B: windows per batch
    block_size: int = 64  # T: characters per window (at most the model's max_len)
    lr: float = 1e-3  # the peak learning rate
    min_lr: float = 1e-4  # where the cosine decay ends
    warmup_steps: int = 100  # linear warm-up from lr / warmup_steps to lr
    cosine: bool = True  # decay from lr to min_lr over the steps after warm-up; False: constant
    weight_decay: float = 0.1  # AdamW's decay, applied to matrices only
    betas: tuple[float, float] = (0.9, 0.99)
    grad_clip: float | None = 1.0  # clip the global gradient norm to this; None: no clipping
    eval_every: int = 250  # evaluate every this many steps (and at the end); 0: only at the end
    eval_batches: int = 200  # validation batches per evaluation
    eval_at_start: bool = True  # also evaluate the untrained model (step 0)
    log_every: int = 10  # a row of the log every this many steps
    seed: int = 0  # seeds the training batches
    progress: bool = True  # show a tqdm progress bar

    def __post_init__(self):
        for name in ("steps", "batch_size", "block_size", "eval_batches", "log_every"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"TrainConfig.{name} must be a positive int, got {value!r}")
        for name in ("warmup_steps", "eval_every"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"TrainConfig.{name} must be an int >= 0, got {value!r}")
        if not self.lr > 0 or not 0 <= self.min_lr <= self.lr:
            raise ValueError(f"need lr > 0 and 0 <= min_lr <= lr, got lr={self.lr}, min_lr={self.min_lr}")
        if self.grad_clip is not None and not self.grad_clip > 0:
            raise ValueError(f"TrainConfig.grad_clip must be positive or None, got {self.grad_clip!r}")
        self.betas = tuple(self.betas)


def learning_rate(step: int, config: TrainConfig) -> float:
    """The learning rate of update ``step`` (0-based): linear warm-up, then a cosine decay.

    Warm-up: ``lr * (step + 1) / warmup_steps`` for the first ``warmup_steps`` updates. Then,
    with ``cosine``, half a cosine wave from ``lr`` at ``warmup_steps`` down to ``min_lr`` at the
    last update (``steps - 1``) and after it; without, ``lr`` throughout.

    One source of truth: this is lesson 07's ``learning_rate`` exercise, as the course's reference
    (generated from the solution into ``helpers.reference.training_step``).
    """
    from helpers.reference.training_step import learning_rate as reference

    return reference(step, config)


def configure_optimizer(
    model: nn.Module,
    lr: float,
    weight_decay: float = 0.1,
    betas: tuple[float, float] = (0.9, 0.99),
    groups_fn: Callable[[nn.Module, float], list[dict]] | None = None,
) -> torch.optim.AdamW:
    """AdamW with weight decay on the weights of the Linear layers only.

    ``groups_fn(model, weight_decay) -> [{"params": ..., "weight_decay": ...}, ...]`` splits the
    parameters: lesson 07's ``param_groups`` by default (the course's reference: decayed exactly
    when a parameter is an ``nn.Linear``'s weight that no ``nn.Embedding`` holds; biases,
    LayerNorm's scale and shift and the embedding tables are not), the student's own in the lesson.
    A group left empty is dropped.
    """
    if groups_fn is None:
        from helpers.reference.training_step import param_groups as groups_fn
    groups = [g for g in groups_fn(model, weight_decay) if list(g["params"])]
    try:  # the fused kernel: about 10 % faster per step on a CPU for the course's models (PyTorch >= 2.4)
        return torch.optim.AdamW(groups, lr=lr, betas=tuple(betas), fused=True)
    except (RuntimeError, TypeError, ValueError):  # older PyTorch, or parameters it cannot fuse
        return torch.optim.AdamW(groups, lr=lr, betas=tuple(betas))


# --------------------------------------------------------------------------------------------
# Evaluation
# --------------------------------------------------------------------------------------------


def _model_device(model: nn.Module) -> torch.device:
    first = next(model.parameters(), None)
    return first.device if first is not None else torch.device("cpu")


@torch.no_grad()
def estimate_loss(
    model: nn.Module,
    ids: torch.Tensor,
    *,
    batch_size: int = 12,
    block_size: int = 64,
    n_batches: int = 200,
    seed: int = EVAL_SEED,
    batch_fn: Callable[..., tuple[torch.Tensor, torch.Tensor]] | None = None,
) -> float:
    """The mean cross-entropy (nats per token) of ``model`` on ``n_batches`` random batches of ``ids``.

    Runs in evaluation mode without gradients and puts the model back in the mode it was in.
    The batches come from a generator seeded with ``seed``, so two evaluations see the same
    windows: the difference between them is the model's, not the luck of the draw.
    ``batch_fn(ids, batch_size, block_size, generator=...) -> (x, y)`` cuts them;
    ``helpers.data.get_batch`` by default (the lesson passes the student's own).
    """
    if isinstance(n_batches, bool) or not isinstance(n_batches, int) or n_batches < 1:
        raise ValueError(f"n_batches must be a positive int, got {n_batches!r}")
    batch_fn = batch_fn or get_batch
    generator = torch.Generator().manual_seed(seed)
    device = _model_device(model)
    was_training = model.training
    model.eval()
    try:
        total = 0.0
        for _ in range(n_batches):
            x, y = batch_fn(ids, batch_size, block_size, generator=generator)  # (B, T) each
            logits = model(x.to(device))  # (B, T, V)
            V = logits.shape[-1]
            loss = F.cross_entropy(logits.reshape(-1, V).float(), y.to(device).reshape(-1))  # (B*T, V) vs (B*T,)
            total += loss.item()
        return total / n_batches
    finally:
        model.train(was_training)


# --------------------------------------------------------------------------------------------
# The loop
# --------------------------------------------------------------------------------------------


def _reference_train_step():
    """Lesson 07's ``train_step``, as the course's reference (generated from the solution)."""
    from helpers.reference.training_step import train_step

    return train_step


def _split(data) -> tuple[torch.Tensor, torch.Tensor]:
    if isinstance(data, CharDataset):
        return data.train, data.val
    if isinstance(data, (tuple, list)) and len(data) == 2:
        return data[0], data[1]
    raise TypeError(
        "data must be a CharDataset (helpers.data.shakespeare_dataset()) or a pair "
        f"(train_ids, val_ids) of 1-D tensors, got {type(data).__name__}"
    )


def train(
    model: nn.Module,
    data,
    config: TrainConfig | None = None,
    *,
    step_fn: Callable[..., float] | None = None,
    optimizer: torch.optim.Optimizer | None = None,
    callback: Callable[[pd.DataFrame], Any] | None = None,
    lr_fn: Callable[[int, TrainConfig], float] | None = None,
    batch_fn: Callable[..., tuple[torch.Tensor, torch.Tensor]] | None = None,
    eval_fn: Callable[..., dict[str, float]] | None = None,
    groups_fn: Callable[[nn.Module, float], list[dict]] | None = None,
    **overrides: Any,
) -> pd.DataFrame:
    """Train ``model`` on ``data`` and return the log as a DataFrame.

    ``data``: a ``CharDataset`` or a pair ``(train_ids, val_ids)`` of 1-D long tensors.
    ``config``: a ``TrainConfig``; keyword ``overrides`` replace its fields
    (``train(model, data, steps=100)``).
    ``step_fn(model, optimizer, x, y, grad_clip=...) -> float``: one update on the batch
    ``x, y`` (both ``(B, T)``); the course's reference ``train_step`` by default.
    ``optimizer``: by default ``configure_optimizer`` (AdamW, decay on the Linear layers' weights
    only, the groups from ``groups_fn`` when it is given). Its
    learning rate is set before every step from ``lr_fn(step, config)``, the course's
    ``learning_rate`` by default.
    ``batch_fn(ids, batch_size, block_size, generator=...) -> (x, y)``: cuts the training and
    validation batches; ``helpers.data.get_batch`` by default. (The lesson passes the student's
    ``train_step``, ``learning_rate`` and ``get_batch``.)
    ``eval_fn(model, {name: ids}, n_batches, batch_size, block_size) -> {name: loss}``: measures the
    mean loss of each split (lesson 07's ``estimate_loss``; the lesson passes the student's); by
    default ``estimate_loss`` here, with ``batch_fn``.
    ``callback(log)``: called with the log so far after every evaluation, and after every row of
    the log as well when the callback has a true ``every_row`` attribute (``LiveLossPlot`` has: its
    curve shows the training loss from the first rows on).

    The log has one row every ``log_every`` steps and one at every evaluation, with the columns
    ``LOG_COLUMNS``: ``step`` (updates done), ``train_loss`` (mean training loss of the updates
    since the previous row; at step 0, the untrained model's loss on training batches), ``val_loss`` (NaN when not evaluated at that step), ``lr`` (of the
    last update), ``tokens_per_s`` (training throughput since the previous row, evaluation time
    excluded) and ``elapsed_s`` (wall-clock seconds since the start, evaluation included).
    ``log.attrs`` holds the config (``"config"``) and the seconds spent training and evaluating
    (``"train_s"``, ``"eval_s"``).
    """
    config = dataclasses.replace(config or TrainConfig(), **overrides)
    train_ids, val_ids = _split(data)
    step_fn = step_fn or _reference_train_step()
    lr_fn = lr_fn or learning_rate
    batch_fn = batch_fn or get_batch
    if optimizer is None:
        optimizer = configure_optimizer(model, config.lr, config.weight_decay, config.betas, groups_fn=groups_fn)
    if eval_fn is None:
        def eval_fn(model, splits, n_batches, batch_size, block_size):
            return {name: estimate_loss(model, ids, batch_size=batch_size, block_size=block_size, n_batches=n_batches,
                                        batch_fn=batch_fn) for name, ids in splits.items()}
    generator = torch.Generator().manual_seed(config.seed)
    device = _model_device(model)
    B, T = config.batch_size, config.block_size
    rows: list[dict[str, float]] = []
    start = time.perf_counter()
    train_s = eval_s = 0.0
    pending: list[float] = []  # training losses since the last row
    tokens_since, train_s_since = 0, 0.0

    def evaluate() -> float:
        nonlocal eval_s
        t0 = time.perf_counter()
        value = float(eval_fn(model, {"val": val_ids}, config.eval_batches, B, T)["val"])
        eval_s += time.perf_counter() - t0
        return value

    def add_row(step: int, lr: float, val_loss: float) -> None:
        nonlocal pending, tokens_since, train_s_since
        rows.append({
            "step": step,
            "train_loss": sum(pending) / len(pending) if pending else math.nan,
            "val_loss": val_loss,
            "lr": lr,
            "tokens_per_s": tokens_since / train_s_since if train_s_since > 0 else math.nan,
            "elapsed_s": time.perf_counter() - start,
        })
        pending, tokens_since, train_s_since = [], 0, 0.0

    def frame() -> pd.DataFrame:
        log = pd.DataFrame(rows, columns=list(LOG_COLUMNS))
        log["step"] = log["step"].astype(int)
        log.attrs.update(config=dataclasses.asdict(config), train_s=train_s, eval_s=eval_s)
        return log

    every_row = bool(getattr(callback, "every_row", False))
    bar = tqdm(total=config.steps, desc="training", unit="step", disable=not config.progress)
    try:
        if config.eval_at_start:  # the untrained model, on training batches too (no update yet)
            pending.append(float(eval_fn(model, {"train": train_ids}, config.eval_batches, B, T)["train"]))
            add_row(0, lr_fn(0, config), evaluate())
            if callback is not None:
                callback(frame())
        for step in range(config.steps):
            lr = lr_fn(step, config)
            for group in optimizer.param_groups:
                group["lr"] = lr
            t0 = time.perf_counter()
            x, y = batch_fn(train_ids, B, T, generator=generator)  # (B, T) each
            x, y = x.to(device), y.to(device)
            loss = step_fn(model, optimizer, x, y, grad_clip=config.grad_clip)
            elapsed = time.perf_counter() - t0
            if not isinstance(loss, float):
                raise TypeError(
                    f"the training step returned {type(loss).__name__}, not a float: return loss.item()"
                )
            if not math.isfinite(loss):
                raise FloatingPointError(f"the training loss is {loss} at step {step}: lower the learning rate")
            train_s += elapsed
            train_s_since += elapsed
            tokens_since += B * T
            pending.append(loss)
            done = step + 1
            evaluating = done == config.steps or (config.eval_every and done % config.eval_every == 0)
            if evaluating or done % config.log_every == 0:
                val_loss = evaluate() if evaluating else math.nan
                add_row(done, lr, val_loss)
                bar.set_postfix(loss=f"{rows[-1]['train_loss']:.3f}", refresh=False)
                if callback is not None and (evaluating or every_row):
                    callback(frame())
            bar.update(1)
    finally:
        bar.close()
    return frame()


class LiveLossPlot:
    """A ``callback`` for ``train`` that redraws the loss curves in place in a notebook.

    ``train`` calls it after every row of the log (``every_row``): the training loss (the mean of
    each row's steps) shows from the first rows on, and each validation loss joins the figure when
    it is measured. The step axis spans the whole run from the first drawing on, the loss axis at
    least half a nat below the lowest loss so far. A redraw costs
    a tenth of a second or more, so between evaluations it redraws at most every ``redraw_s``
    seconds and no more often than keeps the drawing under 5 % of the time; it always redraws after
    an evaluation and at the last step. ``reference`` maps a label to a loss drawn as a dashed
    line, as in ``helpers.plotting.plot_loss_curves``. Outside a notebook it draws nothing visible.
    """

    every_row = True

    def __init__(self, *, title: str = "Loss while training", reference: Mapping[str, float] | None = None,
                 redraw_s: float = 1.5):
        self.title = title
        self.reference = dict(reference or {})
        self.redraw_s = redraw_s
        self.figure = None
        self._handle = None
        self._drawn_at = -math.inf
        self._draw_s = 0.0  # how long the last redraw took

    def __call__(self, log: pd.DataFrame) -> None:
        from IPython.display import display
        from matplotlib.figure import Figure

        from helpers.plotting import plot_loss_curves

        steps = log.attrs.get("config", {}).get("steps")
        last = log.iloc[-1]
        evaluated = "val_loss" in log and math.isfinite(last["val_loss"])
        final = steps is not None and int(last["step"]) >= steps
        now = time.perf_counter()
        if not (evaluated or final or now - self._drawn_at >= max(self.redraw_s, 19 * self._draw_s)):
            return
        if self.figure is None:  # a Figure outside pyplot: the notebook does not show it twice
            self.figure = Figure(figsize=(7.0, 4.2), layout="constrained")
            self.figure.add_subplot()
        ax = self.figure.axes[0]
        ax.clear()
        plot_loss_curves(log, ax=ax, title=self.title, reference=self.reference or None)
        if steps:
            ax.set_xlim(0, steps)  # the whole run from the start: the curve grows into it
        losses = log[[c for c in ("train_loss", "val_loss") if c in log]].to_numpy(dtype=float)
        losses = losses[np.isfinite(losses)]
        if losses.size:  # at least half a nat below the lowest loss so far: no axis for a single point
            top = max([losses.max(), *self.reference.values()])
            ax.set_ylim(max(0.0, losses.min() - 0.5), top + 0.15)
        if self._handle is None:
            self._handle = display(self.figure, display_id=True)
        else:
            self._handle.update(self.figure)
        self._drawn_at = time.perf_counter()
        self._draw_s = self._drawn_at - now


# --------------------------------------------------------------------------------------------
# Checkpoints
# --------------------------------------------------------------------------------------------


#: an explicit path for the course's trained character model (lesson 07 writes it, lessons 08 and 12 read it)
CHECKPOINT_ENV_VAR = "TRANSFORMER_COURSE_CHECKPOINT"
#: the file of the model trained on Tiny Shakespeare; a model of another text has its own (``checkpoint_name``)
CHECKPOINT_NAME = "shakespeare-char.pt"


def checkpoint_name(corpus: str) -> str:
    """The file name of the course's character model trained on the text named ``corpus``.

    ``corpus`` is a name as ``CharDataset.corpus`` and ``helpers.data.corpus_name`` give it.
    Tiny Shakespeare's model is ``shakespeare-char.pt``; another text of ``CORPORA`` gets the stem of
    its file (``shakespeare-char-shakespeare-plays.pt``), and any other text ``...-unchecked.pt``.
    The two texts have vocabularies of the same size, so a model of one would load for the other
    without an error and read every id as the wrong character: one file per text prevents that.
    """
    if corpus == CORPORA[TINY_SHAKESPEARE_SHA256].name:
        return CHECKPOINT_NAME
    stem = next((Path(c.filename).stem for c in CORPORA.values() if c.name == corpus), "unchecked")
    return f"{Path(CHECKPOINT_NAME).stem}-{stem}.pt"


def _corpus_read_now() -> str:
    """The name of the text ``shakespeare_dataset()`` would read now, found without downloading
    anything; Tiny Shakespeare's when there is none yet."""
    try:
        return corpus_name(tiny_shakespeare_path(download=False, progress=False))
    except DataUnavailableError:
        return CORPORA[TINY_SHAKESPEARE_SHA256].name


def course_checkpoint_path(corpus: str | None = None) -> Path:
    """Where the course keeps the character model that lesson 07 trains and lesson 08 loads.

    ``$TRANSFORMER_COURSE_CHECKPOINT`` if it is set, else, in the course's cache folder
    (``helpers.data.default_cache_dir()``), the file of the model trained on ``corpus``
    (``checkpoint_name``: ``shakespeare-char.pt`` for Tiny Shakespeare), the same in every folder a
    notebook is opened from. The lessons pass ``data.corpus``; without it, the text that
    ``shakespeare_dataset()`` would read now. The file may not exist yet: nothing is created here.
    """
    explicit = os.environ.get(CHECKPOINT_ENV_VAR)
    if explicit:
        return Path(explicit).expanduser()
    return default_cache_dir() / checkpoint_name(corpus if corpus is not None else _corpus_read_now())


class CheckpointError(ValueError):
    """A file is not a checkpoint of this course, or does not fit the model it describes."""


_PLAIN = (type(None), bool, int, float, str)


def _check_plain(value: Any, where: str) -> None:
    """Refuse anything ``torch.load(weights_only=True)`` could not read back."""
    if isinstance(value, _PLAIN) or isinstance(value, torch.Tensor):
        return
    if isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            _check_plain(item, f"{where}[{i}]")
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(f"{where} has a key {key!r} that is not a string")
            _check_plain(item, f"{where}[{key!r}]")
        return
    raise TypeError(
        f"{where} is a {type(value).__name__}; a checkpoint holds tensors and plain Python values "
        "only (None, bool, int, float, str, lists and dicts of them). Convert it first "
        "(e.g. float(x), x.tolist(), dataclasses.asdict(x))."
    )


def save_checkpoint(
    path: str | os.PathLike[str],
    model: nn.Module,
    config=None,
    vocab: CharVocab | None = None,
    extra: Mapping[str, Any] | None = None,
    *,
    optimizer: torch.optim.Optimizer | None = None,
    step: int | None = None,
    generator: torch.Generator | None = None,
) -> Path:
    """Save ``model``'s weights, its ``Config`` as a plain dict, the vocabulary and ``extra``, and
    what training needs to go on where it stopped.

    ``model``: a ``TransformerLM``; ``config``: its ``Config`` (default ``model.config``);
    ``vocab``: the ``CharVocab`` the ids come from; ``extra``: plain data to keep alongside
    (the training settings, the validation loss...). To resume training: ``optimizer``, whose
    ``state_dict()`` holds AdamW's running averages and step counts; ``step``, the number of updates
    done (the learning-rate schedule's place); ``generator``, the generator the training batches
    are cut with (its state: the batches still to come). ``load_training_state`` puts them back.
    The file holds tensors and plain Python values only, so it is read with
    ``torch.load(..., weights_only=True)``: loading it cannot run code. Written to a temporary
    file, then renamed. Returns the path.
    """
    from helpers.reference.transformer_lm import Config

    config = model.config if config is None else config
    if isinstance(config, Config):
        config_dict = dataclasses.asdict(config)
    elif isinstance(config, Mapping):
        config_dict = dict(config)
    else:
        raise TypeError(f"config must be a Config or a dict, got {type(config).__name__}")
    if vocab is not None and not isinstance(vocab, CharVocab):
        raise TypeError(f"vocab must be a CharVocab or None, got {type(vocab).__name__}")
    extra = dict(extra or {})
    _check_plain(config_dict, "config")
    _check_plain(extra, "extra")
    if step is not None and (isinstance(step, bool) or not isinstance(step, int) or step < 0):
        raise TypeError(f"step must be an int >= 0 or None, got {step!r}")
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator or None, got {type(generator).__name__}")
    state = {name: tensor.detach().cpu() for name, tensor in model.state_dict().items()}
    payload = {
        "format": CHECKPOINT_FORMAT,
        "version": CHECKPOINT_VERSION,
        "model": type(model).__name__,
        "config": config_dict,
        "vocab": vocab.to_dict() if vocab is not None else None,
        "state_dict": state,
        "extra": extra,
        "optimizer": _to_cpu(optimizer.state_dict()) if optimizer is not None else None,
        "step": step,
        "generator": generator.get_state() if generator is not None else None,
    }
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # a private folder next to the target, holding a file of the target's name: torch.save names the
    # archive's records after the file, so the same model always gives the same bytes
    folder = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    tmp = folder / path.name
    try:
        torch.save(payload, tmp)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # the usual permissions, not the private folder's
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
        folder.rmdir()
    return path


def read_checkpoint(path: str | os.PathLike[str], map_location: str | torch.device = "cpu") -> dict:
    """The checked contents of a checkpoint: ``config``, ``vocab``, ``state_dict``, ``extra``..."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint at {path}: check the path (save one with save_checkpoint)")
    try:
        payload = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as exc:  # noqa: BLE001 - torch raises many kinds for a bad file
        raise CheckpointError(
            f"{path} could not be read as a checkpoint ({type(exc).__name__}: {str(exc)[:300]}). "
            "It is damaged, not a file written by save_checkpoint, or holds objects other than "
            "tensors and plain Python values."
        ) from None
    if not isinstance(payload, dict) or payload.get("format") != CHECKPOINT_FORMAT:
        raise CheckpointError(f"{path} is not a checkpoint of this course (no format {CHECKPOINT_FORMAT!r})")
    if payload.get("version") not in READABLE_VERSIONS:
        raise CheckpointError(
            f"{path} is a version {payload.get('version')!r} checkpoint; this code reads versions "
            f"{', '.join(map(str, READABLE_VERSIONS))}"
        )
    for key in ("optimizer", "step", "generator"):  # a version 1 file: no training state
        payload.setdefault(key, None)
    for key, kind in (("config", dict), ("state_dict", dict), ("extra", dict)):
        if not isinstance(payload.get(key), kind):
            raise CheckpointError(f"{path}: the checkpoint's {key!r} entry is missing or not a {kind.__name__}")
    return payload


def _to_cpu(value: Any) -> Any:
    """An optimizer's state_dict with every tensor on the CPU (dicts, lists and tuples walked)."""
    if isinstance(value, torch.Tensor):
        return value.detach().cpu()
    if isinstance(value, dict):
        return {key: _to_cpu(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_to_cpu(item) for item in value)
    return value


def load_training_state(
    path: str | os.PathLike[str],
    model: nn.Module,
    optimizer: torch.optim.Optimizer | None = None,
    generator: torch.Generator | None = None,
) -> int | None:
    """Put a checkpoint's training state back, to go on training where it stopped; returns its step.

    Loads the saved weights into ``model`` (built as the saved one was: the same parameter names,
    the fast path or not), the saved optimizer state into ``optimizer`` (built over ``model``'s
    parameters with the same groups, as the saved one was) and the saved generator state into
    ``generator``. Raises ``CheckpointError`` when the file lacks what is asked for (a version 1
    file, or one saved without an optimizer or a generator) or when it does not fit.
    """
    payload = read_checkpoint(path)
    try:
        model.load_state_dict(payload["state_dict"], strict=True)
    except RuntimeError as exc:
        raise CheckpointError(f"{path}: the saved weights do not fit this model:\n{exc}") from None
    for name, target, what in (("optimizer", optimizer, "an optimizer state"), ("generator", generator, "a generator state")):
        if target is not None and payload[name] is None:
            raise CheckpointError(f"{path} holds no {name} state (saved without one, or a version "
                                  f"{payload['version']} file): pass {name}=... to save_checkpoint to keep {what}")
    if optimizer is not None:
        try:
            optimizer.load_state_dict(payload["optimizer"])
        except (ValueError, KeyError, RuntimeError) as exc:
            raise CheckpointError(f"{path}: the saved optimizer state does not fit this optimizer: {exc}") from None
    if generator is not None:
        generator.set_state(payload["generator"])
    return payload["step"]


def load_checkpoint(path: str | os.PathLike[str], map_location: str | torch.device = "cpu"):
    """Rebuild the model saved by ``save_checkpoint``: returns ``(model, config, vocab)``.

    The model is a ``TransformerLM`` built from the saved ``Config`` (tied weights stay tied),
    holding the saved weights, in evaluation mode. ``vocab`` is the saved ``CharVocab`` or None.
    Raises ``FileNotFoundError`` or ``CheckpointError`` saying what is wrong.
    """
    from helpers.reference.transformer_lm import Config, TransformerLM

    payload = read_checkpoint(path, map_location)
    if payload.get("model") != "TransformerLM":
        raise CheckpointError(f"{path} holds a {payload.get('model')!r}; load_checkpoint rebuilds TransformerLM only")
    fields = {f.name for f in dataclasses.fields(Config)}
    unknown = sorted(set(payload["config"]) - fields)
    if unknown:
        raise CheckpointError(f"{path}: the saved config has fields Config does not know: {', '.join(unknown)}")
    config = Config(**payload["config"])
    model = TransformerLM(config)
    try:
        model.load_state_dict(payload["state_dict"], strict=True)
    except RuntimeError as exc:
        raise CheckpointError(f"{path}: the saved weights do not fit TransformerLM({config}):\n{exc}") from None
    model.to(map_location)
    model.eval()
    vocab = payload.get("vocab")
    if vocab is not None:
        try:
            vocab = CharVocab.from_dict(vocab)
        except (TypeError, ValueError) as exc:
            raise CheckpointError(f"{path}: the saved vocabulary is unusable: {exc}") from None
        if len(vocab) != config.n_vocab:
            raise CheckpointError(
                f"{path}: the vocabulary has {len(vocab)} characters but the model {config.n_vocab} tokens"
            )
    return model, config, vocab


#: the character model that lesson 07 trains and later lessons load: nanoGPT's Shakespeare sizes
COURSE_MODEL_SIZES = dict(max_len=64, emb_dim=128, n_hidden=512, head_dim=32, n_heads=4, n_layers=4)


def course_model(data, *, fallback_steps: int = 2000, eval_batches: int = 200, save: bool = True,
                 saved_by: str = "a lesson", report: Callable[[str], None] = print):
    """The course's trained character model of ``data``'s text: ``(model, config, vocab, val_loss)``.

    Loaded from ``course_checkpoint_path(data.corpus)`` when that file exists (lesson 07's full run
    and ``benchmarks/train_shakespeare.py --save`` write it); otherwise trained here with lesson 07's
    loop for ``fallback_steps`` steps from lesson 07's seed and, with ``save``, saved there for the
    next run. ``val_loss`` is measured now on ``eval_batches`` validation batches. ``report``
    receives a line for each thing done (``print`` by default).
    """
    from helpers.reference.transformer_lm import Config, TransformerLM

    path = course_checkpoint_path(data.corpus)
    if path.exists():
        model, config, vocab = load_checkpoint(path)
        report(f"loaded the trained model from {path}")
        val_loss = estimate_loss(model, data.val, batch_size=12, block_size=config.max_len, n_batches=eval_batches)
    else:
        report(f"There is no trained model at {path}: lesson 07's full run saves one there. "
               f"Training the same model here instead, {fallback_steps} steps with lesson 07's loop.")
        seed_everything(0)  # lesson 07's seed: the same initial weights and the same batches
        vocab, config = data.vocab, Config(n_vocab=len(data.vocab), **COURSE_MODEL_SIZES)
        model = TransformerLM(config)
        log = train(model, data, TrainConfig(steps=fallback_steps, eval_every=0, eval_at_start=False,
                                             eval_batches=eval_batches))
        val_loss = float(log.val_loss.iloc[-1])
        if not save:
            report("this model is not saved: the next run trains again")
        else:
            try:
                save_checkpoint(path, model, config, vocab, extra={"val_loss": val_loss, "steps": fallback_steps,
                                                                   "saved_by": saved_by, "corpus": data.corpus})
                report(f"saved it to {path}: the next run loads it")
            except OSError as error:
                report(f"could not save it ({error}); the next run will train again")
    if vocab != data.vocab:
        raise CheckpointError(f"{path} was trained on another text than {data.corpus}: another vocabulary")
    return model, config, vocab, val_loss


__all__ += ["COURSE_MODEL_SIZES", "course_model"]
