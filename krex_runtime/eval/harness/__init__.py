"""The evaluation harness, run as `python3 -m krex_runtime.eval.harness
--problem P --candidate C [...]` inside a KREX command (docs/evaluation.md,
"The harness"). One concern per module:

- arguments.py: the command line, a bad one refused in one line (exit 2);
- module_files.py: a problem or candidate file, its sha256, loaded as a fresh module;
- compile_slot.py: the node's compile slots (`KREX_COMPILE_SLOTS`, flock);
- failures.py: an exception as the contract's failure class, one-line message, detail;
- outputs.py: a candidate's output against the reference's (shape, dtype, tolerance);
- event_timer.py: start/end events through the driver (ctypes on libcuda);
- trials.py: warm-up, then per trial: refresh inputs, flush L2, one timed window;
- stats.py: a list of trial times as the result's TIMES figures;
- framework_watch.py: the timing functions a candidate replaced (`harness_patched`);
- evaluation_run.py: the phases in order; result_line.py: the result and its line.
"""
