"""KREX's evaluation: kernel-agent benchmark commands run under each sharing policy.

`krex bench run` runs one workload (krex_bench/workload.py: problems with candidate
kernels, each command a real `python -m krex_bench.candidate ...`) under native
one-at-a-time execution, a second native run (the noise floor), ungated
sharing and KREX's variants, then `krex bench report` turns the results into
markdown, JSON and a chart (krex_bench/report.py). docs/BENCHMARKS.md has the
figures measured on a GPU node and the command that reproduces them.
"""
