"""`python -m repro sweep`: every Transformers minor release from DeepSpeed-Chat's oldest to the newest on the package
index, per architecture 0.19.8 injects and the suite twins, as released and as the wheel: releases (which) -> plan
(cells) -> run (measure, journal) -> report (SWEEP.md, sweep.png)."""
