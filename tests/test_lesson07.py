"""Lesson 07: every catalogued mistake (in the batches, the training step and the learning-rate
schedule) loses exactly its own exercise's points and is named; correct answers written
differently get full marks."""

from harness import Catalogue, CatalogueTests

A = "07-training"
BATCH = "get-batch"
STEP = "train-step"
LR = "learning-rate"
LOSS = "loss = F.cross_entropy(logits.reshape(B * T, V), y.reshape(B * T))"
ZERO = "optimizer.zero_grad(set_to_none=True)"
CLIP = "        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)\n"
STEP_CALL = "optimizer.step()"
RETURN = "return loss.item()"
STARTS = "starts = torch.randint(len(ids) - block_size, (batch_size,), generator=generator)"
POSITIONS = "positions = starts[:, None] + torch.arange(block_size)"
TARGETS = "y = ids[positions + 1]"
WARMUP = "return config.lr * (step + 1) / config.warmup_steps"
DECAY = "decay_steps = max(1, config.steps - 1 - config.warmup_steps)"
PROGRESS = "progress = min(1.0, (step - config.warmup_steps) / decay_steps)"
FACTOR = "factor = 0.5 * (1 + math.cos(math.pi * progress))"
BLEND = "return config.min_lr + factor * (config.lr - config.min_lr)"

