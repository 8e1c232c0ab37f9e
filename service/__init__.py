"""juiz's HTTP API (Litestar): batches in, judgements out; the work is done by `workers` through Redis."""
