"""Reproduction of DeepSpeed issue #8391: ZeRO-3 Hybrid Engine drops GPT-NeoX QKV layout changes.

Kept import-light on purpose: the Transformers shim hook is imported from a `.pth` file at every
interpreter start-up, so nothing here may import torch.
"""

__version__ = "0.1.0"
