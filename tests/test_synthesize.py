"""Synthetic task generation (SPEC §2) on tiny seed families built here.

The end-to-end tests run the real stage (`stages.synthesize`) through the real enclave and
bwrap sandbox, twice with the same params, on two families (one held out): output bytes are
identical, every accepted task is well-formed and curated, every refused candidate has its
reason, and the held-out family never reaches the train split.
"""
from __future__ import annotations

import hashlib
import random
import re
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from rlvr.artifacts import schemas
from rlvr.artifacts.io import read_table
from rlvr.tasks.patches import apply_patch
from rlvr.tasks.pool import load_tasks
from rlvr.authoring.synth.candidates import Candidate, combined_candidates, single_candidates
from rlvr.authoring.synth.instructions import Failure, describe, write_instruction
from rlvr.authoring.synth.public_tests import materialise, prune_module, select_public
from rlvr.authoring.synth.seeds import discover, load_family
from taskkit import write_family

# A function no test calls (its mutants are equivalent) and a table validated at import
# time (flipping that check makes the package unimportable: an invalid mutant).
EXTRA = '''

def untested(x):
    return x * 3 + 1


def _validate(table):
    for key in table:
        if key < 0:
            raise ValueError("negative key")
    return table


TABLE = _validate({1: "a", 2: "b"})
'''


def _family(tmp_path, name="minikit", package="minikit"):
    write_family(tmp_path / "seeds", name, package=package, extra=EXTRA)
    return load_family(tmp_path / "seeds" / name)


# ---- candidates ---------------------------------------------------------------------------
def test_single_candidates_are_deterministic_budgeted_and_spread(tmp_path):
    fam = _family(tmp_path)
    a = single_candidates(fam, per_operator=3, seed=7)
    b = single_candidates(fam, per_operator=3, seed=7)
    c = single_candidates(fam, per_operator=3, seed=8)
    assert [x.task_id(fam) for x in a] == [x.task_id(fam) for x in b]
    assert [x.task_id(fam) for x in a] != [x.task_id(fam) for x in c]
    by_op: dict[str, list[Candidate]] = {}
    for cand in a:
        by_op.setdefault(cand.operator, []).append(cand)
    assert all(len(v) <= 3 for v in by_op.values())
    # round-robin: three wrong-variable bugs come from three different functions
    assert len({x.parts[0].function for x in by_op["wrong_variable"]}) == 3
    ids = [x.task_id(fam) for x in a]
    assert len(set(ids)) == len(ids) and all(re.fullmatch(r"syn-minikit-[0-9a-f]{10}", i)
                                             for i in ids)


def test_task_id_ignores_sampling_seed_but_not_the_bug(tmp_path):
    fam = _family(tmp_path)
    a = {x.task_id(fam): x.params for x in single_candidates(fam, per_operator=50, seed=1)}
    b = {x.task_id(fam): x.params for x in single_candidates(fam, per_operator=50, seed=2)}
    assert set(a) == set(b)  # the budget covers every site: same bugs, same ids
    assert a == b


def test_candidate_state_changes_only_the_mutated_file(tmp_path):
    fam = _family(tmp_path)
    for cand in single_candidates(fam, per_operator=2, seed=0):
        state = cand.state(fam)
        changed = [p for p in state if state[p] != fam.repo_files[p]]
        assert changed == cand.files
        prov = cand.provenance(fam, seed=0)
        assert prov["family"] == "minikit" and prov["operator"] == cand.operator
        assert prov["file"] == "minikit/core.py" and prov["seed_repo_hash"] == fam.content_hash


def test_combined_candidates_pair_two_proven_bugs(tmp_path):
    fam = _family(tmp_path)
    singles = single_candidates(fam, per_operator=4, seed=0)
    combos = combined_candidates(fam, singles, budget=6, seed=0)
    again = combined_candidates(fam, singles, budget=6, seed=0)
    assert [c.task_id(fam) for c in combos] == [c.task_id(fam) for c in again]
    assert len(combos) == 6
    scopes = {c.params["scope"] for c in combos}
    assert scopes == {"same_function", "two_functions"}
    keys = {s.parts[0].key for s in singles}
    for combo in combos:
        assert combo.operator == "combined" and len(combo.parts) == 2
        assert all(p.key in keys for p in combo.parts)
        state = combo.state(fam)
        assert combo.invalid_reason(fam, state) is None
        fixed = apply_patch(state, _patch(state, fam.repo_files))
        assert fixed == fam.repo_files


