"""Process-boundary prototype for the enclave (issue 35): bench only, not used by rlvr."""
