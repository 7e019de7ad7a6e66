"""The real-library corpus as synthesis families (issue 12: "Real-library corpus in the
default pool"): what of an unpacked sdist becomes the task snapshot and the hidden suite, how
a seed run that cannot pass every upstream test grades the rest, probes that see the agent's
run, the `corpus` stage, and curation results that do not depend on the sandbox backend.
"""
from __future__ import annotations

import json
import shutil
import tomllib
from pathlib import Path

import pytest

from rlvr.errors import ConfigError
from rlvr.authoring.corpus import CorpusLockError, Library, load_lock
from rlvr.authoring.synth.corpus_families import corpus_families, corpus_family
from rlvr.authoring.synth.pipeline import graded_family
from rlvr.authoring.synth.seeds import SeedFamily
from rlvr.tasks.model import files_hash

REPO = Path(__file__).resolve().parents[1]
CACHE = REPO / "data" / "real" / ".cache"
needs_corpus = pytest.mark.skipif(not (CACHE / "src" / "inflection-0.5.1").is_dir(),
                                  reason="corpus not fetched (python scripts/fetch_corpus.py)")


def _lib(name="tiny", *, tests=("tiny/tests", "test_top.py"), layout="flat",
         licence=("LICENSE",), deps=()) -> Library:
    return Library(name, "1.0", "MIT", tuple(licence), tuple(tests), layout, tuple(deps), None)


def _tree(root: Path, files: dict[str, str | bytes]) -> Path:
    for rel, content in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        (path.write_bytes if isinstance(content, bytes) else path.write_text)(content)
    return root


SDIST = {
    "LICENSE": "MIT licence text\n",
    "setup.cfg": "[tool:pytest]\naddopts = --cov tiny\n",
    "setup.py": "from setuptools import setup\nsetup()\n",
    "README.rst": "tiny\n",
    "docs/conf.py": "project = 'tiny'\n",
    "tiny/__init__.py": "from tiny.core import double\n",
    "tiny/core.py": "def double(x):\n    return 2 * x\n",
    "tiny/data/table.json": "{}\n",
    "tiny/locale/de.mo": b"\xde\x12\x04\x95\x00\x00",
    "tiny/tests/__init__.py": "",
    "tiny/tests/test_core.py": "from tiny import double\n\ndef test_double():\n    assert double(2) == 4\n",
    "tiny/tests/helpers.py": "X = 1\n",
    "test_top.py": "import tiny\n\ndef test_import():\n    assert tiny.double(1) == 2\n",
    "tiny.egg-info/PKG-INFO": "Name: tiny\n",
}


# ---- what an sdist becomes ---------------------------------------------------------------------
def test_a_flat_sdist_gives_package_sources_config_licence_and_its_suite(tmp_path):
    fam = corpus_family(_lib(deps=("six==1.17.0",)), _tree(tmp_path / "tiny-1.0", SDIST))
    # the snapshot: the package's .py files (no tests, data, binaries), config, licence
    assert sorted(fam.repo_files) == ["LICENSE", "setup.cfg", "tiny/__init__.py", "tiny/core.py"]
    assert fam.modules == ["tiny/__init__.py", "tiny/core.py"] and fam.package == "tiny"
    # the hidden suite: keyed relative to each test path, the root __init__.py left out
    assert sorted(fam.tests) == ["helpers.py", "test_core.py", "test_top.py"]
    assert fam.tests["test_core.py"] == SDIST["tiny/tests/test_core.py"]   # unchanged
    assert fam.dependencies == ("six==1.17.0",)


def test_a_src_layout_names_its_package_below_src(tmp_path):
    files = {"LICENSE": "x\n", "src/tiny/__init__.py": "", "src/tiny/a.py": "A = 1\n",
             "src/tiny/b.py": "B = 1\n", "src/other/__init__.py": "",
             "tests/test_a.py": "def test_a():\n    pass\n"}
    fam = corpus_family(_lib(tests=("tests",), layout="src"), _tree(tmp_path / "s", files))
    assert fam.package == "tiny"          # the package with the most modules
    assert "src/other/__init__.py" in fam.repo_files and list(fam.tests) == ["test_a.py"]


def test_malformed_libraries_are_named_errors(tmp_path):
    root = _tree(tmp_path / "tiny-1.0", SDIST)
    with pytest.raises(CorpusLockError, match="library 'tiny': .*not found .*fetch_corpus"):
        corpus_family(_lib(), tmp_path / "absent")
    with pytest.raises(CorpusLockError, match="library 'tiny': licence file COPYING is not in"):
        corpus_family(_lib(licence=("COPYING",)), root)
    _tree(root, {"tests/test_top.py": "def test_other():\n    pass\n"})
    with pytest.raises(CorpusLockError, match="test file test_top.py is in two of its test paths"):
        corpus_family(_lib(tests=("test_top.py", "tests")), root)
    bare = _tree(tmp_path / "bare", {"LICENSE": "x\n", "mod.py": "X = 1\n"})
    with pytest.raises(CorpusLockError, match="no import package found"):
        corpus_family(_lib(tests=()), bare)