def _patch(before, after):
    from rlvr.tasks.patches import make_patch

    return make_patch(before, after)


def test_discover_skips_unusable_families_and_refuses_unknown_names(tmp_path):
    _family(tmp_path)
    (tmp_path / "seeds" / "empty" / "tests").mkdir(parents=True)
    families, skipped = discover(tmp_path / "seeds")
    assert [f.name for f in families] == ["minikit"] and skipped == {"empty": "no library module"}
    from rlvr.errors import TaskFormatError

    with pytest.raises(TaskFormatError, match="nope: seed family not found"):
        discover(tmp_path / "seeds", ["nope"])


# ---- public tests -------------------------------------------------------------------------
CLASS_TESTS = '''\
import pytest

from minikit.core import clamp

LIMIT = 10


def helper():
    return LIMIT


@pytest.fixture
def low():
    return 0


def test_a(low):
    assert clamp(-1, low, helper()) == 0


@pytest.mark.parametrize("x", [1, 2])
def test_b(x):
    assert clamp(x, 0, LIMIT) == x


class TestGroup:
    def test_c(self):
        assert clamp(99, 0, LIMIT) == LIMIT

    def test_d(self):
        assert clamp(5, 0, LIMIT) == 5


class TestOther:
    def test_e(self):
        assert True
'''


def test_prune_keeps_selected_tests_helpers_and_imports_verbatim():
    out = prune_module(CLASS_TESTS, {("test_b",), ("TestGroup", "test_d")})
    compile(out, "t.py", "exec")
    assert "def helper" in out and "def low" in out and "LIMIT = 10" in out
    assert "import pytest" in out and '@pytest.mark.parametrize("x", [1, 2])' in out
    assert "def test_b" in out and "def test_d" in out and "class TestGroup" in out
    for gone in ("def test_a", "def test_c", "class TestOther", "def test_e"):
        assert gone not in out
    assert "\n\n\n\n" not in out


def test_materialise_maps_hidden_ids_and_copies_support_files():
    hidden = {"test_core.py": CLASS_TESTS, "conftest.py": "X = 1\n", "data.txt": "d\n"}
    files, mapping = materialise(hidden, ["test_core.py::test_b[1]",
                                          "test_core.py::TestGroup::test_c"])
    assert set(files) == {"tests/test_core.py", "tests/conftest.py", "tests/data.txt"}
    assert mapping == {"test_core.py::test_b[1]": "tests/test_core.py::test_b[1]",
                       "test_core.py::TestGroup::test_c": "tests/test_core.py::TestGroup::test_c"}
    assert "def test_a" not in files["tests/test_core.py"]


def test_select_public_shows_each_bug_and_nearby_passing_tests():
    f2p = ["a.py::t1", "a.py::t2", "b.py::t3"]
    p2p = ["a.py::p1", "c.py::p2", "c.py::p3"]
    rng = random.Random(0)
    got = select_public(f2p, p2p, n_fail=1, n_pass=1, rng=rng,
                        groups=[["a.py::t1", "a.py::t2"], ["b.py::t3"]])
    assert "b.py::t3" in got and len([t for t in got if t in f2p]) == 2
    assert [t for t in got if t in p2p] == ["a.py::p1"]  # same module as a failing one
    assert select_public(f2p, p2p, n_fail=1, n_pass=0, rng=random.Random(1))[0] in f2p


# ---- instructions -------------------------------------------------------------------------
def test_describe_reads_observed_and_expected_from_the_comparison():
    title, body = describe(Failure("tests/t.py::test_x",
                                   "assert 'hello world' == 'hello-world'\n  - hello-world",
                                   'assert slugify("Hello, World!") == "hello-world"'))
    assert title == "`slugify` returns a wrong result"
    assert "Observed: 'hello world'" in body and "Expected: 'hello-world'" in body
    assert 'assert slugify("Hello, World!") == "hello-world"' in body