# name -> (exercise, edits of the solution, words the feedback must contain)
MISTAKES = {
    # Exercise 1: get_batch
    "targets-not-shifted": (BATCH, [(TARGETS, "y = ids[positions]")], "targets are not shifted"),
    "targets-shifted-the-wrong-way": (BATCH, [(TARGETS, "y = ids[positions - 1]")], "shifted the wrong way"),
    "windows-run-past-the-end": (
        BATCH, [(STARTS, STARTS.replace("len(ids) - block_size,", "len(ids) - block_size + 1,"))], "run past the end",
    ),
    "never-the-last-window": (
        BATCH, [(STARTS, STARTS.replace("len(ids) - block_size,", "len(ids) - block_size - 1,"))],
        "never reach the last window",
    ),
    "generator-ignored": (BATCH, [(STARTS, STARTS.replace(", generator=generator", ""))], "ignored the generator"),
    "random-positions-not-windows": (
        BATCH, [(POSITIONS, "positions = torch.randint(len(ids) - 1, (batch_size, block_size), generator=generator)")],
        "not a window of consecutive ids",
    ),
    "target-two-ahead": (BATCH, [(TARGETS, "y = ids[positions + 2]")], "2 places after x[b, t]"),
    "window-one-too-long": (BATCH, [(POSITIONS, POSITIONS.replace("arange(block_size)", "arange(block_size + 1)"))], "got (5, 8)"),
    "never-the-first-window": (BATCH, [(STARTS, STARTS.replace("randint(", "randint(1, "))], "the starts [0] never came up"),
    "one-start-for-the-batch": (
        BATCH, [(STARTS, STARTS.replace("(batch_size,), generator=generator)", "(1,), generator=generator).expand(batch_size)"))],
        "every row is the same window",
    ),
    "neighbouring-starts": (
        BATCH, [(STARTS, "starts = torch.randint(len(ids) - block_size - batch_size + 1, (1,), generator=generator) + torch.arange(batch_size)")],
        "consecutive positions",
    ),
    "own-generator": (BATCH, [(STARTS, STARTS.replace("generator=generator", "generator=torch.Generator().manual_seed(0)"))], "ignored the generator"),
    "text-cut-in-rows": (
        BATCH, [("x = ids[positions]", "x = ids[:batch_size * block_size].view(batch_size, block_size)")],
        "cannot hold the 23 entries",
    ),
    # Exercise 3: learning_rate
    "warm-up-boundary": (LR, [("if step < config.warmup_steps:", "if step <= config.warmup_steps:")], "check the boundary"),
    "cosine-without-half": (LR, [(FACTOR, "factor = 1 + math.cos(math.pi * progress)")], "the wave is 2 × as high"),
    "cosine-without-pi": (LR, [(FACTOR, "factor = 0.5 * (1 + math.cos(progress))")], "π times too long"),
    "integer-progress": (LR, [(PROGRESS, PROGRESS.replace(") / decay_steps", ") // decay_steps"))], "integer division"),
    "returns-a-tensor": (LR, [(BLEND, "return torch.tensor(config.min_lr + factor * (config.lr - config.min_lr))")], "Python float"),
    "decay-runs-backwards": (LR, [(BLEND, "return config.lr + factor * (config.min_lr - config.lr)")], "the decay runs backwards"),
    "warm-up-over-all-steps": (LR, [(WARMUP, "return config.lr * (step + 1) / config.steps")], "warmup_steps / steps"),
    "warm-up-only-with-cosine": (LR, [("if step < config.warmup_steps:", "if step < config.warmup_steps and config.cosine:")], "there is no warm-up"),
    "decay-ignores-the-warm-up": (LR, [(DECAY, "decay_steps = max(1, config.steps - 1)")], "over 22 steps"),
    "warm-up-starts-at-zero": (LR, [(WARMUP, "return config.lr * step / config.warmup_steps")], "off by one in the warm-up"),
    "cosine-to-zero": (LR, [(BLEND, "return factor * config.lr")], "decays to 0 instead of min_lr"),
    "decay-one-step-too-long": (
        LR, [(DECAY, "decay_steps = max(1, config.steps - config.warmup_steps)")], "wrong number of steps",
    ),
    "decay-from-step-zero": (
        LR, [(PROGRESS, "progress = min(1.0, step / max(1, config.steps - 1))")], "wrong number of steps",
    ),
    "no-cap-after-the-last-step": (
        LR, [(PROGRESS, "progress = (step - config.warmup_steps) / decay_steps")], "climbs back up",
    ),
    "cosine-flag-ignored": (LR, [("    if not config.cosine:\n        return config.lr\n", "")], "config.cosine is False"),
    "linear-decay": (LR, [(FACTOR, "factor = 1 - progress")], "linear decay, not a cosine"),
    # Exercise 2: train_step
    "no-zero-grad": (STEP, [(ZERO, "pass")], "gradients accumulate"),
    "step-before-backward": (
        STEP,
        [("    loss.backward()", "    optimizer.step()\n    loss.backward()"), ("    optimizer.step()  #", "    pass  #")],
        "did not change the parameters",
    ),
    "zero-grad-between-backward-and-step": (
        STEP, [(ZERO, "pass"), ("    optimizer.step()  #", "    optimizer.zero_grad()\n    optimizer.step()  #")],
        "did not change the parameters",
    ),
    "loss-not-reshaped": (STEP, [(LOSS, "loss = F.cross_entropy(logits, y)")], "not reshaped"),
    "targets-shifted-twice": (
        STEP, [(LOSS, "loss = F.cross_entropy(logits[:, :-1].reshape(-1, V), y[:, 1:].reshape(-1))")],
        "shifted the targets a second time",
    ),
    "targets-are-inputs": (STEP, [(LOSS, "loss = F.cross_entropy(logits.reshape(B * T, V), x.reshape(B * T))")], "inputs x instead of the targets y"),
    "sum-reduction": (STEP, [("y.reshape(B * T))", "y.reshape(B * T), reduction=\"sum\")")], "reduction='sum'"),
    "returns-the-graph": (STEP, [(RETURN, "return loss")], "holds on to the whole graph"),
    "eval-mode": (STEP, [("model.train()", "model.eval()")], "evaluation mode"),
    "no-train-mode": (STEP, [("model.train()", "pass")], "model.train()"),
    "forward-under-no-grad": (
        STEP, [("    logits = model(x)  # (B, T, V)", "    with torch.no_grad():\n        logits = model(x)  # (B, T, V)")],
        "found no graph",
    ),
    "clip-after-step": (
        STEP,
        [("    if grad_clip is not None:\n" + CLIP, ""),
         ("    " + RETURN, "    if grad_clip is not None:\n" + CLIP + "    " + RETURN)],
        "not clipped before the update",
    ),
    "clip-by-value": (STEP, [("clip_grad_norm_", "clip_grad_value_")], "clip_grad_value_"),
    "clip-to-one": (STEP, [(CLIP.strip(), CLIP.strip().replace("grad_clip)", "1.0)"))], "L2 norm to 1.0"),
    "step-twice": (STEP, [(STEP_CALL + "  #", STEP_CALL + "\n    optimizer.step()  #")], "twice the step"),
    "backward-twice": (STEP, [("loss.backward()  #", "loss.backward(retain_graph=True)\n    loss.backward()  #")], "twice the step"),
    "plain-sgd-update": (
        STEP, [(STEP_CALL + "  #", "with torch.no_grad():\n        for p in model.parameters():\n"
                "            p -= optimizer.param_groups[0]['lr'] * p.grad\n    pass  #")],
        "a plain SGD step",
    ),
    "loss-divided-by-batch": (STEP, [("y.reshape(B * T))", "y.reshape(B * T)) / B")], "1/B"),
    "clip-l1-norm": (STEP, [("model.parameters(), grad_clip)", "model.parameters(), grad_clip, norm_type=1)")], "L1 norm"),
    "label-smoothing": (STEP, [("y.reshape(B * T))", "y.reshape(B * T), label_smoothing=0.1)")], "label smoothing"),
    "returns-a-detached-tensor": (STEP, [(RETURN, "return loss.detach()")], "return a Python float"),
    "targets-transposed": (STEP, [("y.reshape(B * T))", "y.t().reshape(B * T))")], "another order"),
    "clip-when-none": (STEP, [("    if grad_clip is not None:\n" + CLIP, CLIP.replace("        ", "    ", 1))], "When grad_clip is None"),
}