def test_an_unknown_library_in_params_is_named():
    lock = load_lock()
    with pytest.raises(ConfigError, match="synthesize.corpus.libraries: unknown library "
                                          "'nope'"):
        corpus_families(lock, CACHE, ["nope"])


def test_dependencies_enter_the_family_hash_only_when_declared():
    fam = SeedFamily("f", {"f/a.py": "A = 1\n"}, {"test_a.py": "def test_a():\n    pass\n"})
    # the seed families' hash (and so every synthetic task id) is what it always was
    assert fam.content_hash == files_hash({"f/a.py": "A = 1\n",
                                           "tests/test_a.py": "def test_a():\n    pass\n"})
    pinned = SeedFamily(fam.name, fam.repo_files, fam.tests, ("six==1.17.0",))
    assert pinned.content_hash != fam.content_hash


# ---- grading what the seed state can grade ---------------------------------------------------------
def test_the_seed_run_drops_modules_that_do_not_import_and_records_what_does_not_pass():
    fam = SeedFamily("f", {"f/a.py": ""}, {"test_a.py": "", "test_i18n.py": "", "conftest.py": ""})
    graded = graded_family(fam, {"test_a.py::test_ok": "passed", "test_a.py::test_cli": "failed",
                                 "test_a.py::test_numpy": "skipped"})
    assert sorted(graded.tests) == ["conftest.py", "test_a.py"]   # support files stay
    assert graded.dropped_modules == ("test_i18n.py",)
    assert graded.not_passing_on_seed == ("test_a.py::test_cli", "test_a.py::test_numpy")
    everything_passes = {"test_a.py::test_ok": "passed", "test_i18n.py::test_x": "passed"}
    assert graded_family(fam, everything_passes) is fam


ENV_TESTS = '''import os

import pytest

from minikit.core import clamp


def test_needs_the_cli():
    assert os.environ.get("NOT_IN_ANY_SANDBOX") == "1"   # fails before any bug


@pytest.mark.skip(reason="optional dependency absent")
def test_optional():
    assert clamp(1, 0, 2) == 1
'''


def test_tests_not_passing_on_the_seed_state_are_quarantined_not_reference_fails(tmp_path):
    """A seed family with a test failing and one skipped on its own seed state: without the
    rule every candidate was `reference_fails`; now they grade nothing and tasks are built."""
    from rlvr.enclave import Enclave
    from rlvr.sandbox import get_sandbox
    from rlvr.authoring.curation import NOT_PASSING_ON_SEED, CurationParams
    from rlvr.authoring.synth.pipeline import SynthParams, Synthesizer
    from rlvr.authoring.synth.seeds import load_family
    from taskkit import write_family

    write_family(tmp_path / "seeds", "minikit")
    (tmp_path / "seeds/minikit/tests/test_env.py").write_text(ENV_TESTS)
    fam = load_family(tmp_path / "seeds/minikit")
    params = SynthParams(operators=["comparison_flip"], per_operator=2, combined=0)
    with Enclave(backend="bwrap", workers=1) as enclave:
        result = Synthesizer(params, CurationParams(reference_runs=2, max_mutants=1),
                             enclave, get_sandbox("bwrap")).run([fam])
    assert result.accepted, [(r.reason, r.detail) for r in result.rejections]
    assert "reference_fails" not in {r.reason for r in result.rejections}
    for task in result.accepted:
        quarantined = dict(task.quarantined)
        for test in ("test_env.py::test_needs_the_cli", "test_env.py::test_optional"):
            assert quarantined[test] == NOT_PASSING_ON_SEED
            assert test not in task.graded_tests
        assert task.provenance["not_passing_on_seed"] == sorted(quarantined)


