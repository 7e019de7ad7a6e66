"""The CPU-default policy: deterministic build, HF round trip, one tokenization everywhere,
named errors on broken directories, and the init_policy stage."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch

from rlvr.engines.local_policy import (CHAT_TEMPLATE, SPECIAL_TOKENS, build_local_policy,
                                       build_tiny_policy, corpus_files, dir_digest,
                                       policy_corpus, render_chat, synthetic_transcripts)
from rlvr.engines.model_dir import (ModelDirError, count_parameters, load_policy,
                                    validate_model_dir, weights_fingerprint)

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    d = tmp_path_factory.mktemp("local") / "policy"
    report = build_tiny_policy(d, seed=0)
    return d, report


def test_same_seed_and_corpus_give_a_byte_identical_directory(tiny, tmp_path):
    d, _ = tiny
    again = tmp_path / "again"
    build_tiny_policy(again, seed=0)
    assert dir_digest(d) == dir_digest(again)
    assert {"config.json", "model.safetensors", "tokenizer.json",
            "tokenizer_config.json"} <= set(dir_digest(d))
    assert "chat_template" in json.loads((d / "tokenizer_config.json").read_text())
    umask = os.umask(0)
    os.umask(umask)
    assert {p.stat().st_mode & 0o777 for p in d.iterdir()} == {0o666 & ~umask}
    assert d.stat().st_mode & 0o777 == 0o777 & ~umask
    other = tmp_path / "other"
    build_tiny_policy(other, seed=1)
    a, b = dir_digest(d), dir_digest(other)
    assert a["model.safetensors"] != b["model.safetensors"]


def test_policy_version_covers_the_tokenizer_too(tiny, tmp_path):
    d = tmp_path / "p"
    shutil.copytree(tiny[0], d)
    before = weights_fingerprint(d)
    tok = json.loads((d / "tokenizer.json").read_text())
    tok["added_tokens"][0]["content"] = "<|eot|>"
    (d / "tokenizer.json").write_text(json.dumps(tok))
    assert weights_fingerprint(d) != before


def test_round_trip_through_load_policy(tiny):
    d, report = tiny
    policy = load_policy(d)
    model, tok = policy.model, policy.tokenizer
    assert model.config.model_type == "qwen2" and not model.training
    assert next(model.parameters()).dtype == torch.float32
    assert model.config.vocab_size == len(tok) == report.vocab_size
    assert sum(p.numel() for p in model.parameters()) == report.param_count == count_parameters(d)
    assert tok.convert_tokens_to_ids(list(SPECIAL_TOKENS)) == [0, 1, 2, 3, 4]
    assert tok.eos_token == tok.pad_token == "<|endoftext|>"
    assert policy.version == weights_fingerprint(d)
    msgs = [{"role": "system", "content": "sys"}, {"role": "user", "content": "fix it"},
            {"role": "assistant", "content": 'ok <tool_call>{"name": "submit", "args": {}}</tool_call>'},
            {"role": "tool", "content": "submitted"}]
    text = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    assert text == render_chat(msgs, add_generation_prompt=True)
    ids = tok.encode(text)
    assert ids.count(1) == 5 and ids.count(2) == 4 and ids.count(3) == 1 and ids.count(4) == 1
    assert tok.decode(ids) == text
    # the tool-call tags survive skip_special_tokens (like Qwen2.5), the chat markers do not
    kept = tok.decode(ids, skip_special_tokens=True)
    assert "<tool_call>" in kept and "<|im_start|>" not in kept
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits
    assert logits.shape == (1, len(ids), len(tok)) and torch.isfinite(logits).all()


@pytest.mark.parametrize("arch", ["qwen2", "llama"])
def test_every_loader_tokenizes_like_the_trained_tokenizer(tmp_path, arch):
    """transformers rebuilds a Qwen2 tokenizer's pipeline from its own class; ours is trained
    with that exact pipeline, so AutoTokenizer, the raw tokenizer.json and
    PreTrainedTokenizerFast agree id for id."""
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    d = tmp_path / arch
    build_tiny_policy(d, arch=arch)
    raw = Tokenizer.from_file(str(d / "tokenizer.json"))
    auto = AutoTokenizer.from_pretrained(d)
    fast = PreTrainedTokenizerFast.from_pretrained(d)
    samples = synthetic_transcripts({}, 5, seed=3) + [
        "héllo  wörld\r\n\t x = 1234567  # ünïcode ½\n",
        "<|im_start|>user\nfix<|im_end|>\n<tool_call>{\"a\": [1, 2]}</tool_call>"]
    for text in samples:
        expected = raw.encode(text).ids
        assert auto.encode(text) == expected
        assert fast.encode(text) == expected


def test_policy_corpus_is_the_repo_code_plus_transcripts_without_hidden_tests(tmp_path):
    repo = tmp_path / "repo"
    (repo / "data/seed_repos/pkg/pkg").mkdir(parents=True)
    (repo / "data/seed_repos/pkg/pkg/core.py").write_text("def f(x):\n    return x < 3\n")
    (repo / "data/seed_repos/pkg/tests").mkdir()
    (repo / "data/seed_repos/pkg/tests/test_core.py").write_text("def test_f():\n    assert f(1)\n")
    (repo / "data/tasks/t1/repo/pkg").mkdir(parents=True)
    (repo / "data/tasks/t1/repo/pkg/core.py").write_text("def f(x):\n    return x <= 3\n")
    (repo / "data/tasks/t1/hidden_tests").mkdir(parents=True)
    (repo / "data/tasks/t1/hidden_tests/test_secret.py").write_text("SECRET = 1\n")
    (repo / "data/seed_repos/heldout/heldout").mkdir(parents=True)
    (repo / "data/seed_repos/heldout/heldout/core.py").write_text("HELDOUT_CODE = 1\n")
    (repo / "data/tasks/t1/task.yaml").write_text("family: pkg\ninstruction: fix f\n")
    (repo / "data/tasks/t2/repo/heldout").mkdir(parents=True)
    (repo / "data/tasks/t2/repo/heldout/core.py").write_text("HELDOUT_TASK = 1\n")
    (repo / "data/tasks/t2/task.yaml").write_text("family: heldout\ninstruction: fix\n")
    files = [p.relative_to(repo).as_posix()
             for p in corpus_files(repo, exclude_families={"heldout"})]
    # No seed test suite (hidden suites of synthetic tasks), no hidden tests, no held-out family.
    assert files == ["data/seed_repos/pkg/pkg/core.py", "data/tasks/t1/repo/pkg/core.py"]
    texts, stats = policy_corpus(repo, seed=0, synthetic_samples=20,
                                 exclude_families={"heldout"})
    again, stats2 = policy_corpus(repo, seed=0, synthetic_samples=20,
                                  exclude_families={"heldout"})
    assert texts == again and stats == stats2
    assert stats["corpus_files"] == 2 and stats["synthetic_samples"] == 20
    assert not any(s in t for t in texts for s in ("SECRET", "HELDOUT", "def test_f"))
    for t in texts[2:]:
        assert t.startswith("<|im_start|>system\n")
        turns = [x.split("<|im_end|>")[0] for x in t.split("<|im_start|>assistant\n")[1:]]
        assert turns
        for call in (c for turn in turns for c in turn.split("<tool_call>")[1:]):
            parsed = json.loads(call.split("</tool_call>")[0])
            assert set(parsed) == {"name", "args"}
            assert parsed["name"] in {"view", "search", "run_tests", "edit", "submit"}
    assert any("pkg/core.py" in t for t in texts[3:])  # paths as the agent sees them


def test_chat_template_text_matches_its_python_twin():
    from jinja2 import Template

    msgs = [{"role": "user", "content": "a\nb"}, {"role": "assistant", "content": None}]
    for gen in (False, True):
        assert Template(CHAT_TEMPLATE).render(messages=msgs, add_generation_prompt=gen) == \
            render_chat(msgs, add_generation_prompt=gen)


def _break(d: Path, how: str) -> str:
    if how == "missing_dir":
        shutil.rmtree(d)
        return "does not exist"
    if how == "no_config":
        (d / "config.json").unlink()
        return "missing config.json"
    if how == "bad_config":
        (d / "config.json").write_text("{not json")
        return "not valid JSON"
    if how == "no_model_type":
        cfg = json.loads((d / "config.json").read_text())
        del cfg["model_type"]
        (d / "config.json").write_text(json.dumps(cfg))
        return "no 'model_type'"
    if how == "no_weights":
        (d / "model.safetensors").unlink()
        return "missing weights"
    if how == "missing_shard":
        (d / "model.safetensors").unlink()
        (d / "model.safetensors.index.json").write_text(json.dumps(
            {"weight_map": {"a": "model-00001-of-00002.safetensors"}}))
        return "weight shard"
    if how == "no_tokenizer":
        (d / "tokenizer.json").unlink()
        return "missing tokenizer"
    if how == "corrupt_weights":
        (d / "model.safetensors").write_bytes(b"garbage")
        return "does not load"
    raise AssertionError(how)


@pytest.mark.parametrize("how", ["missing_dir", "no_config", "bad_config", "no_model_type",
                                 "no_weights", "missing_shard", "no_tokenizer", "corrupt_weights"])
def test_a_broken_directory_gets_a_named_error(tiny, tmp_path, how):
    d = tmp_path / "broken"
    shutil.copytree(tiny[0], d)
    expected = _break(d, how)
    with pytest.raises(ModelDirError, match=expected) as err:
        load_policy(d)
    assert str(d) in str(err.value)


def test_a_file_is_not_a_policy_directory(tmp_path):
    f = tmp_path / "f"
    f.write_text("x")
    with pytest.raises(ModelDirError, match="not a directory"):
        validate_model_dir(f)


def test_a_failed_build_leaves_the_existing_policy_untouched(tiny, tmp_path):
    d = tmp_path / "policy"
    shutil.copytree(tiny[0], d)
    before = dir_digest(d)
    with pytest.raises(ModelDirError, match="heads must divide"):
        build_local_policy(d, ["def f():\n    return 1\n"] * 3, vocab_size=300, hidden_size=30,
                           heads=4, kv_heads=2, layers=1, intermediate_size=32)
    with pytest.raises(ModelDirError, match="corpus is empty"):
        build_local_policy(d, [], vocab_size=300)
    assert dir_digest(d) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["policy"]  # no temp dirs left


# ---- stage ----------------------------------------------------------------------------------
TINY_PARAMS = ("policy:\n  kind: local\n  seed: 0\n  vocab_size: 320\n  hidden_size: 32\n"
               "  layers: 1\n  heads: 2\n  kv_heads: 1\n  intermediate_size: 64\n"
               "  synthetic_samples: 10\n")


SPLIT = "split:\n  heldout_families: [intervals]\n"


def _run_stage(tmp_path, params_text, monkeypatch):
    from stages import init_policy

    monkeypatch.setenv("RLVR_TRACKING", "off")
    params = tmp_path / "params.yaml"
    params.write_text(params_text + SPLIT)
    out, metrics = tmp_path / "models/policy-init", tmp_path / "metrics/init_policy.json"
    init_policy.main(["--params", str(params), "--out", str(out), "--metrics", str(metrics)])
    return out, json.loads(metrics.read_text())


def test_stage_builds_the_local_policy(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)  # the corpus is the repo's data/
    out, metrics = _run_stage(tmp_path, TINY_PARAMS, monkeypatch)
    policy = load_policy(out)
    assert metrics["kind"] == "local"
    assert metrics["param_count"] == sum(p.numel() for p in policy.model.parameters())
    assert metrics["vocab_size"] == len(policy.tokenizer) <= 320
    assert metrics["corpus_files"] == len(corpus_files(ROOT, {"intervals"})) > 0
    assert metrics["corpus_files"] < len(corpus_files(ROOT))
    assert metrics["corpus_chars"] > 0 and metrics["policy_version"] == policy.version


def test_stage_imports_an_existing_directory(tiny, tmp_path, monkeypatch):
    src = tmp_path / "ckpt"
    shutil.copytree(tiny[0], src)
    out, metrics = _run_stage(tmp_path, f"policy:\n  kind: path\n  path: {src}\n", monkeypatch)
    imported = dir_digest(out)
    card = json.loads((out / "rlvr_chat.json").read_text())  # how it is spoken to, recorded
    assert card["tool_call_format"] == "rlvr" and metrics["tool_call_format"] == "rlvr"
    assert {k: v for k, v in imported.items() if k != "rlvr_chat.json"} == dir_digest(src)
    assert metrics["policy_version"] == weights_fingerprint(src)
    assert metrics["param_count"] == tiny[1].param_count


@pytest.mark.parametrize("text,message", [
    ("policy:\n  kind: local\n  hidden_sise: 32\n", "policy.hidden_sise: unknown key"),
    ("policy:\n  kind: remote\n", "policy.kind: must be one of"),
    ("policy:\n  kind: path\n", "policy.path: required"),
    ("policy:\n  kind: path\n  path: /nonexistent/ckpt\n", "does not exist"),
    ("policy:\n  kind: local\n  hidden_size: 30\n  synthetic_samples: 1\n", "heads must divide"),
])
def test_stage_refuses_bad_params_with_exit_2(tmp_path, monkeypatch, capsys, text, message):
    with pytest.raises(SystemExit) as exc:
        _run_stage(tmp_path, text, monkeypatch)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "metrics/init_policy.json").exists()