ALTERNATIVES = {
    "transposed-logits": {BATCH: '''
def get_batch(ids, batch_size, block_size, generator=None):
    starts = torch.randint(0, len(ids) - block_size, (batch_size,), generator=generator).tolist()
    x = torch.stack([ids[s:s + block_size] for s in starts])
    y = torch.stack([ids[s + 1:s + block_size + 1] for s in starts])
    return x, y
''', LR: '''
def learning_rate(step, config):
    if step < config.warmup_steps:
        return (step + 1) * config.lr / config.warmup_steps
    if config.cosine:
        span = max(config.steps - config.warmup_steps - 1, 1)
        done = min((step - config.warmup_steps) / span, 1.0)
        return config.min_lr + (config.lr - config.min_lr) * math.cos(math.pi * done / 2) ** 2
    return config.lr
''', STEP: '''
def train_step(model, optimizer, x, y, grad_clip=None):
    model.train()
    optimizer.zero_grad()
    loss = F.cross_entropy(model(x).transpose(1, 2), y)  # (B, V, T) against (B, T)
    loss.backward()
    if grad_clip:
        nn.utils.clip_grad_norm_(list(model.parameters()), max_norm=grad_clip)
    optimizer.step()
    return float(loss)
'''},
    "clear-at-the-end": {BATCH: '''
def get_batch(ids, batch_size, block_size, generator=None):
    windows = ids.unfold(0, block_size + 1, 1)  # (N - T, T + 1): every window with its target
    rows = torch.randint(windows.shape[0], (batch_size,), generator=generator)  # (B,)
    chosen = windows[rows]  # (B, T + 1)
    return chosen[:, :-1], chosen[:, 1:]
''', LR: '''
def learning_rate(step, config):
    lr, low, warm = config.lr, config.min_lr, config.warmup_steps
    if warm > 0 and step < warm:
        return lr * (step + 1) / warm
    if not config.cosine:
        return lr
    progress = torch.tensor((step - warm) / max(1, config.steps - 1 - warm), dtype=torch.float64).clamp(max=1)
    return float(low + (lr - low) * (1 + torch.cos(torch.pi * progress)) / 2)
''', STEP: '''
def train_step(model, optimizer, x, y, grad_clip=None):
    model.train(True)
    logits = model(x)
    log_probs = F.log_softmax(logits.view(-1, logits.size(-1)), dim=-1)
    loss = F.nll_loss(log_probs, y.view(-1))
    loss.backward()
    if grad_clip is not None:
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    optimizer.step()
    for p in model.parameters():
        p.grad = None
    return loss.detach().item()
'''},
    "manual-clipping": {STEP: '''
def train_step(model, optimizer, x, y, grad_clip=None):
    model.train()
    model.zero_grad(set_to_none=False)
    logits = model(x)
    loss = F.cross_entropy(logits.flatten(0, 1), y.flatten())
    loss.backward()
    if grad_clip is not None:
        grads = [p.grad for p in model.parameters() if p.grad is not None]
        norm = torch.sqrt(sum((g ** 2).sum() for g in grads))
        scale = grad_clip / (norm + 1e-6)
        if scale < 1:
            for g in grads:
                g.mul_(scale)
    optimizer.step()
    return loss.item()
'''},
}


class TestCatalogue(CatalogueTests):
    catalogue = Catalogue(A, MISTAKES, ALTERNATIVES, requirements={
        BATCH: {
            "must fit in the text": ["windows-run-past-the-end", "never-the-last-window", "never-the-first-window",
                                     "target-two-ahead", "window-one-too-long"],
            "all the random numbers of the batch come from": ["generator-ignored", "own-generator"],
        },
    })


def test_catalogue_covers_the_batch_and_the_schedule():
    assert {BATCH, LR} <= {entry[0] for entry in MISTAKES.values()}
