"""Code the agent's tools load *inside* the policy's sandbox (mounted read-only; stdlib only)."""
