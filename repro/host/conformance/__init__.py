"""The conformance suite, the Hybrid Engine against native Hugging Face cell by cell, in the order data flows:
`plan` (the cells) -> `pool` (warm rank processes) and `cells` (one cell's probe) -> `diagnosis` (what the
measurements show) -> `run` (`python -m repro conformance`: journal, resume, shards, merge, conformance.json)
-> `report` (CONFORMANCE.md, the heatmap, the issue texts)."""
