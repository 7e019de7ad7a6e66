"""The RL math, one formula per function, in SPEC notation (`reward.py`: SPEC §5).

The GRPO update (advantage registry, clipped surrogate, KL k3, loss aggregation) lands here
next round, beside the reward it consumes.
"""
