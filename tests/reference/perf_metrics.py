#!/usr/bin/env python3
"""Reference evaluator for perf's metric expressions: an independent oracle
that cgperf's own metric parser and evaluator are checked against.

    perf_metrics.py tables DIR --literals JSON   # perf's pmu-events tables
    perf_metrics.py exprs --literals JSON < IN   # {name: {"expr", "scale_unit"}}

Both print one JSON object: `tables` gives {model: {metric: result}}, where
a model is each directory under DIR (relative, `/`-separated) that directly
holds .json files with MetricExpr entries, `sys/` directories included;
`exprs` gives {metric: result}. A result is a number, null (no value: a
division or remainder by zero, or a non-finite result) or "error: ..."
(syntax, unknown literal, cycle). Every input is deterministic, so a test
can compute the same independently:

- an event N is worth 1 + fnv1a64(N as UTF-8) % 1000003, N unescaped
  (a backslash keeps the next character: `cpu@X\\,cmask\\=1@` is `cpu@X,cmask=1@`);
  names are runs of letters, digits, `_ . : @ ?` and escapes, as in perf's
  lexer: an unescaped `-`, `/`, `=` or `,` ends a name, so `a-b` is a
  subtraction; `?` (a perf run-time parameter) is kept as it is;
- `#name` literals come from --literals (a JSON object, keys with `#`,
  matched case-insensitively); an unknown one is an error wherever it is;
- a name equal (case-insensitively) to a MetricName of the same model is that
  metric's value without its ScaleUnit; where a name is there more than once
  (hybrid models: one per `Unit`), a reference goes to the one with the
  referring metric's Unit, else the first; the second and later are keyed
  `NAME@Unit` in the output;
- d_ratio(a, b) is a / b, or 0 when b == 0; min and max take one or more
  arguments; source_count(x) is 1; `<` and `>` give 1 or 0; `a if c else b`
  evaluates only the branch chosen (c true when != 0); `%` truncates both
  sides to integers and keeps the dividend's sign, as perf's C does;
  precedence: if/else < (`<` `>`) < (`+` `-`) < (`*` `/` `%`) < unary minus,
  all left-associative;
- a result is multiplied by the number ScaleUnit starts with (`100%`: 100).
"""

import argparse
import json
import math
import os
import re
import sys

NUMBER = re.compile(r"([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?")
SYMBOL = re.compile(r"(?:\\.|[0-9A-Za-z_.:@?])+", re.S)
LITERAL = re.compile(r"#[0-9A-Za-z_.\-]+")
KEYWORDS = {"if", "else", "min", "max", "d_ratio", "source_count"}
SCALE = re.compile(r"\s*([-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?)")


class Error(Exception):
    """The metric's result is the string "error: ..."."""


class NoValue(Exception):
    """The metric has no value (null)."""


def fnv1a64(data):
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def event_value(name):
    return float(1 + fnv1a64(name.encode("utf-8")) % 1000003)


def tokens(text):
    """(kind, value) pairs; like flex, the longest match wins and a number
    wins a tie with a name (`1e9` is a number, `0x1f` a name)."""
    i = 0
    while i < len(text):
        c = text[i]
        if c.isspace():
            i += 1
            continue
        num, sym = NUMBER.match(text, i), SYMBOL.match(text, i)
        if c == "#":
            m = LITERAL.match(text, i)
            if not m:
                raise Error("error: syntax: lone #")
            yield "lit", m.group(0)
        elif num and (not sym or num.end() >= sym.end()):
            m = num
            yield "num", float(m.group(0))
        elif sym:
            m = sym
            raw = m.group(0)
            if raw in KEYWORDS:
                yield raw, raw
            else:
                yield "name", re.sub(r"\\(.)", r"\1", raw, flags=re.S)
        elif c in "+-*/%<>(),":
            yield c, c
            i += 1
            continue
        else:
            raise Error("error: syntax: unexpected %r" % c)
        i = m.end()
    yield "end", None


