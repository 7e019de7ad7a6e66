"""The CPU-default policy: a small randomly initialised causal LM plus a byte-level BPE
tokenizer trained locally on the project's own code, saved as an ordinary HF directory.

No pretrained generative model is reachable from these machines (ENVIRONMENT.md), so the
default policy is built here, seeded and offline; on a GPU box the same pipeline points
`policy.path` at a real checkpoint instead. Because both are plain HF directories
(`config.json` + `model.safetensors` + `tokenizer.json` + `tokenizer_config.json` with the
chat template), every consumer loads them with `model_dir.load_policy` and never needs to
know which kind it got.

Determinism: same corpus + seed + sizes -> byte-identical directory (the BPE trainer is
deterministic, the weights come from a forked, seeded torch RNG, and no file carries a
timestamp).
"""
from __future__ import annotations

import hashlib
import json
import os
import random
import re
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Collection, Iterable, Literal, Sequence

os.environ.setdefault("HF_HUB_OFFLINE", "1")

# The special tokens get the fixed ids 0..4, in SPECIAL_TOKENS order.
from rlvr.chat_format import (EOS, IM_END, IM_START, SPECIAL_TOKENS, TOOL_CALL,  # noqa: E402
                              TOOL_CALL_END)
from rlvr.artifacts.io import replace_dir, temp_dir_beside  # noqa: E402
from rlvr.engines.model_dir import ModelDirError  # noqa: E402

# ChatML-like: <|im_start|>{role}\n{content}<|im_end|>\n ... ; the generation prompt opens an
# assistant turn. Roles used by the harness: system, user, assistant, tool.
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + (message['content'] or '') + '<|im_end|>\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\\n' }}{%- endif -%}"
)

ARCHS = ("qwen2", "llama")


@dataclass(frozen=True)
class PolicySize:
    """Architecture knobs of the local policy (defaults: the CPU-default size)."""

    arch: Literal["qwen2", "llama"] = "qwen2"  # one of ARCHS
    vocab_size: int = 4096
    hidden_size: int = 128
    layers: int = 4
    heads: int = 4
    kv_heads: int = 2
    intermediate_size: int = 512
    max_position_embeddings: int = 8192
    rope_theta: float = 10000.0

    def check(self) -> None:
        if self.arch not in ARCHS:
            raise ModelDirError(f"policy arch {self.arch!r} unknown (known: {', '.join(ARCHS)})")
        if min(self.hidden_size, self.layers, self.heads, self.kv_heads,
               self.intermediate_size) < 1:
            raise ModelDirError(f"policy sizes must be positive: {self}")
        if self.hidden_size % self.heads or self.heads % self.kv_heads:
            raise ModelDirError(f"hidden_size {self.hidden_size}, heads {self.heads}, kv_heads "
                                f"{self.kv_heads}: heads must divide hidden_size and kv_heads "
                                "heads")


# ---- corpus ---------------------------------------------------------------------------------
def corpus_files(root: Path | str = ".", exclude_families: Collection[str] = ()) -> list[Path]:
    """The training families' code: seed-repo sources and authored tasks' agent-visible repos.

    Left out, because nothing the policy is built from may hold them (SPEC §1 split
    hygiene): hidden tests, the seed repos' test suites (they are the hidden suites of
    synthetic tasks), and every file of a held-out / regression family.
    """
    root = Path(root)
    excluded = set(exclude_families)
    files: list[Path] = []
    seeds = root / "data/seed_repos"
    if seeds.is_dir():
        for family in sorted(p for p in seeds.iterdir() if p.is_dir()):
            if family.name not in excluded:
                files.extend(p for p in family.rglob("*.py") if p.is_file()
                             and "tests" not in p.relative_to(family).parts)
    tasks = root / "data/tasks"
    if tasks.is_dir():
        for task in sorted(p for p in tasks.iterdir() if (p / "repo").is_dir()):
            if _task_family(task) not in excluded:
                files.extend(p for p in (task / "repo").rglob("*.py") if p.is_file())
    return sorted(files, key=lambda p: p.relative_to(root).as_posix())


