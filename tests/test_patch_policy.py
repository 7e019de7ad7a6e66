"""The static patch policy (rlvr/tasks/patches.py): one test per rejection rule, plus the
diff parser and `extract_patch`. No sandbox needed: a rejected patch runs no code."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from adversarial.tiny_task import FIXED_CORE, REPO, make_task, patch_to, with_core
from rlvr.errors import PatchFormatError
from rlvr.tasks.patches import check_patch, extract_patch, make_patch, parse_patch, require_diff

TASK = make_task()


def add(path: str, text: str = "x = 1\n") -> str:
    return patch_to({**REPO, path: text})


def rejected(patch: str, fragment: str) -> None:
    check = check_patch(TASK, patch)
    assert not check.ok
    assert fragment in check.reason, check.reason


# ---- accepted ----------------------------------------------------------------------------
def test_reference_patch_is_accepted():
    assert check_patch(TASK, TASK.reference_patch).ok


def test_empty_patch_is_a_valid_no_op():
    assert parse_patch("") == []
    assert check_patch(TASK, "").ok
    assert check_patch(TASK, "\n  \n").ok


def test_new_plain_module_inside_existing_package_is_accepted():
    assert check_patch(TASK, add("mathpkg/helpers.py")).ok


def test_deleting_a_source_file_is_accepted():
    files = dict(REPO)
    del files["mathpkg/util.py"]
    assert check_patch(TASK, patch_to(files)).ok


def test_make_patch_round_trips_through_the_parser():
    patch = patch_to(with_core(FIXED_CORE))
    (fp,) = parse_patch(patch)
    assert (fp.old_path, fp.new_path, fp.hunks, fp.binary) == ("mathpkg/core.py", "mathpkg/core.py", 1, False)


def test_no_newline_at_end_of_file_is_marked():
    patch = make_patch({"a.py": "x = 1\n"}, {"a.py": "x = 2"})
    assert "\\ No newline at end of file" in patch
    assert parse_patch(patch)[0].hunks == 1


# ---- format -------------------------------------------------------------------------------
@pytest.mark.parametrize("text", [
    "please apply: return hi",
    "--- a/x.py\nno plus header\n",
    "--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-a\n",  # hunk shorter than its header
    "--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-a\n+b\n*oops\n",
    "--- a/x.py\n+++ b/x.py\n@@ bogus @@\n",
])
def test_non_diff_text_raises_patch_format_error(text):
    with pytest.raises(PatchFormatError):
        parse_patch(text)
    rejected(text, "not a unified diff")


# ---- one rule each -----------------------------------------------------------------------------
def test_binary_patch_is_rejected():
    rejected("diff --git a/mathpkg/x.bin b/mathpkg/x.bin\nnew file mode 100644\nGIT binary patch\nliteral 1\nIcmZ?d00001\n\n", "binary")
    rejected("diff --git a/mathpkg/x.py b/mathpkg/x.py\nBinary files a/mathpkg/x.py and b/mathpkg/x.py differ\n", "binary")


BINARY_ONLY = ("diff --git a/mathpkg/x.bin b/mathpkg/x.bin\nnew file mode 100644\nGIT binary patch\n"
               "literal 1\nIcmZ?d00001\n\n")


def test_require_diff_accepts_a_binary_only_diff_and_refuses_prose():
    require_diff(BINARY_ONLY, "p.diff")
    require_diff("diff --git a/mathpkg/util.py b/mathpkg/util.py\nold mode 100644\nnew mode 100755\n",
                 "p.diff")
    with pytest.raises(PatchFormatError, match="p.diff: not a unified diff"):
        require_diff("please fix clamp\n", "p.diff")


@pytest.mark.parametrize("binary_after_text", [False, True])
def test_cli_verify_gives_a_binary_diff_the_patch_rejected_verdict(tmp_path, capsys, bwrap_sandbox,
                                                                   binary_after_text):
    """`rlvr verify` on a diff holding only a git binary patch answers with a verdict, as it
    does when the same binary part follows a text hunk (the policy refuses it; no code runs)."""
    import json

    from rlvr.cli import main
    from rlvr.tasks.pool import save_tasks

    pool = tmp_path / "tasks.parquet"
    save_tasks(pool, [TASK.with_(split="train")])
    patch = tmp_path / "p.diff"
    patch.write_text((TASK.reference_patch if binary_after_text else "") + BINARY_ONLY)
    main(["verify", "--tasks", str(pool), "--task-id", TASK.task_id, "--patch", str(patch),
          "--params", str(tmp_path / "absent.yaml"), "--seed", "0"])
    verdict = json.loads(capsys.readouterr().out)
    assert (verdict["success"], verdict["reason"], verdict["runs"]) == (False, "patch_rejected", 0)


def test_symlink_mode_is_rejected():
    rejected("diff --git a/mathpkg/l.py b/mathpkg/l.py\nnew file mode 120000\n--- /dev/null\n+++ b/mathpkg/l.py\n"
             "@@ -0,0 +1 @@\n+/etc/passwd\n\\ No newline at end of file\n", "symlink")


def test_new_file_mode_other_than_100644_is_rejected():
    rejected("diff --git a/mathpkg/run.py b/mathpkg/run.py\nnew file mode 100755\n--- /dev/null\n+++ b/mathpkg/run.py\n"
             "@@ -0,0 +1 @@\n+x = 1\n", "mode 100755")


def test_mode_change_is_rejected():
    rejected("diff --git a/mathpkg/util.py b/mathpkg/util.py\nold mode 100644\nnew mode 100755\n", "mode 100755")


def test_rename_is_rejected():
    rejected("diff --git a/mathpkg/util.py b/mathpkg/util2.py\nsimilarity index 100%\nrename from mathpkg/util.py\n"
             "rename to mathpkg/util2.py\n", "renames")


@pytest.mark.parametrize("path", ["../evil.py", "mathpkg/../../evil.py"])
def test_dotdot_escape_is_rejected(path):
    rejected(f"--- /dev/null\n+++ b/{path}\n@@ -0,0 +1 @@\n+x = 1\n", "escapes the repository")


def test_absolute_path_is_rejected():
    rejected("--- /dev/null\n+++ /etc/passwd\n@@ -0,0 +1 @@\n+x\n", "absolute path")


@pytest.mark.parametrize("path", ["tests/test_public.py", "tests/helpers.py", "test/x.py", "testing/x.py",
                                  "mathpkg/tests/data.py"])
def test_paths_under_test_directories_are_rejected(path):
    rejected(add(path), "test")


@pytest.mark.parametrize("path", ["mathpkg/test_new.py", "mathpkg/new_test.py", "conftest.py", "mathpkg/conftest.py"])
def test_test_files_anywhere_are_rejected(path):
    rejected(add(path), "test file")


@pytest.mark.parametrize("path", ["setup.py", "setup.cfg", "pyproject.toml", "tox.ini", "pytest.ini", "mathpkg/x.cfg",
                                  "mathpkg/x.ini", "mathpkg/x.toml", "mathpkg/x.pth", "mathpkg/sitecustomize.py",
                                  "usercustomize.py", "Makefile", "mathpkg/build.sh"])
def test_build_config_and_environment_files_are_rejected(path):
    rejected(add(path), "file")


@pytest.mark.parametrize("path", [".env", "mathpkg/.env.local", ".github/workflows/ci.py", "mathpkg/.hidden.py"])
def test_hidden_dotfiles_are_rejected(path):
    rejected(add(path), "hidden file")


@pytest.mark.parametrize("path", ["mathpkg/__pycache__/core.cpython-311.pyc", "mathpkg/core.pyc", "mathpkg/_speed.so"])
def test_bytecode_and_native_artefacts_are_rejected(path):
    check = check_patch(TASK, add(path))
    assert not check.ok
    assert check.reason.startswith(path + ":")
    assert "__pycache__" in check.reason or "compiled" in check.reason


def test_new_file_outside_an_existing_package_is_rejected():
    rejected(add("helper.py"), "existing package directory")
    rejected(add("newpkg/__init__.py"), "existing package directory")


def test_new_non_python_file_is_rejected():
    rejected(add("mathpkg/data.txt"), "plain .py module")
    rejected(add("mathpkg/not-an-identifier.py"), "plain .py module")


def test_modifying_a_file_outside_the_source_tree_is_rejected():
    rejected("--- a/mathpkg/ghost.py\n+++ b/mathpkg/ghost.py\n@@ -1 +1 @@\n-a\n+b\n", "not in the task's source tree")


def test_quoted_and_control_character_paths_are_rejected():
    rejected('diff --git "a/mathpkg/\\303\\251.py" "b/mathpkg/\\303\\251.py"\n', "not a unified diff")
    rejected("--- /dev/null\n+++ b/mathpkg/a\\b.py\n@@ -0,0 +1 @@\n+x\n", "backslash")


def test_same_file_twice_is_rejected():
    one = patch_to(with_core(FIXED_CORE))
    rejected(one + one, "patched twice")


# ---- extract_patch ---------------------------------------------------------------------------------
def _workspace(tmp_path: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


def test_extract_patch_diffs_only_the_source_tree(tmp_path):
    ws = _workspace(tmp_path, with_core(FIXED_CORE))
    (ws / "mathpkg" / "__pycache__").mkdir()
    (ws / "mathpkg" / "__pycache__" / "core.cpython-311.pyc").write_bytes(b"\0\1")
    (ws / ".pytest_cache").mkdir()
    patch, check = extract_patch(ws, TASK)
    assert check.ok, check.reason
    assert patch == TASK.reference_patch


def test_extract_patch_unchanged_workspace_is_the_empty_patch(tmp_path):
    patch, check = extract_patch(_workspace(tmp_path, REPO), TASK)
    assert (patch, check.ok) == ("", True)


def test_extract_patch_discards_rollout_when_public_tests_changed(tmp_path):
    ws = _workspace(tmp_path, {**with_core(FIXED_CORE), "tests/test_public.py": "def test_inside():\n    pass\n"})
    patch, check = extract_patch(ws, TASK)
    assert not check.ok and "checksum" in check.reason and patch == ""


def test_extract_patch_rejects_symlinks_and_binary_files(tmp_path):
    ws = _workspace(tmp_path / "a", REPO)
    os.symlink("/etc/passwd", ws / "mathpkg" / "link.py")
    assert "symlink" in extract_patch(ws, TASK)[1].reason
    ws = _workspace(tmp_path / "b", REPO)
    (ws / "mathpkg" / "blob.py").write_bytes(b"\xff\xfe\x00")
    assert "binary" in extract_patch(ws, TASK)[1].reason


def test_extract_patch_applies_the_policy_to_new_files(tmp_path):
    ws = _workspace(tmp_path, {**REPO, "conftest.py": "import os\n"})
    patch, check = extract_patch(ws, TASK)
    assert not check.ok and "conftest.py" in check.reason and "conftest.py" in patch
