"""Data for the enclave's adversarial suite: a tiny task and reward-hacking patches."""