class Parser:
    """Recursive descent to tuples: ("num", v) ("lit", s) ("name", s)
    ("neg", x) ("if", a, c, b) ("call", f, [args]) (op, l, r)."""

    def __init__(self, text):
        self.toks = list(tokens(text))
        self.pos = 0

    def peek(self):
        return self.toks[self.pos][0]

    def take(self, kind=None):
        tok = self.toks[self.pos]
        if kind and tok[0] != kind:
            found = "end" if tok[1] is None else tok[1]
            raise Error("error: syntax: expected %s, found %s" % (kind, found))
        self.pos += 1
        return tok

    def parse(self):
        tree = self.cond()
        self.take("end")
        return tree

    def cond(self):
        a = self.binary(0)
        if self.peek() != "if":
            return a
        self.take()
        c = self.binary(0)
        self.take("else")
        return ("if", a, c, self.cond())

    LEVELS = [("<", ">"), ("+", "-"), ("*", "/", "%")]

    def binary(self, level):
        if level == len(self.LEVELS):
            return self.unary()
        left = self.binary(level + 1)
        while self.peek() in self.LEVELS[level]:
            op = self.take()[0]
            left = (op, left, self.binary(level + 1))
        return left

    def unary(self):
        if self.peek() == "-":
            self.take()
            return ("neg", self.unary())
        kind, value = self.take()
        if kind in ("num", "lit", "name"):
            return (kind, value)
        if kind == "(":
            inner = self.cond()
            self.take(")")
            return inner
        if kind == "source_count":
            self.take("(")
            self.take("name")  # counted, not evaluated
            self.take(")")
            return ("num", 1.0)
        if kind in ("min", "max", "d_ratio"):
            self.take("(")
            args = [self.cond()]
            while self.peek() == ",":
                self.take()
                args.append(self.cond())
            self.take(")")
            if kind == "d_ratio" and len(args) != 2:
                raise Error("error: syntax: d_ratio takes 2 arguments")
            return ("call", kind, args)
        raise Error("error: syntax: unexpected %s" % ("end" if value is None else value))


def scale_of(scale_unit):
    m = SCALE.match(scale_unit or "")
    return float(m.group(1)) if m else 1.0


class Metric:
    def __init__(self, key, name, expr, scale_unit, unit=None):
        self.key, self.name, self.unit = key, name, unit
        self.scale = scale_of(scale_unit)
        try:
            self.tree, self.error = Parser(expr).parse(), None
        except Error as e:
            self.tree, self.error = None, str(e)


