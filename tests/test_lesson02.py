"""Lesson 02: every catalogued mistake loses exactly its exercise's points and is named;
correct answers written differently get full marks."""

from harness import Catalogue, HiddenOnlyTests, lesson

A = "02-language-models"

TIE = "self.lm_head.weight = self.word_to_embedding.weight  # the same Parameter object"
HEAD_OUT = "return self.lm_head(embeddings)"
FIRST = "nn.Linear(emb_dim, n_hidden),  # (..., C) -> (..., n_hidden)"
SECOND = "nn.Linear(n_hidden, emb_dim),  # (..., n_hidden) -> (..., C)"

# name -> (exercise, edits of the solution, words the feedback must contain)
MISTAKES = {
    "tie-by-clone": ("tied-lm", [(TIE, "self.lm_head.weight = nn.Parameter(self.word_to_embedding.weight.clone())")], "is a copy"),
    "tie-by-copy-values": ("tied-lm", [(TIE, "self.lm_head.weight.data.copy_(self.word_to_embedding.weight.data)")], "is a copy"),
    "tie-by-data": ("tied-lm", [(TIE, "self.lm_head.weight.data = self.word_to_embedding.weight.data")], "storage (.data)"),
    "tie-forgotten": ("tied-lm", [(TIE, "pass")], "nothing was tied"),
    "tie-ignores-flag": ("tied-lm", [("if tie_weights:", "if True:")], "still ties the weights"),
    "lm-returns-softmax": ("tied-lm", [(HEAD_OUT, "return torch.softmax(self.lm_head(embeddings), dim=-1)")], "probabilities"),
    "lm-head-is-embedding-matrix": (
        "tied-lm",
        [(HEAD_OUT, "return embeddings @ self.word_to_embedding.weight.T")],
        "tie_weights=False has no effect",
    ),
    "lm-returns-embeddings": ("tied-lm", [(HEAD_OUT, "return embeddings")], "without applying lm_head"),
    "ce-no-max-subtraction": (
        "cross-entropy",
        [("shifted = rows - rows.max(dim=-1, keepdim=True).values", "shifted = rows")],
        "Subtract each row's maximum",
    ),
    "ce-naive-softmax": (
        "cross-entropy",
        [
            ("shifted = rows - rows.max(dim=-1, keepdim=True).values", "probs = rows.exp() / rows.exp().sum(dim=-1, keepdim=True)"),
            ("log_probs = shifted - shifted.exp().sum(dim=-1, keepdim=True).log()", "log_probs = probs.log()"),
        ],
        "exp overflows",
    ),
    "ce-one-max-for-all": ("cross-entropy", [("rows.max(dim=-1, keepdim=True).values", "rows.max()")], "single maximum"),
    "ce-sum-not-mean": ("cross-entropy", [("return -picked.mean()", "return -picked.sum()")], "summed"),
    "ce-sign": ("cross-entropy", [("return -picked.mean()", "return picked.mean()")], "sign is wrong"),
    "ce-no-flatten": (
        "cross-entropy",
        [("rows = logits.reshape(-1, V)", "rows = logits"), ("wanted = targets.reshape(-1)", "wanted = targets")],
        "flatten first",
    ),
    "ce-item": ("cross-entropy", [("return -picked.mean()", "return -picked.mean().item()")], "Python float"),
    "ce-per-position": ("cross-entropy", [("return -picked.mean()", "return -picked.reshape(targets.shape)")], "one loss per position"),
    "ce-softmax-over-positions": (
        "cross-entropy",
        [("max(dim=-1, keepdim=True)", "max(dim=0, keepdim=True)"), ("sum(dim=-1, keepdim=True)", "sum(dim=0, keepdim=True)")],
        "over the positions",
    ),
    "mlp-no-relu": ("mlp", [("            nn.ReLU(),\n", "")], "ReLU between the two linear layers is missing"),
    "mlp-sizes-swapped": (
        "mlp",
        [(FIRST, "nn.Linear(n_hidden, emb_dim),"), (SECOND, "nn.Linear(emb_dim, n_hidden),")],
        "sizes are swapped",
    ),
    "mlp-gelu": ("mlp", [("nn.ReLU()", "nn.GELU()")], "GELU"),
    "mlp-relu-at-the-end": ("mlp", [(SECOND, SECOND + "\n            nn.ReLU(),")], "ReLU after the last layer"),
    "mlp-residual": ("mlp", [("return self.model(x)", "return x + self.model(x)")], "residual"),
    "mlp-no-bias": (
        "mlp",
        [(FIRST, "nn.Linear(emb_dim, n_hidden, bias=False),"), (SECOND, "nn.Linear(n_hidden, emb_dim, bias=False),")],
        "no bias",
    ),
    "mlp-hidden-is-emb-dim": (
        "mlp",
        [(FIRST, "nn.Linear(emb_dim, emb_dim),"), (SECOND, "nn.Linear(emb_dim, emb_dim),")],
        "instead of n_hidden",
    ),
    "mlp-named-layers": (
        "mlp",
        [
            ("self.model = nn.Sequential(\n", "self.fc1, self.act, self.fc2 = (\n"),
            ("return self.model(x)", "return self.fc2(self.act(self.fc1(x)))"),
        ],
        "store the layers in self.model",
    ),
}

