"""`python3 -m krex_runtime.eval.harness --problem P --candidate C [...]`:
evaluate a candidate inside a KREX command and print, as the last line of
stdout, `KREX-EVAL-RESULT <json>` (docs/evaluation.md, "The harness").

Exit status: 0 when the result line was printed (an incorrect candidate
included), 2 for a bad command line (one line on stderr, no result line).
The process ends right after the line (os._exit): threads or exit handlers
the candidate left cannot hold the command open or write after it.
"""

from __future__ import annotations

import os
import sys

from krex_runtime.eval.harness import arguments, module_files
from krex_runtime.eval.harness.evaluation_run import evaluate
from krex_runtime.eval.harness.result_line import ResultChannel


def main(argv: list[str] | None = None) -> int:
    try:
        args = arguments.parse(sys.argv[1:] if argv is None else argv)
        problem, candidate = module_files.read(args.problem), module_files.read(args.candidate)
    except arguments.UsageError as exc:
        return arguments.refuse(exc)
    except OSError as exc:
        return arguments.refuse(arguments.UsageError(f"{exc.filename}: {exc.strerror}"))
    channel = ResultChannel()
    report = evaluate(args, problem, candidate)
    channel.emit(report)
    return 0


if __name__ == "__main__":
    status = main()
    if status == 0:
        os._exit(0)
    sys.exit(status)