def _task_family(task_dir: Path) -> str | None:
    import yaml

    try:
        meta = yaml.safe_load((task_dir / "task.yaml").read_text()) or {}
    except (OSError, yaml.YAMLError):
        return None
    return meta.get("family") if isinstance(meta, dict) else None


def policy_corpus(root: Path | str = ".", *, seed: int = 0, synthetic_samples: int = 200,
                  exclude_families: Collection[str] = ()) -> tuple[list[str], dict]:
    """The tokenizer corpus: the repo's code plus synthetic tool-call transcripts.

    Returns (texts, stats) with stats = {corpus_files, corpus_chars, synthetic_samples,
    corpus_sha256}.
    """
    root = Path(root)
    files = corpus_files(root, exclude_families)
    code = {p.relative_to(root).as_posix(): p.read_text(encoding="utf-8", errors="replace")
            for p in files}
    synthetic = synthetic_transcripts(code, synthetic_samples, seed=seed)
    texts = list(code.values()) + synthetic
    h = hashlib.sha256()
    for t in texts:
        h.update(hashlib.sha256(t.encode()).digest())
    stats = {"corpus_files": len(files), "synthetic_samples": len(synthetic),
             "corpus_chars": sum(len(t) for t in texts), "corpus_sha256": h.hexdigest()}
    return texts, stats


def render_chat(messages: Sequence[dict], add_generation_prompt: bool = False) -> str:
    """Python twin of CHAT_TEMPLATE (used for the synthetic corpus; a test keeps them equal)."""
    out = "".join(f"{IM_START}{m['role']}\n{m['content'] or ''}{IM_END}\n" for m in messages)
    return out + (f"{IM_START}assistant\n" if add_generation_prompt else "")


_DEF_RE = re.compile(r"^\s*def (\w+)\(", re.M)
_SYSTEM = ("You are a coding agent working in a Python repository. Find and fix the bug so "
           "the tests pass. Each turn: think briefly, then make exactly one tool call "
           f"{TOOL_CALL}{{\"name\": ..., \"args\": {{...}}}}{TOOL_CALL_END}. Tools: view, "
           "search, run_tests, edit, submit.")


def _repo_rel(path: str) -> str:
    """The path the agent sees: data/seed_repos/<repo>/pkg/x.py -> pkg/x.py,
    data/tasks/<task>/repo/pkg/x.py -> pkg/x.py."""
    parts = path.split("/")
    if parts[:2] == ["data", "tasks"] and len(parts) > 4:
        return "/".join(parts[4:])
    return "/".join(parts[3:]) if parts[0] == "data" and len(parts) > 3 else path


def _call(name: str, args: dict) -> str:
    return f"{TOOL_CALL}{json.dumps({'name': name, 'args': args})}{TOOL_CALL_END}"


