"""What goes upstream to DeepSpeed: the patch series applied to copies of DeepSpeed, its regression tests,
the issue texts' standalone scripts, the source audit and `ds_report`."""
