"""A demo class: one correct student, one who handed in the blank, realistic mistakes, and
submissions that break in every way a grader must survive.

The mistakes are written as edits of the solution's answer cells, so they follow the solution
when it changes (an edit whose text is no longer in the solution raises at once). The test suite
grades the same class and checks every row.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

from autograder.course import RELEASE, cell_source, lessons, nbgrader_meta, without_solution_markers

# student -> (assignment, {answer grade_id: [(old text in the solution, new text), ...]})
# Each mistake lives in one exercise and must cost exactly that exercise's points.
MISTAKES = {
    "03-self-attention": {
        "cleo-sqrt-emb-dim": {"attention-head": [("math.sqrt(self.head_dim)", "math.sqrt(x.shape[-1])")]},
        "dev-inverted-mask": {"causal-mask": [("diagonal=1)", "diagonal=0)"), ("masked_fill(future,", "masked_fill(~future,")]},
        "eli-mask-after-softmax": {
            "attention-head": [
                (
                    'weights = torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1)',
                    "weights = torch.softmax(scores, dim=-1).masked_fill(future, 0.0)",
                )
            ]
        },
        "fay-softmax-dim": {"attention-head": [('float("-inf")), dim=-1)', 'float("-inf")), dim=-2)')]},
        "gus-no-scaling": {"attention-head": [(" / math.sqrt(self.head_dim)", "")]},
        "hana-finite-mask": {"causal-mask": [('float("-inf")', "-1e9")]},
        "ivo-in-place": {"causal-mask": [("return scores.masked_fill(future,", "return scores.masked_fill_(future,")]},
    },
    "09-fast-generation": {
        # the new queries' causal mask starts at key 0: a one-token decode step sees only the first key
        "pia-cache-mask-not-offset": {"cached-attention": [("dtype=torch.bool, device=x.device).tril(diagonal=T_past)",
                                                            "dtype=torch.bool, device=x.device).tril()")]},
        # the batch's mask keeps the causal part only: the left padding is read as context
        "rui-padding-attended": {"batch-mask": [("mask = causal & (real.unsqueeze(1) | itself)",
                                                 "mask = causal.expand(B, T_new, T_total)")]},
    },
    "10-gpt2": {
        # GPT-2's Conv1D stores c_attn as (in, out): split without transposing, it loads silently and computes nonsense
        "quin-c-attn-not-transposed": {"load-gpt2": [("linear.weight.copy_(qkv_weight[k * C : (k + 1) * C])",
                                                      'linear.weight.copy_(state_dict[h + "attn.c_attn.weight"][:, k * C : (k + 1) * C])')]},
    },
}

# student -> what they handed in, for every assignment
SPECIAL = {
    "ada-correct": "solution",
    "ben-blank": "release",
    "kai-infinite-loop": "loop",
    "lea-raises": "raises",
    "max-not-a-notebook": "not-json",
    "noa-nothing-submitted": "absent",
}


def _answer(solution_source: str, edits: list[tuple[str, str]]) -> str:
    text = without_solution_markers(solution_source)
    for old, new in edits:
        if old not in text:
            raise ValueError(f"the demo mistake expects {old!r} in the solution")
        text = text.replace(old, new)
    return text


def _with_answers(release_nb: dict, answers: dict[str, str]) -> dict:
    nb = copy.deepcopy(release_nb)
    for cell in nb["cells"]:
        gid = nbgrader_meta(cell).get("grade_id")
        if gid in answers:
            cell["source"] = answers[gid]
    return nb


def build_demo_class(root: Path, out: Path) -> Path:
    """Write the demo submissions in nbgrader's layout under ``out``; returns ``out``."""
    for lesson in lessons(root):
        release_path = root / RELEASE / lesson.assignment / lesson.filename
        release_nb = json.loads(release_path.read_text(encoding="utf-8"))
        solution = {
            nbgrader_meta(c).get("grade_id"): cell_source(c)
            for c in lesson.notebook["cells"]
            if nbgrader_meta(c).get("solution")
        }
        full = {gid: _answer(src, []) for gid, src in solution.items()}
        students: dict[str, dict | str | None] = {}
        for student, kind in SPECIAL.items():
            if kind == "solution":
                students[student] = _with_answers(release_nb, full)
            elif kind == "release":
                students[student] = release_nb
            elif kind == "loop":
                first = next(iter(full))
                looping = full[first] + "\n\nwhile True:  # never ends\n    pass\n"
                students[student] = _with_answers(release_nb, {**full, first: looping})
            elif kind == "raises":
                first = next(iter(full))
                broken = {**full, first: "raise RuntimeError('my code is broken')\n" + full[first]}
                students[student] = _with_answers(release_nb, broken)
            elif kind == "not-json":
                students[student] = "this is not a notebook\n"
            else:
                students[student] = None
        for mistakes in MISTAKES.values():  # who makes a mistake elsewhere gets this lesson right
            for student in mistakes:
                students[student] = _with_answers(release_nb, full)
        for student, edits in MISTAKES.get(lesson.assignment, {}).items():
            answers = {**full, **{gid: _answer(solution[gid], e) for gid, e in edits.items()}}
            students[student] = _with_answers(release_nb, answers)
        for student, content in students.items():
            if content is None:
                (out / student).mkdir(parents=True, exist_ok=True)
                continue
            target = out / student / lesson.assignment / lesson.filename
            target.parent.mkdir(parents=True, exist_ok=True)
            text = content if isinstance(content, str) else json.dumps(content, indent=1, ensure_ascii=False)
            target.write_text(text, encoding="utf-8")
    return out
