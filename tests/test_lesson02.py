"""Lesson 02: every catalogued mistake loses exactly its exercise's points and is named;
correct answers written differently get full marks."""

from harness import Catalogue, HiddenOnlyTests, lesson

A = "02-language-models"

TIE = "self.lm_head.weight = self.word_to_embedding.weight  # the same Parameter object"
HEAD_OUT = "return self.lm_head(embeddings)"
EMB = "embeddings = self.word_to_embedding(input_ids)"
MAXLINE = "shifted = rows - rows.max(dim=-1, keepdim=True).values"
LSE = "log_probs = shifted - shifted.exp().sum(dim=-1, keepdim=True).log()"
PICK = "picked = log_probs[torch.arange(wanted.shape[0]), wanted]"
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
    "lm-logits-transposed": ("tied-lm", [(HEAD_OUT, "return self.lm_head(embeddings).transpose(-1, -2)")], "permuted to (B, V, T)"),
    "lm-matmul-without-transpose": ("tied-lm", [(HEAD_OUT, "return embeddings @ self.lm_head.weight")], "inputs whose last axis has size 13 (V)"),
    "lm-tie-transposed": (
        "tied-lm",
        [(TIE, "self.lm_head.weight = nn.Parameter(self.word_to_embedding.weight.T)")],
        "with no .T",
    ),
    "lm-cumsum-over-positions": ("tied-lm", [(HEAD_OUT, "return self.lm_head(embeddings.cumsum(dim=-2))")], "the input of lm_head"),
    "lm-last-position-only": ("tied-lm", [(HEAD_OUT, "return self.lm_head(embeddings)[..., -1, :]")], "axis 1 (T (time), size 6) is missing"),
    "lm-detached-embeddings": ("tied-lm", [(EMB, EMB + ".detach()")], "the gradient must flow"),
    "ce-max-without-keepdim": ("cross-entropy", [(MAXLINE, "shifted = rows - rows.max(dim=-1).values")], "lines two tensors up"),
    "ce-max-over-positions": ("cross-entropy", [(MAXLINE, "shifted = rows - rows.max(dim=0, keepdim=True).values")], "maximum is taken over the positions"),
    "ce-divided-by-V": ("cross-entropy", [("return -picked.mean()", "return -picked.sum() / V")], "by V = 7"),
    "ce-divided-by-B": ("cross-entropy", [("return -picked.mean()", "return -picked.sum() / logits.shape[0]")], "by B = 2"),
    "ce-target-off-by-one": ("cross-entropy", [(PICK, PICK.replace("wanted]", "wanted - 1]"))], "off by one"),
    "ce-float32": ("cross-entropy", [("return -picked.mean()", "return -picked.float().mean()")], "precision was lost"),
    "ce-mean-of-every-class": ("cross-entropy", [("return -picked.mean()", "return -log_probs.mean()")], "not only the target's"),
    "ce-log-sum-added": ("cross-entropy", [(LSE, LSE.replace("shifted - shifted", "shifted + shifted"))], "added instead of subtracted"),
    "ce-in-place": (
        "cross-entropy",
        [("rows = logits.reshape(-1, V)", "logits -= logits.max(dim=-1, keepdim=True).values\n    rows = logits.reshape(-1, V)"),
         (MAXLINE, "shifted = rows")],
        "do not change logits in place",
    ),
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
    "mlp-dropout": ("mlp", [(SECOND, SECOND + "\n            nn.Dropout(0.1),")], "not deterministic"),
    "mlp-leaky-relu": ("mlp", [("nn.ReLU()", "nn.LeakyReLU()")], "LeakyReLU"),
    "mlp-softmax-activation": ("mlp", [("nn.ReLU()", "nn.Softmax(dim=-1)")], "softmax instead of ReLU"),
    "mlp-four-times-wider": (
        "mlp",
        [(FIRST, "nn.Linear(emb_dim, 4 * emb_dim),"), (SECOND, "nn.Linear(4 * emb_dim, emb_dim),")],
        "20 units instead of n_hidden=16",
    ),
    "mlp-flattens": ("mlp", [("return self.model(x)", "return self.model(x.reshape(-1, x.shape[-1]))")], "only the final reshape/view is wrong"),
    "mlp-float32": ("mlp", [("return self.model(x)", "return self.model(x.float())")], "RuntimeError in forward"),
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


# every "must" / "do not" sentence of a task -> the catalogued mistakes that break it
REQUIREMENTS = {
    "cross-entropy": {
        "must stay finite for logits such as 1000": ["ce-no-max-subtraction", "ce-naive-softmax"],
        "for rows of very different sizes": ["ce-one-max-for-all"],
    },
}


class TestCatalogue(HiddenOnlyTests):
    catalogue = Catalogue(A, MISTAKES, ALTERNATIVES, hidden_only=HIDDEN_ONLY, requirements=REQUIREMENTS)