# mistakes only the hidden tests catch (other shapes): they lose exactly the hidden test's points
HIDDEN_ONLY = {
    "lm-assumes-a-batch": (
        "tied-lm",
        [("embeddings = self.word_to_embedding(input_ids)", "B, T = input_ids.shape\n        embeddings = self.word_to_embedding(input_ids)")],
        "raised ValueError",
    ),
    "ce-only-two-or-three-dims": (
        "cross-entropy",
        [
            ("rows = logits.reshape(-1, V)", "rows = logits.flatten(0, 1) if logits.ndim == 3 else logits"),
            ("wanted = targets.reshape(-1)", "wanted = targets.flatten() if targets.ndim == 2 else targets"),
        ],
        "flatten first",
    ),
    "mlp-assumes-a-batch": (
        "mlp",
        [("return self.model(x)", "B, T, C = x.shape\n        return self.model(x.reshape(B * T, C)).reshape(B, T, C)")],
        "raised ValueError",
    ),
}

ALTERNATIVES = {
    "tie-the-other-way-and-f-linear": {"tied-lm": '''
class BareBonesLM(nn.Module):
    def __init__(self, n_vocab, emb_dim, tie_weights=True):
        super().__init__()
        self.word_to_embedding = nn.Embedding(n_vocab, emb_dim)
        self.lm_head = nn.Linear(emb_dim, n_vocab, bias=False)
        if tie_weights:
            self.word_to_embedding.weight = self.lm_head.weight  # also one Parameter, two names

    def forward(self, input_ids):
        return F.linear(self.word_to_embedding(input_ids), self.lm_head.weight)
'''},
    "tie-with-register-parameter": {"tied-lm": '''
class BareBonesLM(nn.Module):
    def __init__(self, n_vocab, emb_dim, tie_weights=True):
        super().__init__()
        self.word_to_embedding = nn.Embedding(n_vocab, emb_dim)
        self.lm_head = nn.Linear(emb_dim, n_vocab, bias=False)
        if tie_weights:
            self.lm_head.register_parameter("weight", self.word_to_embedding.weight)

    def forward(self, input_ids):
        x = self.word_to_embedding(input_ids)
        x = self.lm_head(x)
        return x
'''},
    "ce-logsumexp-gather": {"cross-entropy": '''
def cross_entropy(logits, targets):
    lse = torch.logsumexp(logits, dim=-1)  # (...)
    target_logit = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1)  # (...)
    return (lse - target_logit).mean()
'''},
    "ce-one-hot-detached-max": {"cross-entropy": '''
def cross_entropy(logits, targets):
    m = logits.amax(dim=-1, keepdim=True).detach()  # a constant shift: no gradient needed
    log_probs = logits - m - torch.log(torch.exp(logits - m).sum(dim=-1, keepdim=True))
    one_hot = F.one_hot(targets, logits.shape[-1]).to(logits.dtype)
    return -(log_probs * one_hot).sum(dim=-1).mean()
'''},
    "mlp-explicit-forward": {"mlp": '''
class MLP(nn.Module):
    def __init__(self, emb_dim, n_hidden):
        super().__init__()
        layers = [nn.Linear(emb_dim, n_hidden), nn.ReLU(inplace=True), nn.Linear(n_hidden, emb_dim)]
        self.model = nn.Sequential(*layers)

    def forward(self, x):
        first, _, second = self.model
        return second(F.relu(first(x)))
'''},
    "mlp-ordered-dict": {"mlp": '''
from collections import OrderedDict


class MLP(nn.Module):
    def __init__(self, emb_dim, n_hidden):
        super().__init__()
        self.model = nn.Sequential(OrderedDict([
            ("0", nn.Linear(emb_dim, n_hidden)),
            ("1", nn.ReLU()),
            ("2", nn.Linear(n_hidden, emb_dim)),
        ]))

    def forward(self, x):
        return self.model(x)
'''},
}


def test_catalogue_covers_every_exercise():
    for exercise in lesson(A).exercises:
        assert sum(ex == exercise for ex, _, _ in MISTAKES.values()) >= 3, exercise
        assert any(exercise in alt for alt in ALTERNATIVES.values()), exercise


class TestCatalogue(HiddenOnlyTests):
    catalogue = Catalogue(A, MISTAKES, ALTERNATIVES, hidden_only=HIDDEN_ONLY)
