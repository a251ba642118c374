"""Evaluating a kernel candidate against its problem (`krex eval`).

`harness/` runs INSIDE the evaluation's command, in the tenant: it loads a
KernelBench-format problem and candidate, compiles the candidate in one of the
node's compile slots, checks it, times the reference and the candidate each in
its own region and prints one `KREX-EVAL-RESULT` line (docs/evaluation.md,
"The harness"). Like the rest of the tenant side it imports the standard
library and the region client; torch and Triton only inside its functions.
"""
