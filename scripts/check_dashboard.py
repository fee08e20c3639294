#!/usr/bin/env python3
"""Checks a Grafana dashboard's Prometheus queries against real /metrics.

  check_dashboard.py DASHBOARD.json [--only PREFIX | --except PREFIX] METRICS...

Every metric name a panel's `expr` uses must appear as a sample in one of
the METRICS files (Prometheus text exposition scraped from a running
service; a histogram's `_bucket`, `_sum` and `_count` count for its base
name). `--only rabbitmq_` checks only the broker's names (when METRICS are
the broker's), `--except rabbitmq_` all others. Prints each name with where
it was found, or what is missing; exit 0 when nothing is missing, 1 when
something is, 2 for bad input.
"""
import json
import re
import sys

# PromQL words that are not metric names.
KEYWORDS = {
    "sum", "min", "max", "avg", "count", "stddev", "stdvar", "topk", "bottomk", "quantile", "count_values",
    "group", "by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "bool",
    "offset", "rate", "irate", "increase", "delta", "idelta", "deriv", "histogram_quantile", "label_values",
    "abs", "ceil", "floor", "round", "clamp_min", "clamp_max", "time", "vector", "scalar", "absent",
    "changes", "resets", "sort", "sort_desc", "avg_over_time", "max_over_time", "min_over_time",
    "sum_over_time", "count_over_time", "last_over_time", "le", "inf",
}


def names_in(expr):
    # Drop label matchers, strings, durations and Grafana variables first.
    stripped = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", expr)
    stripped = re.sub(r"\{[^}]*\}", " ", stripped)
    stripped = re.sub(r'"[^"]*"', " ", stripped)
    stripped = re.sub(r"\[[^\]]*\]", " ", stripped)
    stripped = re.sub(r"\$\{?\w+\}?", " ", stripped)
    words = re.findall(r"(?<![\w.])([a-zA-Z_:][a-zA-Z0-9_:]*)", stripped)
    return {w for w in words if w not in KEYWORDS and not re.fullmatch(r"\d+", w)}


def exposed(files):
    names = set()
    for path in files:
        with open(path, encoding="utf-8") as f:
            for line in f:
                if line.startswith("#") or not line.strip():
                    continue
                names.add(re.split(r"[{\s]", line, maxsplit=1)[0])
    return names


def main(argv):
    args = argv[1:]
    if not args:
        print(__doc__, file=sys.stderr)
        return 2
    dashboard, rest = args[0], args[1:]
    only = skip = None
    if rest[:1] == ["--only"]:
        only, rest = rest[1], rest[2:]
    elif rest[:1] == ["--except"]:
        skip, rest = rest[1], rest[2:]
    if not rest:
        print("no metrics files", file=sys.stderr)
        return 2
    with open(dashboard, encoding="utf-8") as f:
        board = json.load(f)
    used = {}

    def walk(panels):
        for panel in panels:
            for target in panel.get("targets", []):
                for name in names_in(target.get("expr", "")):
                    used.setdefault(name, []).append(panel.get("title", "?"))
            walk(panel.get("panels", []))

    walk(board.get("panels", []))
    if not used:
        print("the dashboard has no queries", file=sys.stderr)
        return 2
    have = exposed(rest)
    missing = []
    checked = 0
    for name in sorted(used):
        if only and not name.startswith(only):
            continue
        if skip and name.startswith(skip):
            continue
        checked += 1
        base = re.sub(r"_(bucket|sum|count)$", "", name)
        if name in have or (base != name and base + "_bucket" in have):
            print(f"ok       {name}")
        else:
            missing.append(name)
            print(f"MISSING  {name}  (panels: {', '.join(sorted(set(used[name])))})")
    print(f"check_dashboard: {checked} metric names checked, {len(missing)} missing")
    return 1 if missing or checked == 0 else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
