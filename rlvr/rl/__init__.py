"""The RL math, one formula per function, in SPEC notation (pure torch functions).

    reward.py       SPEC §5  trajectory reward R = R_outcome + λ_fmt·R_format − α·|τ|/T_max
    overlong.py     SPEC §5  threshold and DAPO soft overlong penalties; γ·(T_max − T_budget) ≥ 1
    groups.py       SPEC §1/§7  informative groups, P_info(p, G), E[N_draw] = B / P_info
    advantages.py   SPEC §7  estimator registry (grpo, dr_grpo, rloo) × reward scaling
    masking.py      SPEC §3  the loss mask as every formula applies it
    ratio.py        SPEC §7  token ratio, GSPO sequence ratio, turn ratio
    surrogate.py    SPEC §7  clipped surrogate with ε_low ≤ ε_high; clip fractions
    kl.py           SPEC §7  k3 KL to the frozen reference; β = 0 → no reference
    aggregation.py  SPEC §7  seq-mean, token-mean, constant denominator (G·L), turn-mean
    entropy.py      SPEC §7  token entropy and the adaptive entropy controller
    importance.py   SPEC §7  truncated importance weights and the sampler/trainer mismatch
    loss.py         SPEC §7  the assembled GRPO loss and its config / update passport

Token tensors are `[B, T]` (B sequences, T positions) with a loss mask `[B, T]`; rewards and
advantages are `[N, G]` (N groups of G rollouts) flattened to `[B]` = `[N·G]` for the loss.
"""
