#!/usr/bin/python3
# Oracle for tandem's chat template renderer: renders templates with Python's jinja2 set up as
# Hugging Face transformers sets it up for apply_chat_template (utils/chat_template_utils.py):
#   ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
#                                 extensions=[jinja2.ext.loopcontrols])
#   filters["tojson"]  = json.dumps(x, ensure_ascii=False, indent=None, separators=None,
#                                   sort_keys=False), every argument overridable from the template
#                        (transformers' signature: tojson(x, ensure_ascii, indent, separators, sort_keys))
#   globals["raise_exception"](msg) raises TemplateError(msg)
#   globals["strftime_now"](fmt) = datetime.now().strftime(fmt)
# Run it with Debian's /usr/bin/python3 (python3-jinja2).
#
# Usage: render_jinja.py CASES_JSON OUT_JSON
#   CASES_JSON: [{"template": str, "context": {...}}, ...]; the context's keys become the
#   template's variables (JSON object key order is kept, as Python dicts keep insertion order).
#   OUT_JSON: [{"ok": true, "output": str} | {"ok": false, "error": str}, ...] in the same order.
import json
import sys
from datetime import datetime

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def strftime_now(format):
    return datetime.now().strftime(format)


def make_env():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def main():
    with open(sys.argv[1], encoding="utf-8") as f:
        cases = json.load(f)
    env = make_env()
    results = []
    for case in cases:
        try:
            out = env.from_string(case["template"]).render(**case["context"])
            results.append({"ok": True, "output": out})
        except Exception as e:  # noqa: BLE001 - any failure is a result to compare
            results.append({"ok": False, "error": "%s: %s" % (type(e).__name__, e)})
    with open(sys.argv[2], "w", encoding="utf-8") as f:
        json.dump(results, f, ensure_ascii=False)


if __name__ == "__main__":
    main()
