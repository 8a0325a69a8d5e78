"""`auditor loadgen`: an intent mix of streamed requests at a rate (open loop) or from N users (closed loop),
per-intent latency, SLAs and goodput, hallucination rates from the records, and sweeps with charts."""
