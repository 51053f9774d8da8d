"""Rank side: code that runs under torchrun, one process per rank (imports torch and DeepSpeed)."""
