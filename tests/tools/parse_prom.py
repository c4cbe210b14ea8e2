"""Parses a Prometheus text exposition file with the official Python client's parser
(prometheus_client.parser, Debian python3-prometheus-client) and prints its samples as JSON:
[[name, {label: value}, value], ...] in file order; non-finite values as the strings "+Inf",
"-Inf", "NaN". Usage: parse_prom.py FILE"""
import json
import math
import sys

from prometheus_client.parser import text_string_to_metric_families


def main():
    with open(sys.argv[1]) as f:
        text = f.read()
    out = []
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            v = s.value
            if math.isnan(v):
                v = "NaN"
            elif math.isinf(v):
                v = "+Inf" if v > 0 else "-Inf"
            out.append([s.name, dict(s.labels), v])
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