# ---- probes see the run the agent will see ------------------------------------------------------
def test_probes_run_one_interpreter_per_environment_layer_with_the_projects_overrides(
        monkeypatch, tmp_path):
    from rlvr.sandbox import envs
    from rlvr.sandbox.base import RunResult
    from rlvr.authoring.synth import instructions

    built = {}
    monkeypatch.setattr(envs, "task_env", lambda pins: built.setdefault(pins, tmp_path / "-".join(pins)))
    seen = []

    class Recorder:
        python = "python3"

        def run(self, argv, *, mounts=(), task_env=None, **kw):
            jobs = json.loads((mounts[0].source / "jobs.json").read_text())
            seen.append((task_env, [j["args"] for j in jobs]))
            return RunResult(0, "", "", 0.0)

    jobs = [instructions.ProbeJob("a", {"x.py": ""}, ("tests/test_x.py::t",), ("-o", "addopts="),
                                  ("freezegun==1.5.5",)),
            instructions.ProbeJob("b", {"x.py": ""}, ("tests/test_x.py::t",)),
            instructions.ProbeJob("c", {"x.py": ""}, ("tests/test_x.py::t",), ("-o", "addopts="),
                                  ("freezegun==1.5.5",))]
    out = instructions.probe(Recorder(), jobs, workers=1)
    assert set(out) == {"a", "b", "c"}
    assert sorted(seen, key=str) == sorted([(None, [[]]),
                                            (tmp_path / "freezegun==1.5.5",
                                             [["-o", "addopts="], ["-o", "addopts="]])], key=str)


# ---- the corpus stage ---------------------------------------------------------------------------
@needs_corpus
def test_the_corpus_stage_verifies_unpacks_and_reports_each_library(tmp_path, monkeypatch,
                                                                      capsys):
    from stages.corpus import main

    entry = next(e for e in tomllib.loads((REPO / "data/real/corpus.toml").read_text())["library"]
                 if e["name"] == "inflection")
    s = entry["sdist"]
    lock = tmp_path / "corpus.toml"
    lock.write_text(f'format = 1\n\n[[library]]\nname = "inflection"\nversion = "{entry["version"]}"\n'
                    f'licence = "MIT"\nlicence_files = ["LICENSE"]\ntests = ["test_inflection.py"]\n'
                    f'layout = "flat"\ndependencies = []\n'
                    f'sdist = {{ url = "{s["url"]}", sha256 = "{s["sha256"]}" }}\n')
    cache = tmp_path / "cache"
    (cache / "sdists").mkdir(parents=True)
    name = s["url"].rsplit("/", 1)[-1]
    shutil.copy(CACHE / "sdists" / name, cache / "sdists" / name)   # no network needed
    monkeypatch.setenv("RLVR_TRACKING", "off")
    main(["--lock", str(lock), "--cache", str(cache), "--metrics", str(tmp_path / "m.json")])
    metrics = json.loads((tmp_path / "m.json").read_text())
    assert metrics["libraries"] == 1
    assert metrics["by_library"]["inflection"]["licence"] == "MIT"
    assert (cache / "src" / "inflection-0.5.1" / "test_inflection.py").is_file()
    assert [p.name for p in (cache / "src").iterdir()] == ["inflection-0.5.1"]  # nothing beside
    # a malformed lock is a named error, exit 2, and the unpacked tree stays as it was
    lock.write_text(lock.read_text().replace(s["sha256"], "abc"))
    with pytest.raises(SystemExit) as exc:
        main(["--lock", str(lock), "--cache", str(cache), "--metrics", str(tmp_path / "m2.json")])
    assert exc.value.code == 2
    assert "field 'sha256' must be 64 lowercase hex digits" in capsys.readouterr().err
    assert (cache / "src" / "inflection-0.5.1" / "test_inflection.py").is_file()
    assert not (tmp_path / "m2.json").exists()


# ---- the same curation on both backends ------------------------------------------------------
def _synthesize_real(backend: str, names: list[str]):
    from rlvr.enclave import Enclave
    from rlvr.sandbox import get_sandbox
    from rlvr.authoring.curation import CurationParams
    from rlvr.authoring.synth.pipeline import SynthParams, Synthesizer

    families, skipped = corpus_families(load_lock(), CACHE, names)
    params = SynthParams(per_operator=1, combined=1)
    with Enclave(backend=backend, workers=2) as enclave:
        result = Synthesizer(params, CurationParams(), enclave, get_sandbox(backend),
                             workers=2).run(families, skipped)
    return ({t.task_id: (t.fail_to_pass, t.pass_to_pass, t.quarantined) for t in result.accepted},
            sorted((r.task_id, r.reason) for r in result.rejections))


@needs_corpus
@pytest.mark.docker
def test_real_library_tasks_curate_the_same_on_bwrap_and_docker():
    """inflection (flat, no dependencies) and semver (src layout, .pytest.ini with --cov
    addopts, a conftest using doctest_namespace): the accepted tasks, their graded tests and
    every rejection agree across backends."""
    from conftest import _sandbox_or_skip

    _sandbox_or_skip("docker")
    bwrap = _synthesize_real("bwrap", ["inflection", "semver"])
    assert len(bwrap[0]) >= 10, bwrap[1]
    assert bwrap == _synthesize_real("docker", ["inflection", "semver"])
