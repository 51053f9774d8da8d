"""`python -m repro family`: the LoRA family table. DeepSpeed-Chat LoRA on the tiny GPT-NeoX under the
ZeRO-3 Hybrid Engine, for each DeepSpeed build (released, and copies with the patches of its findings)
x LoRA targets x world size x pin_parameters, one torchrun cell at a time (repro.rank.cell_probe).

Which bug a cell hits is computed from its measurements only (`diagnose`), never assigned per cell,
so the table shows what the patches fix and what each bug needs. Writes OUT/family.json and
OUT/FAMILY.md (rendered from the JSON only: `render`). A cell that fails is recorded with its error
and the others still run.

Flow: `plan` (sweeps, builds, cells) -> `run` (one probe per cell) -> `diagnosis` -> `report` (FAMILY.md) and
`pr_comment` (the comment for PR #8392), both rendered from family.json only.
"""
