#!/usr/bin/env python3
"""Validates structured outputs against their schemas with Python's jsonschema (Debian's
python3-jsonschema), formats checked by the schema draft's format checker (date, email, uuid,
ipv4 always; time and date-time only where rfc3339-validator is installed).

    validate_json.py SCHEMAS.json OUTPUTS.jsonl

SCHEMAS.json: [{"name": ..., "schema": ...}, ...]; OUTPUTS.jsonl: one {"name": ..., "output": TEXT}
per line. Prints each invalid output and a summary; exit 1 when any is invalid, 2 on bad input.
"""
import json
import sys

try:
    import jsonschema
    from jsonschema import Draft202012Validator, validators
except ImportError:
    print("validate_json.py: python3-jsonschema is missing (scripts/setup.sh installs it)")
    sys.exit(2)


def main():
    with open(sys.argv[1], encoding="utf-8") as f:
        suite = {c["name"]: c["schema"] for c in json.load(f)}
    total = bad = 0
    per_schema = {}
    with open(sys.argv[2], encoding="utf-8") as f:
        for line in f:
            rec = json.loads(line)
            schema = suite[rec["name"]]
            cls = validators.validator_for(schema, default=Draft202012Validator)
            cls.check_schema(schema)
            total += 1
            per_schema[rec["name"]] = per_schema.get(rec["name"], 0) + 1
            try:
                instance = json.loads(rec["output"])
            except ValueError as e:
                bad += 1
                print(f"{rec['name']}: not JSON ({e}): {rec['output']!r}")
                continue
            # The schema's own draft's format checker (the generic FormatChecker() mixes in draft 3's
            # "time", which has no zone).
            errors = list(cls(schema, format_checker=cls.FORMAT_CHECKER).iter_errors(instance))
            if errors:
                bad += 1
                print(f"{rec['name']}: {errors[0].message}: {rec['output']!r}")
    print(f"jsonschema: {total} outputs of {len(per_schema)} schemas, {bad} invalid")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
