"""Google's CEL (cel-cpp, through PyPI `cel-expr-python`) as the reference that airlock's
policy conditions are checked against.

Reads JSON lines on stdin, each `{"expr": "...", "vars": {...}, "now": "RFC 3339"}`, and
writes one JSON line per input: `{"result": true | false | "error" | "not_bool", "detail": "..."}`.
The variables are declared `dyn` (`now` a timestamp), as airlock binds JSON: objects are maps,
numbers are ints when whole, and the strings extension is loaded, as in airlock's environment.

Usage: cel_reference.py < cases.jsonl
"""

import datetime
import json
import sys

from cel_expr_python import cel
from cel_expr_python.ext import ext_strings

VARIABLES = ["tool", "args", "context", "principal", "fingerprint", "classifier", "resume", "definition"]

ENV = cel.NewEnv(
    variables={**{v: cel.Type.DYN for v in VARIABLES}, "now": cel.Type.TIMESTAMP},
    extensions=[ext_strings.ExtStrings()],
)

COMPILED = {}


def evaluate(case):
    expr = case["expr"]
    if expr not in COMPILED:
        try:
            COMPILED[expr] = ENV.compile(expr, disable_check=True)
        except Exception as e:  # a compile error is the reference refusing the expression
            COMPILED[expr] = e
    program = COMPILED[expr]
    if isinstance(program, Exception):
        return {"result": "error", "detail": f"compile: {program}"}
    data = dict(case["vars"])
    data["now"] = datetime.datetime.fromisoformat(case["now"].replace("Z", "+00:00"))
    try:
        value = program.eval(data=data)
    except Exception as e:
        return {"result": "error", "detail": str(e)}
    kind = value.type()
    if kind == cel.Type.BOOL:
        return {"result": bool(value.value()), "detail": ""}
    if kind == cel.Type.ERROR:
        return {"result": "error", "detail": str(value.value())}
    return {"result": "not_bool", "detail": str(kind)}


def main():
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        print(json.dumps(evaluate(json.loads(line))), flush=False)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