def test_describe_exception_and_missing_raise():
    title, body = describe(Failure("tests/t.py::test_y", "TypeError: bad operand",
                                   "assert total([1, 2]) == 3"))
    assert title == "`total` raises TypeError" and "Observed: TypeError: bad operand" in body
    title, body = describe(Failure("tests/t.py::test_z", "Failed: DID NOT RAISE ValueError",
                                   "with pytest.raises(ValueError):"))
    assert title.endswith("does not raise ValueError") and "Observed: no exception" in body
    title, body = describe(Failure("tests/t.py::test_w",
                                   "assert 'v' is None\n +  where 'v' = get('k')\n"
                                   " +    where get = <Cache object at 0x7f00aa>.get",
                                   'assert c.get("k") is None'))
    assert title == "`get` returns a wrong result" and "+  where 'v' = get('k')" in body
    assert "0x7f00aa" not in body  # addresses differ run to run: normalised away


def test_instruction_falls_back_when_a_test_line_equals_the_fix():
    from rlvr.authoring.curation import leaked_lines

    patch = ("--- a/m.py\n+++ b/m.py\n@@ -1 +1 @@\n-    return total(values) == 3\n"
             "+    assert total([1, 2]) == 3\n")
    fail = Failure("tests/t.py::test_y", "assert 4 == 3", "assert total([1, 2]) == 3")
    leak = lambda text, p: leaked_lines(text, p, 8)  # noqa: E731
    text = write_instruction("minikit", [fail], ["tests/t.py::test_y"], patch, leak_check=leak)
    assert not leak(text, patch) and "tests/t.py::test_y" in text
    clean = write_instruction("minikit", [fail], ["tests/t.py::test_y"], "", leak_check=leak)
    assert "Observed: 4" in clean and "Expected: 3" in clean


# ---- the stage, end to end ----------------------------------------------------------------
SYNTH = {"seed": 3, "per_operator": 2, "combined": 2,
         "operators": ["comparison_flip", "boundary_shift", "wrong_return", "remove_statement"],
         "public": {"fail_to_pass": 1, "pass_to_pass": 2}, "suite_timeout_s": 10.0}


def _params(path: Path, **synth) -> Path:
    path.write_text(yaml.safe_dump({
        "sandbox": {"backend": "bwrap", "workers": 2},
        "split": {"heldout_families": ["heldkit"], "regression_families": []},
        "curate": {"seed": 0, "reference_runs": 2, "max_mutants": 2},
        "synthesize": {**SYNTH, **synth},
    }))
    return path


def _run_stage(root: Path, params: Path) -> dict[str, Path]:
    from stages.synthesize import main

    out = {"tasks": root / "tasks.parquet", "metrics": root / "metrics.json",
           "plots": root / "yield.csv", "rejections": root / "tasks.rejections.parquet",
           "png": root / "yield.png"}
    main(["--params", str(params), "--seeds", str(root.parent / "seeds"), "--out",
          str(out["tasks"]), "--metrics", str(out["metrics"]), "--plots", str(out["plots"]),
          "--png", str(out["png"])])
    return out


@pytest.fixture(scope="module")
def stage_runs(tmp_path_factory):
    """The stage run twice, same params, on minikit (train) and heldkit (held out)."""
    base = tmp_path_factory.mktemp("synth")
    write_family(base / "seeds", "minikit", package="minikit", extra=EXTRA)
    write_family(base / "seeds", "heldkit", package="heldkit", extra=EXTRA)
    params = _params(base / "params.yaml")
    runs = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RLVR_TRACKING", "off")
        mp.setenv("RLVR_PROGRESS", "0")
        for name in ("one", "two"):
            (base / name).mkdir()
            runs.append(_run_stage(base / name, params))
    return base, runs


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_same_seed_and_inputs_give_byte_identical_outputs(stage_runs):
    _, (one, two) = stage_runs
    for key in ("tasks", "rejections", "plots", "png"):
        assert _sha(one[key]) == _sha(two[key]), key


