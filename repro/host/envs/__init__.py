"""The environments the suite and the upstream proofs both run in: Transformers versions as overlays over the
project's .venv (`transformers_env`). A leaf: it imports no other host sub-package, so `conformance` and `upstream`
both stand on it without importing each other for it."""
