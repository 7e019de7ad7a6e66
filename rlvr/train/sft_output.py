"""What an SFT run hands back: `SFTResult` (numbers for the stage's metrics, timings included)
and the policy directory (merged weights, tokenizer, `training.json` card and README). The
card holds no wall-clock numbers, so the same data + params + base give the same directory."""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlvr.config import as_dict
from rlvr.engines.model_dir import weights_fingerprint
from rlvr.train.demos import data_hash
from rlvr.train.lora import ADAPTER_DIR
from rlvr.train.policy_dir import save_hf_weights, staged_dir
from rlvr.train.sft_config import SFTParams


@dataclass
class SFTResult:
    out_dir: Path
    steps: int
    stop_reason: str                  # max_steps | epochs | val_worsening | format_stable
    train_loss: float                 # mean policy-token NLL of the last step
    val_loss: float | None            # of the written weights (None: no validation split)
    evals: list[dict[str, float]] = field(default_factory=list)
    tokens: int = 0                   # real (unpadded) tokens trained on
    trainable_tokens: int = 0         # loss_mask == 1 tokens trained on
    padded_tokens: int = 0            # tokens through the model, padding included
    seconds: float = 0.0
    model: Any = None                 # the trained model in memory (merged when LoRA), eval mode

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.seconds if self.seconds else 0.0


def write_sft_policy(model, policy, base_dir, train_rows, val_rows, p: SFTParams,
                     result: SFTResult):
    """Save (merged) weights + tokenizer + card to a temp dir beside out_dir, then rename it
    into place. Returns the in-memory model that was saved (eval mode)."""
    out_dir, base_dir = Path(result.out_dir), Path(base_dir)
    with staged_dir(out_dir) as tmp:
        if p.lora.enabled:
            if p.lora.save_adapter:
                model.save_pretrained(tmp / ADAPTER_DIR)
            model = model.merge_and_unload()
        model.eval()
        save_hf_weights(tmp, model, base_dir)
        card = _card(policy, base_dir, train_rows, val_rows, p, result)
        (tmp / "training.json").write_text(json.dumps(card, indent=2, sort_keys=True) + "\n")
        (tmp / "README.md").write_text(_readme(card))
    return model


def _card(policy, base_dir, train_rows, val_rows, p: SFTParams, r: SFTResult) -> dict[str, Any]:
    def rounded(x):
        return None if x is None or (isinstance(x, float) and not math.isfinite(x)) else round(x, 6)

    return {
        "trainer": "rlvr.train.sft",
        "base_model": str(base_dir),
        "base_model_hash": weights_fingerprint(base_dir),
        "data_hash": data_hash(list(train_rows) + list(val_rows)),
        "demonstrations": {"train": len(train_rows), "val": len(val_rows),
                           "train_tasks": len({d["task_id"] for d in train_rows}),
                           "val_tasks": len({d["task_id"] for d in val_rows})},
        "params": as_dict(p),
        "lora_merged": p.lora.enabled,
        "metrics": {"steps": r.steps, "stop_reason": r.stop_reason,
                    "train_loss": rounded(r.train_loss), "val_loss": rounded(r.val_loss),
                    "tokens": r.tokens, "trainable_tokens": r.trainable_tokens,
                    "evals": [{k: rounded(v) if isinstance(v, float) else v for k, v in e.items()}
                              for e in r.evals]},
    }


def _readme(card: dict[str, Any]) -> str:
    m, d = card["metrics"], card["demonstrations"]
    kind = (f"LoRA r={card['params']['lora.r']} (merged)" if card["lora_merged"]
            else "full fine-tune")
    return (
        "# SFT policy\n\n"
        f"Rejection-sampling SFT ({kind}) of `{card['base_model']}` "
        f"(`{card['base_model_hash']}`) on {d['train']} verified demonstrations of "
        f"{d['train_tasks']} tasks; validation: {d['val']} demonstrations of {d['val_tasks']} "
        f"held-out tasks.\n\n"
        "Loss: mean NLL of policy-sampled tokens only (loss_mask = 1); prompt, template and "
        "observation tokens enter neither the loss nor its normaliser.\n\n"
        f"- data hash: `{card['data_hash']}`\n"
        f"- steps: {m['steps']} (stopped: {m['stop_reason']})\n"
        f"- train loss (last step): {m['train_loss']}\n"
        f"- validation loss: {m['val_loss']}\n"
        f"- tokens: {m['tokens']} ({m['trainable_tokens']} trained)\n\n"
        "Params, evaluations and hashes: `training.json`. Load with "
        "`AutoModelForCausalLM.from_pretrained` (plain HF weights"
        + ("; the LoRA adapter alone is under `adapter/`" if card["lora_merged"]
           and card["params"]["lora.save_adapter"] else "") + ").\n")
