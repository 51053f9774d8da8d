"""Host side: starts ranks and containers, checks, reports. Imports no torch, DeepSpeed or
Transformers at module level (tests/test_boundary.py enforces it)."""
