"""`grade --shard i/N` and `merge`: N runs, each on a share of the class, merged into exactly the
files one run writes; and every way a merge must refuse."""

import hashlib
import json
import shutil

import pytest
from harness import ROOT

from autograder.cli import main
from autograder.course import CourseError
from autograder.demo import build_demo_class
from autograder.run_folder import CACHE, JOB_COLUMNS, JOBS, MANIFEST, parse_shard, shard_of

# files that record when and where a run happened (the only ones allowed to differ)
TIMED = {JOBS}


def report_digest(folder):
    """sha256 of every file a run writes, except its cache and its timings."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and CACHE not in p.relative_to(folder).parts and p.name not in TIMED
    }


def cached_results(folder):
    """The cached results without their run times: (file name, key, result)."""
    found = {}
    for path in sorted((folder / CACHE).glob("*.json")):
        data = json.loads(path.read_text())
        data["result"].pop("wall_s")
        found[path.name] = data
    return found


def small_class(tmp_path, keep):
    submitted = build_demo_class(ROOT, tmp_path / "submitted")
    for student in list(submitted.iterdir()):
        if student.name not in keep:
            shutil.rmtree(student)
    return submitted


def one_line_error(capsys, argv, *words):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0, err
    for word in words:
        assert word in err, err
    return err


# --- the split ----------------------------------------------------------------------------------


def test_the_split_is_a_stable_hash_of_the_student_id():
    # fixed values: the split must never change silently (shards of one class graded by two
    # versions would overlap); the fingerprint refuses such a merge too
    assert [shard_of(s, 3) for s in ["ada-correct", "cleo-sqrt-emb-dim", "fay-softmax-dim"]] == [0, 1, 2]
    assert [shard_of(s, 4) for s in ["cleo-sqrt-emb-dim", "ben-blank", "ada-correct", "fay-softmax-dim"]] == [0, 1, 2, 3]
    roster = [f"student-{n:03d}" for n in range(200)]
    before = {s: shard_of(s, 8) for s in roster}
    grown = roster[:100] + ["a-late-enrolment", "zz-another"] + roster[100:]
    assert all(shard_of(s, 8) == before[s] for s in roster)  # adding students moves nobody
    assert {shard_of(s, 8) for s in grown} == set(range(8))
    sizes = [sum(1 for s in roster if before[s] == i) for i in range(8)]
    assert min(sizes) >= 12 and max(sizes) <= 40, sizes  # roughly even for a real class


@pytest.mark.parametrize("text,expected", [("0/1", (0, 1)), ("3/8", (3, 8)), (" 7 / 8 ", (7, 8))])
def test_shard_takes_i_of_n(text, expected):
    assert parse_shard(text) == expected


@pytest.mark.parametrize("text", ["8/8", "1/0", "-1/4", "1", "a/b", "", "1/2/3"])
def test_shard_refuses_what_is_not_i_of_n(text):
    with pytest.raises(CourseError, match="i/N"):
        parse_shard(text)


# --- merging --------------------------------------------------------------------------------------


@pytest.mark.slow
def test_merged_shards_equal_one_run_and_every_bad_merge_is_refused(tmp_path, capsys, monkeypatch):
    """No student code runs here (an unreadable notebook and a student who handed nothing in),
    so this is quick; two of the three shards are empty, which a merge must handle too."""
    submitted = small_class(tmp_path, {"max-not-a-notebook", "noa-nothing-submitted"})
    for name, text in [("timestamp.txt", "2026-01-01 12:00:00.000000 UTC"), ("submission_secret.txt", "s3cr3t")]:
        (submitted / "max-not-a-notebook" / "03-self-attention" / name).write_text(text)  # as nbgrader collect leaves them
    common = ["--assignment", "01-tokens-and-embeddings", "--assignment", "03-self-attention", "--sandbox", "none",
              "--cell-timeout", "60", "--timeout", "600"]  # the same limits as the shards (theirs are fixed)
    assert main(["grade", str(submitted), "--out", str(tmp_path / "one"), *common]) == 0
    shards = [tmp_path / f"graded-{i}" for i in range(3)]
    for i, folder in enumerate(shards):
        assert main(["grade", str(submitted), "--out", str(folder), "--shard", f"{i}/3", *common]) == 0
    manifests = [json.loads((f / MANIFEST).read_text()) for f in shards]
    assert [m["shard"]["index"] for m in manifests] == [0, 1, 2]
    assert [len(m["students"]) for m in manifests] == [0, 0, 2]
    written = {}

    def gradebook(db_url, root, results):  # the real one takes seconds; test_grading covers it
        written[db_url] = sorted((r.student, r.assignment, r.score) for r in results)
        return len(results)

    monkeypatch.setattr("autograder.gradebook.write_gradebook", gradebook)
    assert main(["merge", *map(str, shards), "--out", str(tmp_path / "merged"), "--gradebook", "sqlite:///gb.db"]) == 0
    assert written["sqlite:///gb.db"] == [(s, a, 0.0) for s in ["max-not-a-notebook", "noa-nothing-submitted"]
                                          for a in ["01-tokens-and-embeddings", "03-self-attention"]]
    capsys.readouterr()
    one, merged = report_digest(tmp_path / "one"), report_digest(tmp_path / "merged")
    assert {"grades.csv", "totals.csv", "pass_rates.csv", "needs_attention.csv", "scores.png", MANIFEST,
            "wide_01-tokens-and-embeddings.csv", "wide_03-self-attention.csv",
            "feedback/max-not-a-notebook.html", "feedback/noa-nothing-submitted.html",
            "misconceptions.csv", "misconceptions.png", "misconceptions.html"} <= set(one)
    assert merged == one
    assert cached_results(tmp_path / "merged") == cached_results(tmp_path / "one")

    # a run cut short has no manifest: it cannot be merged
    (shards[1] / MANIFEST).rename(shards[1] / "kept.json")
    one_line_error(capsys, ["merge", *map(str, shards), "--out", str(tmp_path / "m")], "no grading.json", "graded-1")
    (shards[1] / "kept.json").rename(shards[1] / MANIFEST)
    out = ["--out", str(tmp_path / "m")]
    one_line_error(capsys, ["merge", str(shards[0]), str(shards[2]), *out], "missing shard 1/3")
    one_line_error(capsys, ["merge", str(shards[0]), str(shards[0]), str(shards[2]), *out], "given twice")
    one_line_error(capsys, ["merge", str(tmp_path / "one"), *out], "unsharded")

    def variant(name, change):
        copy = tmp_path / name
        shutil.copytree(shards[1], copy)
        data = json.loads((copy / MANIFEST).read_text())
        change(data)
        (copy / MANIFEST).write_text(json.dumps(data))
        return str(copy)

    other_course = variant("other-course", lambda d: d.update(course_fingerprint="0" * 64))
    one_line_error(capsys, ["merge", str(shards[0]), other_course, str(shards[2]), *out], "different course versions")
    overlap = variant("overlap", lambda d: d.update(students=["max-not-a-notebook"]))
    one_line_error(capsys, ["merge", str(shards[0]), overlap, str(shards[2]), *out], "max-not-a-notebook", "two shards")
    other_split = variant("other-split", lambda d: d["shard"].update(count=4))
    one_line_error(capsys, ["merge", str(shards[0]), other_split, str(shards[2]), *out], "different numbers")
    # a shard graded with other limits: a real run, not an edited manifest
    slower = tmp_path / "slower"
    assert main(["grade", str(submitted), "--out", str(slower), "--shard", "1/3", *common, "--timeout", "900"]) == 0
    capsys.readouterr()
    one_line_error(capsys, ["merge", str(shards[0]), str(slower), str(shards[2]), *out], "different limits")
    assert not (tmp_path / "m" / "grades.csv").exists()  # nothing written by a refused merge

    one_line_error(capsys, ["grade", str(submitted), "--out", str(tmp_path / "x"), "--shard", "3/3"], "i/N")
    one_line_error(capsys, ["grade", str(submitted), "--out", str(tmp_path / "x"), "--shard", "0/3",
                            "--gradebook", "sqlite:///x.db"], "merge")
    one_line_error(capsys, ["merge", str(shards[0]), str(shards[1]), str(shards[2]), "--out", str(shards[0])], "one of the shards")


@pytest.mark.slow
def test_sharded_grading_of_a_small_class_merges_into_the_bytes_of_one_run(tmp_path, capsys):
    """Real notebooks (correct, blank, one that raises, one that loops forever, unreadable, absent)
    graded once, and again in three shards; the merge writes the same bytes."""
    keep = {"ada-correct", "ben-blank", "lea-raises", "kai-infinite-loop", "max-not-a-notebook", "noa-nothing-submitted"}
    submitted = small_class(tmp_path, keep)
    common = ["--assignment", "03-self-attention", "--jobs", "2", "--cell-timeout", "3", "--timeout", "60"]
    assert main(["grade", str(submitted), "--out", str(tmp_path / "one"), *common]) == 0
    shards = [tmp_path / f"graded-{i}" for i in range(3)]
    for i, folder in enumerate(shards):
        assert main(["grade", str(submitted), "--out", str(folder), "--shard", f"{i}/3", *common]) == 0
        assert 0 < len(json.loads((folder / MANIFEST).read_text())["students"]) < len(keep)
    assert main(["merge", *map(str, shards), "--out", str(tmp_path / "merged")]) == 0
    capsys.readouterr()
    one, merged = report_digest(tmp_path / "one"), report_digest(tmp_path / "merged")
    assert len(one) >= len(keep) + 6
    assert merged == one, sorted(k for k in one if one[k] != merged.get(k))
    assert cached_results(tmp_path / "merged") == cached_results(tmp_path / "one")

    rows = [row.split(",") for row in (tmp_path / "merged" / JOBS).read_text().splitlines()]
    assert rows[0] == JOB_COLUMNS and sorted(row[0] for row in rows[1:]) == sorted(keep)
    assert all(row[3] <= row[4] <= row[5] and float(row[6]) >= 0 for row in rows[1:])


def test_merge_has_help(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["merge", "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "usage: transformer-course merge" in out and "--gradebook" in out
    with pytest.raises(SystemExit):
        main(["grade", "--help"])
    out = capsys.readouterr().out
    assert "--shard" in out and "--executor" in out