class Model:
    def __init__(self, metrics, literals):
        self.metrics = metrics
        self.literals = {k.lower(): float(v) for k, v in literals.items()}
        self.by_name = {}
        for m in metrics:
            self.by_name.setdefault(m.name.lower(), []).append(m)
        self.problems, self.values = {}, {}

    def ref(self, name, referrer):
        found = self.by_name.get(name.lower())
        if not found:
            return None
        return next((m for m in found if m.unit == referrer.unit), found[0])

    def problem(self, metric, stack=()):
        """The first static error of the metric and what it refers to."""
        if metric in stack:
            return "error: cycle"
        if metric not in self.problems:
            self.problems[metric] = metric.error or self.walk(
                metric.tree, metric, stack + (metric,))
        return self.problems[metric]

    def walk(self, node, metric, stack):
        if node[0] == "lit":
            if node[1].lower() not in self.literals:
                return "error: unknown literal " + node[1]
            return None
        if node[0] == "name":
            target = self.ref(node[1], metric)
            return target and self.problem(target, stack)
        for child in node[1:]:
            for sub in (child if isinstance(child, list) else [child]):
                if isinstance(sub, tuple):
                    found = self.walk(sub, metric, stack)
                    if found:
                        return found
        return None

    def value(self, metric):
        """The metric's value without its scale; raises NoValue."""
        if metric not in self.values:
            try:
                v = self.eval(metric.tree, metric)
                self.values[metric] = v if math.isfinite(v) else None
            except NoValue:
                self.values[metric] = None
        if self.values[metric] is None:
            raise NoValue
        return self.values[metric]

    def eval(self, node, metric):
        kind = node[0]
        if kind == "num":
            return node[1]
        if kind == "lit":
            return self.literals[node[1].lower()]
        if kind == "name":
            target = self.ref(node[1], metric)
            return self.value(target) if target else event_value(node[1])
        if kind == "neg":
            return -self.eval(node[1], metric)
        if kind == "if":
            chosen = node[1] if self.eval(node[2], metric) != 0 else node[3]
            return self.eval(chosen, metric)
        if kind == "call":
            args = [self.eval(a, metric) for a in node[2]]
            if node[1] == "d_ratio":
                return 0.0 if args[1] == 0 else args[0] / args[1]
            return min(args) if node[1] == "min" else max(args)
        a, b = self.eval(node[1], metric), self.eval(node[2], metric)
        if kind in ("/", "%") and b == 0:
            raise NoValue
        if kind == "%":
            if not (math.isfinite(a) and math.isfinite(b)) or int(b) == 0:
                raise NoValue
            ia, ib = int(a), int(b)  # C: (long)a % (long)b
            r = abs(ia) % abs(ib)
            return float(-r if ia < 0 else r)
        return {"+": lambda: a + b, "-": lambda: a - b, "*": lambda: a * b,
                "/": lambda: a / b, "<": lambda: float(a < b),
                ">": lambda: float(a > b)}[kind]()

    def results(self):
        out = {}
        for m in self.metrics:
            found = self.problem(m)
            if found:
                out[m.key] = found
                continue
            try:
                v = self.value(m) * m.scale
                out[m.key] = v if math.isfinite(v) else None
            except NoValue:
                out[m.key] = None
        return out


def load_tables(root):
    models, arch_std = {}, 0
    for d, dirs, files in os.walk(root):
        dirs.sort()
        metrics, seen = [], set()
        for f in sorted(files):
            if not f.endswith(".json"):
                continue
            try:
                with open(os.path.join(d, f), encoding="utf-8") as fh:
                    entries = json.load(fh)
            except ValueError as e:
                print("skipping %s: %s" % (os.path.join(d, f), e), file=sys.stderr)
                continue
            if not isinstance(entries, list):
                continue
            for e in entries:
                if not isinstance(e, dict):
                    continue
                if "ArchStdEvent" in e and "MetricName" in e and "MetricExpr" not in e:
                    arch_std += 1
                if "MetricExpr" not in e or "MetricName" not in e:
                    continue
                key = e["MetricName"]
                if key in seen:
                    key = "%s@%s" % (key, e.get("Unit", ""))
                if key in seen:
                    print("%s: %s twice, second ignored" % (d, key), file=sys.stderr)
                    continue
                seen.add(key)
                metrics.append(Metric(key, e["MetricName"], e["MetricExpr"],
                                      e.get("ScaleUnit"), e.get("Unit")))
        if metrics:
            rel = os.path.relpath(d, root).replace(os.sep, "/")
            models[rel] = metrics
    print("metric entries relying on ArchStdEvent (ignored): %d" % arch_std, file=sys.stderr)
    return models


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("mode", choices=["tables", "exprs"])
    ap.add_argument("dir", nargs="?")
    ap.add_argument("--literals", default="{}", help="JSON object of #literals")
    args = ap.parse_args()
    literals = json.loads(args.literals)
    if args.mode == "tables":
        if not args.dir:
            ap.error("tables needs DIR")
        out = {rel: Model(ms, literals).results()
               for rel, ms in sorted(load_tables(args.dir).items())}
    else:
        given = json.load(sys.stdin)
        out = Model([Metric(n, n, v["expr"], v.get("scale_unit")) for n, v in given.items()],
                    literals).results()
    json.dump(out, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
