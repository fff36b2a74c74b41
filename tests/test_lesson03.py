"""Lesson 03: every catalogued mistake loses exactly its exercise's points and is named;
correct answers written differently get full marks."""

import pytest
from harness import edited, grade_submissions, row, solution_answers

A = "03-self-attention"

# name -> (exercise, edits of the solution, words the feedback must contain)
MISTAKES = {
    "mask-inverted": ("causal-mask", [("diagonal=1)", "diagonal=0)"), ("masked_fill(future,", "masked_fill(~future,")], "inverted"),
    "mask-hides-diagonal": ("causal-mask", [("diagonal=1)", "diagonal=0)")], "itself"),
    "mask-finite": ("causal-mask", [('float("-inf")', "-1e9")], "finite"),
    "mask-in-place": ("causal-mask", [("scores.masked_fill(future,", "scores.masked_fill_(future,")], "in place"),
    "mask-lower-triangle-kept-future": ("causal-mask", [("diagonal=1)", "diagonal=2)")], "query 0 attends to key 1"),
    "head-sqrt-emb-dim": ("attention-head", [("math.sqrt(self.head_dim)", "math.sqrt(x.shape[-1])")], "sqrt(emb_dim)"),
    "head-no-scaling": ("attention-head", [(" / math.sqrt(self.head_dim)", "")], "forgot to scale"),
    "head-mask-after-softmax": (
        "attention-head",
        [('torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1)', "torch.softmax(scores, dim=-1).masked_fill(future, 0.0)")],
        "after the softmax",
    ),
    "head-softmax-dim": ("attention-head", [('float("-inf")), dim=-1)', 'float("-inf")), dim=-2)')], "dim=-2"),
    "head-no-mask": ("attention-head", [('scores.masked_fill(future, float("-inf"))', "scores")], "forgot the causal mask"),
    "head-k-at-q": ("attention-head", [("q @ k.transpose(-2, -1)", "k @ q.transpose(-2, -1)")], "k @ q.T"),
    "head-weights-times-x": ("attention-head", [("return weights @ v", "return weights @ x")], "instead of by the values"),
}

ALTERNATIVES = {
    "mask-where": {"causal-mask": '''
def apply_causal_mask(scores):
    T = scores.shape[-1]
    allowed = torch.tril(torch.ones(T, T)).bool()
    return torch.where(allowed, scores, torch.tensor(float("-inf"), dtype=scores.dtype))
'''},
    "mask-clone-and-index": {"causal-mask": '''
def apply_causal_mask(scores):
    out = scores.clone()
    rows, cols = torch.triu_indices(scores.shape[-2], scores.shape[-1], offset=1)
    out[..., rows, cols] = float("-inf")
    return out
'''},
    "head-einsum": {"attention-head": '''
class AttentionHead(nn.Module):
    def __init__(self, emb_dim, head_dim):
        super().__init__()
        self.head_dim = head_dim
        self.query = nn.Linear(emb_dim, head_dim, bias=False)
        self.key = nn.Linear(emb_dim, head_dim, bias=False)
        self.value = nn.Linear(emb_dim, head_dim, bias=False)

    def forward(self, x):
        q, k, v = self.query(x), self.key(x), self.value(x)
        scores = torch.einsum("...id,...jd->...ij", q, k) * self.head_dim ** -0.5
        weights = apply_causal_mask(scores).softmax(dim=-1)
        return torch.einsum("...ij,...jd->...id", weights, v)
'''},
    "head-fused-sdpa": {"attention-head": '''
class AttentionHead(nn.Module):
    def __init__(self, emb_dim, head_dim):
        super().__init__()
        self.head_dim = head_dim
        self.query = nn.Linear(emb_dim, head_dim, bias=False)
        self.key = nn.Linear(emb_dim, head_dim, bias=False)
        self.value = nn.Linear(emb_dim, head_dim, bias=False)

    def forward(self, x):
        return F.scaled_dot_product_attention(self.query(x), self.key(x), self.value(x), is_causal=True)
'''},
}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    subs = {name: edited(A, ex, edits) for name, (ex, edits, _) in MISTAKES.items()}
    for name, answers in ALTERNATIVES.items():
        subs[name] = {**solution_answers(A), **{k: v.strip() + "\n" for k, v in answers.items()}}
    return grade_submissions(A, subs, tmp_path_factory.mktemp("l03"))


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