def synthetic_transcripts(code: dict[str, str], n: int, *, seed: int) -> list[str]:
    """`n` synthetic episodes in the shared chat / tool-call format, built from real files.

    They only teach the tokenizer the shape of transcripts (tool-call JSON, pytest output,
    numbered file views, search hits); they are not training data for the policy.
    """
    rng = random.Random(seed)
    sources = {p: t for p, t in code.items() if "/tests/" not in f"/{p}" and t.strip()}
    tests = {p: t for p, t in code.items() if "/tests/" in f"/{p}" and t.strip()}
    if not sources:
        sources = {"pkg/core.py": "def add(a, b):\n    return a + b\n"}
    if not tests:
        tests = {"tests/test_core.py": "def test_add():\n    assert add(1, 2) == 3\n"}
    src_paths, test_paths = sorted(sources), sorted(tests)
    out = []
    for _ in range(n):
        path = rng.choice(src_paths)
        rel = _repo_rel(path)
        text = sources[path]
        lines = text.splitlines() or [""]
        funcs = _DEF_RE.findall(text) or ["main"]
        func = rng.choice(funcs)
        tpath = rng.choice(test_paths)
        trel = _repo_rel(tpath)
        tfuncs = _DEF_RE.findall(tests[tpath]) or ["test_main"]
        tfunc = rng.choice(tfuncs)
        a, b = rng.randint(-9, 99), rng.randint(-9, 99)
        start = rng.randint(1, max(1, len(lines) - 5))
        end = min(len(lines), start + rng.randint(4, 20))
        view = "\n".join(f"{i:4d}  {lines[i - 1]}" for i in range(start, end + 1))
        target = lines[rng.randint(start, end) - 1]
        edited = target.replace("<", "<=", 1) if "<" in target else target.replace(
            "+", "-", 1) if "+" in target else target + "  # fixed"
        n_pass, n_fail = rng.randint(0, 30), rng.randint(1, 4)
        fail_out = (
            f"============================= test session starts =============================\n"
            f"collected {n_pass + n_fail} items\n\n{trel} {'.' * n_pass}F{'F' * (n_fail - 1)}\n\n"
            f"=================================== FAILURES ===================================\n"
            f"_____ {tfunc} _____\n\n    def {tfunc}():\n>       assert {func}({a}) == {b}\n"
            f"E       assert {a + 1} == {b}\nE        +  where {a + 1} = {func}({a})\n\n"
            f"{trel}:{rng.randint(3, 80)}: AssertionError\n"
            f"suspicious lines (run by failing tests, not by passing ones):\n"
            + "".join(f"{rel}:{k}: {lines[k - 1].strip()}  [{n_fail} failing, {rng.randint(0, 3)} "
                      f"passing]\n" for k in sorted({rng.randint(start, end) for _ in range(3)}))
            + f"=========================== short test summary info ============================\n"
            f"FAILED {trel}::{tfunc} - assert {a + 1} == {b}\n"
            f"========================= {n_fail} failed, {n_pass} passed in 0.{rng.randint(1, 99):02d}s "
            f"=========================\n")
        pass_out = (f"collected {n_pass + n_fail} items\n\n{trel} {'.' * (n_pass + n_fail)}\n\n"
                    f"============================== {n_pass + n_fail} passed in "
                    f"0.{rng.randint(1, 99):02d}s ==============================\n")
        hits = [f"{rel}:{i + 1}:{ln}" for i, ln in enumerate(lines) if func in ln][:8]
        line_no = lines.index(target) + 1
        token = next((t for t in ("<", "+") if t in target and target.count(t) == 1), None)
        if token and rng.random() < 0.5:
            edit_args = {"path": rel, "line": line_no, "old": token,
                         "new": {"<": "<=", "+": "-"}[token]}
        elif rng.random() < 0.5:
            edit_args = {"path": rel, "old": target.strip(), "new": edited.strip()}
        else:
            edit_args = {"path": rel, "hunk": f"@@ -{start},1 +{start},1 @@\n-{target}\n+{edited}\n"}
        msgs = [
            {"role": "system", "content": _SYSTEM},
            {"role": "user", "content": f"The test {trel}::{tfunc} fails. Fix the bug in "
                                        f"`{func}` ({rel}) without changing the tests."},
            {"role": "assistant", "content": "Run the tests to see what fails. "
                                             + _call("run_tests", {})},
            {"role": "tool", "content": fail_out},
            {"role": "assistant", "content": f"Find where `{func}` is defined. "
                                             + _call("search", {"pattern": f"def {func}"})},
            {"role": "tool", "content": "\n".join(hits) or "no matches"},
            {"role": "assistant", "content": f"Read {rel}. "
                                             + _call("view", {"path": rel, "start": start, "end": end})},
            {"role": "tool", "content": view},
            {"role": "assistant", "content": "The condition is off by one. " + _call("edit", edit_args)},
            {"role": "tool", "content": rng.choice([f"edited {rel}", "error: old text not found",
                                                    f"applied hunk to {rel}"])},
            {"role": "assistant", "content": _call("run_tests", {"path": trel})},
            {"role": "tool", "content": pass_out if rng.random() < 0.6 else fail_out},
            {"role": "assistant", "content": "All tests pass. " + _call("submit", {})},
            {"role": "tool", "content": "submitted"},
        ]
        out.append(render_chat(msgs[: rng.randint(4, len(msgs))]))
    return out