def test_worker_count_does_not_change_outputs(stage_runs, tmp_path):
    """Families are prepared and tasks curated in parallel threads with 2 workers; one
    worker must give the same bytes (results are ordered by family / task id, never by
    completion)."""
    base, (one, _) = stage_runs
    params = tmp_path / "params.yaml"
    params.write_text((base / "params.yaml").read_text().replace("workers: 2", "workers: 1"))
    assert "workers: 1" in params.read_text()
    (base / "serial").mkdir()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RLVR_TRACKING", "off")
        mp.setenv("RLVR_PROGRESS", "0")
        serial = _run_stage(base / "serial", params)
    for key in ("tasks", "rejections", "plots"):
        assert _sha(one[key]) == _sha(serial[key]), key


def test_accepted_tasks_are_complete_and_curated(stage_runs):
    base, (one, _) = stage_runs
    tasks = load_tasks(one["tasks"])
    assert len(tasks) >= 8
    seeds = {f: load_family(base / "seeds" / f) for f in ("minikit", "heldkit")}
    for t in tasks:
        fam = seeds[t.family]
        assert re.fullmatch(rf"syn-{t.family}-[0-9a-f]{{10}}", t.task_id)
        assert t.source == "synthetic" and t.fail_to_pass and t.pass_to_pass
        assert t.hidden_tests == fam.tests
        # the reference restores the seed sources byte for byte
        fixed = apply_patch(t.repo_files, t.reference_patch)
        assert {p: c for p, c in fixed.items() if p not in t.public_tests} == fam.repo_files
        # public tests are in the workspace, under tests/, and include a failing test
        assert t.public_tests and all(p.startswith("tests/") and p in t.repo_files
                                      for p in t.public_tests)
        shown = {tid.split("::")[1] for tid in t.fail_to_pass}
        assert any(re.search(rf"def {name.split('[')[0]}\b", t.repo_files[p])
                   for name in shown for p in t.public_tests)
        # the instruction reports the failure and does not contain the fix
        added = [ln[1:].strip() for ln in t.reference_patch.splitlines()
                 if ln.startswith("+") and not ln.startswith("+++") and len(ln.strip()) > 8]
        assert not any(a in t.instruction for a in added)
        assert "fails" in t.instruction
        prov = t.provenance
        for key in ("family", "file", "function", "operator", "params", "seed",
                    "seed_repo_hash"):
            assert key in prov
        assert prov["seed_repo_hash"] == fam.content_hash
        assert t.checks["mutants"] >= 1 and t.checks["fail_to_pass"] == len(t.fail_to_pass)
    assert {t.provenance["operator"] for t in tasks} >= {"comparison_flip", "wrong_return"}


def test_rejections_have_reasons_and_cover_every_candidate(stage_runs):
    import json

    _, (one, _) = stage_runs
    rejections = read_table(one["rejections"], schemas.REJECTIONS,
                            contract="rejections").to_pylist()
    reasons = {r["reason"] for r in rejections}
    assert "equivalent_mutant" in reasons or "invalid_mutant" in reasons
    metrics = json.loads(one["metrics"].read_text())
    assert metrics["candidates"] == metrics["accepted"] + metrics["rejected"]
    assert metrics["rejected"] == len(rejections)
    assert metrics["probe_unobserved"] == 0  # every instruction reports an observed failure
    for op, row in metrics["by_operator"].items():
        rejected = sum(v for k, v in row.items() if k.startswith("rejected_"))
        assert row["candidates"] == row["accepted"] + rejected, op
    assert set(metrics["by_family"]) == {"minikit", "heldkit"}
    header = one["plots"].read_text().splitlines()[0].split(",")
    assert header[:5] == ["family", "operator", "candidates", "accepted", "yield"]


