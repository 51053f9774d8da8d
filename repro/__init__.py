"""Reproduction of DeepSpeed issue #8391: ZeRO-3 Hybrid Engine drops GPT-NeoX QKV layout changes.

Kept import-light on purpose (no torch here): the CLI's usage errors must come back fast.
"""

__version__ = "0.1.0"
