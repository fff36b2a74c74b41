"""Lesson 07: every catalogued mistake in the training step loses exactly its points and is named;
correct steps written differently get full marks."""

import pytest
from harness import edited, grade_submissions, row, solution_answers

A = "07-training"
STEP = "train-step"
LOSS = "loss = F.cross_entropy(logits.reshape(B * T, V), y.reshape(B * T))"
ZERO = "optimizer.zero_grad(set_to_none=True)"
CLIP = "        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)\n"
STEP_CALL = "optimizer.step()"
RETURN = "return loss.item()"

# name -> (exercise, edits of the solution, words the feedback must contain)
MISTAKES = {
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
    "clip-when-none": (STEP, [("    if grad_clip is not None:\n" + CLIP, CLIP.replace("        ", "    ", 1))], "When grad_clip is None"),
}

ALTERNATIVES = {
    "transposed-logits": {STEP: '''
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
    "clear-at-the-end": {STEP: '''
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


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    subs = {name: edited(A, ex, edits) for name, (ex, edits, _) in MISTAKES.items()}
    for name, answers in ALTERNATIVES.items():
        subs[name] = {**solution_answers(A), **{k: v.strip() + "\n" for k, v in answers.items()}}
    return grade_submissions(A, subs, tmp_path_factory.mktemp("l07"))


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(MISTAKES))
def test_mistake_loses_exactly_its_exercise(graded, name):
    exercise, _, words = MISTAKES[name]
    for r in graded[graded.student_id == name].itertuples():
        if r.exercise == exercise:
            assert r.score == 0 and r.status == "failed", (r.status, r.message)
            assert words in r.message, r.message
        else:
            assert r.score == r.max_score, (r.exercise, r.message)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(ALTERNATIVES))
def test_alternative_correct_answers_get_full_marks(graded, name):
    for exercise in ALTERNATIVES[name]:
        r = row(graded, name, exercise)
        assert (r.score, r.status) == (r.max_score, "passed"), r.message