def test_untested_and_import_breaking_mutants_are_refused_with_their_reason(tmp_path):
    """Targeted: every candidate in `untested` is equivalent; negating the import-time
    check in `_validate` breaks the import."""
    from rlvr.enclave import Enclave
    from rlvr.sandbox import get_sandbox
    from rlvr.authoring.curation import CurationParams
    from rlvr.authoring.synth.candidates import Part
    from rlvr.tasks.operators import OPERATORS, FunctionContext
    from rlvr.authoring.synth.pipeline import SynthParams, Synthesizer

    fam = _family(tmp_path)
    source = fam.repo_files["minikit/core.py"]
    flip = OPERATORS["negate_condition"](FunctionContext(source, "_validate"))[0]
    ret = OPERATORS["wrong_return"](FunctionContext(source, "untested"))[0]
    core = "minikit/core.py"
    cands = [Candidate("minikit", "negate_condition", (Part(core, "_validate", flip),)),
             Candidate("minikit", "wrong_return", (Part(core, "untested", ret),))]
    with Enclave(backend="bwrap", workers=1) as enclave:
        synth = Synthesizer(SynthParams(), CurationParams(), enclave, get_sandbox("bwrap"))
        passing = synth.seed_outcomes(fam)
        evs = synth.evaluate(fam, cands, passing, {})
    assert evs[0].rejection[0] == "invalid_mutant"
    assert evs[1].rejection == ("equivalent_mutant", "no hidden test fails on the mutant")


def test_heldout_family_never_reaches_train(stage_runs):
    _, (one, _) = stage_runs
    tasks = load_tasks(one["tasks"])
    splits = {(t.family, t.split) for t in tasks}
    assert ("heldkit", "train") not in splits and ("heldkit", "heldout") in splits
    assert ("minikit", "train") in splits
    table = pq.read_table(one["tasks"])
    assert table.schema.equals(schemas.TASKS, check_metadata=False)


def test_bad_params_are_named_and_exit_2(tmp_path, capsys):
    from stages.synthesize import main

    (tmp_path / "seeds").mkdir()
    params = _params(tmp_path / "params.yaml", operators=["comparison_flip", "no_such_op"])
    with pytest.raises(SystemExit) as exc:
        main(["--params", str(params), "--seeds", str(tmp_path / "seeds"),
              "--out", str(tmp_path / "t.parquet")])
    assert exc.value.code == 2
    assert "synthesize.operators: unknown operator 'no_such_op'" in capsys.readouterr().err
    assert not (tmp_path / "t.parquet").exists()


def test_yield_table_breaking_its_contract_is_refused_and_nothing_is_written(tmp_path):
    from types import SimpleNamespace

    from rlvr.errors import ArtifactError
    from stages.synthesize import write_outputs

    rows = [{"family": "fam", "operator": "comparison_flip", "candidates": 2, "accepted": 3, "yield": 1.5}]
    result = SimpleNamespace(accepted=[], rejections=[], yield_rows=lambda: rows)
    out, plots = tmp_path / "tasks.parquet", tmp_path / "yield.csv"
    with pytest.raises(ArtifactError, match="synth_yield"):
        write_outputs(result, out, plots)
    assert not out.exists() and not plots.exists()


def test_dedup_rejects_repeats_and_tasks_already_in_the_pool():
    from rlvr.authoring.curation import dedup
    from rlvr.tasks.model import Task

    def task(task_id: str, body: str) -> Task:
        return Task(task_id=task_id, family="fam", instruction="-", repo_files={"pkg/m.py": body},
                    public_tests=(), hidden_tests={"test_m.py": "def test_a():\n    pass\n"},
                    reference_patch="")

    a, a_reformatted, b, c = (task("a", "x = 1\n"), task("a2", "x  =  1  # same\n"),
                              task("b", "x = 2\n"), task("c", "x = 3\n"))
    known = {c.hashes()["content_hash"]: "authored-c"}
    result = dedup([a, b, a_reformatted, c], known)
    assert [t.task_id for t in result.accepted] == ["a", "b"]
    assert [(r.task_id, r.reason) for r in result.rejections] == [("a2", "duplicate"), ("c", "duplicate")]
    assert "authored-c" in result.rejections[1].detail


def test_a_missing_known_pool_is_named_and_exits_2(tmp_path, capsys):
    from stages.synthesize import main

    with pytest.raises(SystemExit) as exc:
        main(["--known", str(tmp_path / "nope.parquet"), "--out", str(tmp_path / "t.parquet"),
              "--metrics", str(tmp_path / "m.json"), "--plots", str(tmp_path / "p.csv")])
    assert exc.value.code == 2
    assert "nope.parquet" in capsys.readouterr().err
    assert not (tmp_path / "t.parquet").exists()
