"""Where a call runs and how its batch is split: ``placement`` (what tracing knows), ``partitioning`` (a kernel call per
batch shard), ``canonical`` (the canonical tensors of a sharded buffer, for checkpoints)."""