# ---- tokenizer ------------------------------------------------------------------------------
def _split_special(texts: Iterable[str]) -> Iterable[str]:
    pattern = re.compile("|".join(re.escape(t) for t in SPECIAL_TOKENS))
    for text in texts:
        for piece in pattern.split(text):
            if piece:
                yield piece


# Qwen2's pre-tokenizer regex (transformers' Qwen2Tokenizer rebuilds its pipeline with exactly
# this, ignoring the one in tokenizer.json): digits split one by one, newline runs kept with
# their leading spaces. Training with the same pipeline makes every loader (AutoTokenizer,
# PreTrainedTokenizerFast, vLLM) produce identical ids; tests/test_local_policy.py checks it.
PRETOKENIZE_REGEX = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"""
                     r""" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""")


def train_tokenizer(texts: Sequence[str], vocab_size: int):
    """Byte-level BPE trained on `texts`, wrapped as a `PreTrainedTokenizerFast` with the
    special tokens at ids 0..4 and the chat template.

    As in Qwen2.5, `<|endoftext|>`, `<|im_start|>`, `<|im_end|>` are *special* (dropped by
    `decode(skip_special_tokens=True)`); `<tool_call>` / `</tool_call>` are single-id added
    tokens that are not special, so decoded action text keeps them.
    """
    from tokenizers import (AddedToken, Regex, Tokenizer, decoders, models, normalizers,
                            pre_tokenizers, trainers)
    from transformers import PreTrainedTokenizerFast

    if vocab_size < 256 + len(SPECIAL_TOKENS) + 1:
        raise ModelDirError(f"vocab_size {vocab_size} is too small for a byte-level BPE "
                            f"(needs > {256 + len(SPECIAL_TOKENS)})")
    tok = Tokenizer(models.BPE(dropout=None, unk_token=None, continuing_subword_prefix="",
                               end_of_word_suffix="", fuse_unk=False, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, min_frequency=2, show_progress=False,
        special_tokens=[AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(_split_special(texts), trainer=trainer)
    tok.add_tokens([AddedToken(t, special=False, normalized=False)
                    for t in (TOOL_CALL, TOOL_CALL_END)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS, pad_token=EOS,
                                   model_max_length=1 << 30, clean_up_tokenization_spaces=False)
    fast.chat_template = CHAT_TEMPLATE
    ids = fast.convert_tokens_to_ids(list(SPECIAL_TOKENS))
    if ids != list(range(len(SPECIAL_TOKENS))):  # pragma: no cover - tokenizers contract
        raise ModelDirError(f"special tokens got ids {ids}, expected 0..{len(SPECIAL_TOKENS) - 1}")
    return fast


# ---- model ----------------------------------------------------------------------------------
def model_config(size: PolicySize, vocab_size: int):
    """A transformers config for a small Qwen2- or Llama-style causal LM."""
    from transformers import LlamaConfig, Qwen2Config

    size.check()
    common = dict(
        vocab_size=vocab_size, hidden_size=size.hidden_size,
        intermediate_size=size.intermediate_size, num_hidden_layers=size.layers,
        num_attention_heads=size.heads, num_key_value_heads=size.kv_heads,
        max_position_embeddings=size.max_position_embeddings,
        rope_parameters={"rope_type": "default", "rope_theta": float(size.rope_theta)},
        rms_norm_eps=1e-6, initializer_range=0.02, tie_word_embeddings=True,
        bos_token_id=None, eos_token_id=SPECIAL_TOKENS.index(EOS),
        pad_token_id=SPECIAL_TOKENS.index(EOS))
    if size.arch == "qwen2":
        return Qwen2Config(use_sliding_window=False, **common)
    return LlamaConfig(attention_bias=False, mlp_bias=False, **common)


@dataclass(frozen=True)
class BuildReport:
    out_dir: str
    param_count: int
    vocab_size: int
    corpus_docs: int
    corpus_chars: int
    corpus_tokens: int
    chars_per_token: float


def build_local_policy(out_dir: Path | str, corpus_texts: Sequence[str], *, seed: int = 0,
                       vocab_size: int = 4096, hidden_size: int = 128, layers: int = 4,
                       heads: int = 4, kv_heads: int = 2, intermediate_size: int = 512,
                       max_position_embeddings: int = 8192, arch: str = "qwen2",
                       rope_theta: float = 10000.0) -> BuildReport:
    """Train the tokenizer on `corpus_texts`, init a seeded random LM, save both to `out_dir`.

    The directory is written beside `out_dir` and swapped in only once complete, so a failure
    leaves an existing policy untouched. Tests want `build_tiny_policy` (well under a second).
    """
    import torch
    from transformers import AutoModelForCausalLM, GenerationConfig

    size = PolicySize(arch=arch, vocab_size=vocab_size, hidden_size=hidden_size, layers=layers,
                      heads=heads, kv_heads=kv_heads, intermediate_size=intermediate_size,
                      max_position_embeddings=max_position_embeddings, rope_theta=rope_theta)
    size.check()
    if not corpus_texts:
        raise ModelDirError("policy corpus is empty: nothing to train the tokenizer on")
    out_dir = Path(out_dir)
    tokenizer = train_tokenizer(corpus_texts, vocab_size)
    config = model_config(size, len(tokenizer))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.eval()
    im_end = SPECIAL_TOKENS.index(IM_END)
    model.generation_config = GenerationConfig(
        eos_token_id=[im_end, config.eos_token_id], pad_token_id=config.pad_token_id)
    n_tokens = sum(len(e.ids) for e in tokenizer.backend_tokenizer.encode_batch(
        list(corpus_texts), add_special_tokens=False))
    n_chars = sum(len(t) for t in corpus_texts)
    report = BuildReport(
        out_dir=str(out_dir), param_count=sum(p.numel() for p in model.parameters()),
        vocab_size=len(tokenizer), corpus_docs=len(corpus_texts), corpus_chars=n_chars,
        corpus_tokens=n_tokens, chars_per_token=round(n_chars / max(1, n_tokens), 4))
    tmp = temp_dir_beside(out_dir)
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp, save_jinja_files=False)  # template in tokenizer_config
        (tmp / "policy_build.json").write_text(json.dumps(
            {"builder": "rlvr.engines.local_policy", "seed": seed, **asdict(size),
             "tokenizer_vocab": len(tokenizer), "corpus_docs": len(corpus_texts),
             "corpus_chars": n_chars, "param_count": report.param_count},
            indent=2, sort_keys=True) + "\n")
        replace_dir(tmp, out_dir)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    return report


def dir_digest(model_dir: Path | str) -> dict[str, str]:
    """sha256 of every file in a directory (relative path -> hex): the determinism check."""
    d = Path(model_dir)
    return {p.relative_to(d).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(d.rglob("*")) if p.is_file()}


_TINY_CODE = (
    "def clamp(x, lo, hi):\n    if x < lo:\n        return lo\n    if x > hi:\n        return hi\n"
    "    return x\n",
    "def mean(xs):\n    return sum(xs) / len(xs) if xs else 0.0\n",
    "def test_clamp():\n    assert clamp(5, 0, 3) == 3\n    assert clamp(-1, 0, 3) == 0\n",
)


def build_tiny_policy(out_dir: Path | str, *, seed: int = 0, arch: str = "qwen2",
                      vocab_size: int = 400) -> BuildReport:
    """A tiny policy for tests (~0.1 s): a self-contained small corpus, 2 layers x 32 wide.

    Same tokenizer format, special tokens and chat template as the real one, so harness
    code tested against it runs unchanged against the CPU-default or a real checkpoint.
    """
    code = {f"pkg/m{i}.py": t for i, t in enumerate(_TINY_CODE[:2])}
    code["tests/test_m.py"] = _TINY_CODE[2]
    texts = list(_TINY_CODE) + synthetic_transcripts(code, 30, seed=seed)
    return build_local_policy(out_dir, texts, seed=seed, vocab_size=vocab_size, hidden_size=32,
                              layers=2, heads=4, kv_heads=2, intermediate_size=64,
                              max_position_embeddings=2048, arch=arch)
