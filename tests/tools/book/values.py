#!/usr/bin/env python3
"""Checks that every chart value the book names exists in the chart's values.yaml.

Usage: values.py VALUES_YAML MARKDOWN...   (e.g. charts/holdfast/values.yaml README.md docs/src/**/*.md)

Two kinds of names are checked:
  (a) each inline code span (`...`) outside fenced code blocks that is a dotted path
      (^[a-zA-Z][A-Za-z0-9]*(\\.[A-Za-z0-9_-]+)+$) whose first segment is a top-level key of
      values.yaml, e.g. `webhook.limits.maxConcurrent` (file names such as `kueue.rs`, whose
      last segment is a file ending, are left out);
  (b) each key of `--set`, `--set-string`, `--set-json`, `--set-file` and `--set-literal`
      key=value pairs (comma-separated ones too) in fenced code blocks, `[n]` list indices
      stripped.
A name resolves when each segment is a key of the map reached so far. A path that reaches a
list or an empty map (`[]`, `{}`: free-form, such as labels) is accepted whatever follows;
one that goes on past a scalar is not.

values.yaml is parsed with PyYAML when it is importable, else with a small extractor of
block-map keys by indentation (values.yaml is plain block YAML: maps, `- ` lists, one-line
`{...}` and `[...]` flow values, comments). Nothing is installed.

Exits 1 listing each name that does not resolve as `file:line: name -> what is missing`.
"""

import re
import shlex
import sys
from pathlib import Path


class Leaf:
    """A node below which any path is accepted (LIST, FREE) or none is (SCALAR)."""

    def __init__(self, name, open_):
        self.name, self.open = name, open_

    def __repr__(self):
        return self.name


LIST = Leaf("a list", True)
FREE = Leaf("an empty map", True)
SCALAR = Leaf("a scalar", False)

# The chart's keys are identifiers (no `-`), so a dotted name with a `-` in it is an API group
# or a host (`kueue.x-k8s.io`), not a value path.
DOTTED = re.compile(r"^[a-zA-Z][A-Za-z0-9]*(\.[A-Za-z0-9_]+)+$")
# A file name such as `kueue.rs` (a test module) matches DOTTED; these endings are not values.
FILE_ENDINGS = {"rs", "md", "yaml", "yml", "json", "toml", "sh", "py", "go", "txt", "html", "svg", "png", "tpl"}
SET_FLAGS = ("--set", "--set-string", "--set-json", "--set-file", "--set-literal")
FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")


def shape(value):
    """PyYAML's value as the tree this check walks: dicts, LIST, FREE or SCALAR."""
    if isinstance(value, dict):
        return {str(k): shape(v) for k, v in value.items()} if value else FREE
    if isinstance(value, list):
        return LIST
    return SCALAR


def unquote(key):
    key = key.strip()
    if len(key) >= 2 and key[0] == key[-1] and key[0] in "'\"":
        return key[1:-1]
    return key


def split_top(text, sep):
    """Splits at `sep` outside brackets and quotes."""
    parts, depth, quote, cur = [], 0, None, []
    for ch in text:
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
        elif ch == sep and depth == 0:
            parts.append("".join(cur))
            cur = []
            continue
        cur.append(ch)
    parts.append("".join(cur))
    return parts


def strip_comment(value):
    """A plain scalar's ` #` comment removed (quotes respected)."""
    quote = None
    for i, ch in enumerate(value):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or value[i - 1] in " \t"):
            return value[:i].rstrip()
    return value.strip()


def flow_value(text):
    """A one-line value: `{k: v, ...}` (nested too), `[...]`, or a scalar."""
    text = text.strip()
    if text.startswith("{") and text.endswith("}"):
        inner = text[1:-1].strip()
        if not inner:
            return FREE
        out = {}
        for item in split_top(inner, ","):
            if not item.strip():
                continue
            key, _, rest = item.partition(":")
            out[unquote(key)] = flow_value(rest)
        return out
    if text.startswith("["):
        return LIST
    return SCALAR


KEY_LINE = re.compile(r"^(\s*)((?:\"[^\"]*\"|'[^']*'|[^\s#'\"][^:#]*?))\s*:(?:\s+(.*))?$")


def parse_fallback(text):
    """values.yaml's keys by indentation, without PyYAML (block maps, `- ` lists, flow values)."""
    root = {}
    # Each entry: (indent, the map its keys go into, the key's parent map, the key).
    stack = [(-1, root, None, None)]
    skip_above = None  # lines more indented than this belong to a list item or a block scalar
    for raw in text.splitlines():
        stripped = raw.strip()
        if not stripped or stripped.startswith("#") or stripped in ("---", "..."):
            continue
        indent = len(raw) - len(raw.lstrip(" "))
        if skip_above is not None:
            if indent > skip_above or (indent == skip_above and (stripped.startswith("- ") or stripped == "-")):
                continue
            skip_above = None
        if stripped.startswith("- ") or stripped == "-":
            while len(stack) > 1 and stack[-1][0] > indent:
                stack.pop()
            _, node, parent, key = stack[-1]
            if parent is not None and not node:
                parent[key] = LIST  # the key above opened a list, not a map
                stack.pop()
            skip_above = indent
            continue
        m = KEY_LINE.match(raw)
        if not m:
            continue  # a continuation of a multi-line plain scalar
        key, value = unquote(m.group(2)), strip_comment(m.group(3) or "")
        while len(stack) > 1 and stack[-1][0] >= indent:
            stack.pop()
        _, container, _, _ = stack[-1]
        if not isinstance(container, dict):
            continue
        if value == "":
            child = {}
            container[key] = child
            stack.append((indent, child, container, key))
        elif value[0] in "|>":
            container[key] = SCALAR
            skip_above = indent
        else:
            container[key] = flow_value(value)

    def close(node):  # an empty-valued key with nothing below is null
        return {k: (close(v) if v else SCALAR) if isinstance(v, dict) else v for k, v in node.items()}

    return close(root)


def load_values(path):
    text = Path(path).read_text(encoding="utf-8")
    try:
        import yaml  # noqa: PLC0415 (optional)
    except ImportError:
        return parse_fallback(text), "the fallback extractor"
    return shape(yaml.safe_load(text)), "PyYAML"


def segments(name):
    """`a.b[0].c\\.d` -> ["a", "b", "c.d"]: list indices stripped, escaped dots kept."""
    name = re.sub(r"\[\d*\]", "", name)
    return [s.replace("\\.", ".") for s in re.split(r"(?<!\\)\.", name)]


def resolve(tree, name):
    """None when `name` resolves, else what is missing."""
    node, walked = tree, []
    for seg in segments(name):
        if isinstance(node, Leaf):
            if node.open:
                return None
            return f"{'.'.join(walked)} is {node!r} in values.yaml, it has no key {seg!r}"
        if seg not in node:
            under = ".".join(walked) if walked else "the top level"
            keys = ", ".join(sorted(node)[:12]) + (", ..." if len(node) > 12 else "")
            return f"values.yaml has no key {seg!r} under {under} (its keys: {keys})"
        node = node[seg]
        walked.append(seg)
    return None


def code_blocks_and_prose(lines):
    """Yields (line number, text, in_code) for each line, fence lines left out."""
    fence = None
    for no, line in enumerate(lines, 1):
        m = FENCE.match(line)
        if fence is None and m:
            fence = m.group(1)
            continue
        if fence is not None and m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence) and not m.group(2).strip():
            fence = None
            continue
        yield no, line, fence is not None


def set_keys(command):
    """The keys of the --set-style flags in one (joined) shell command."""
    try:
        words = shlex.split(command, comments=True)
    except ValueError:
        words = command.split()
    keys = []
    for i, w in enumerate(words):
        arg = None
        for flag in SET_FLAGS:
            if w == flag and i + 1 < len(words):
                arg = words[i + 1]
            elif w.startswith(flag + "="):
                arg = w[len(flag) + 1 :]
        if arg is None:
            continue
        for pair in split_top(arg, ","):
            key, eq, _ = pair.partition("=")
            if eq and key:
                keys.append(key)
    return keys


def names_in(path):
    """(line, name, kind) for each chart value named in one markdown file."""
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    out, pending, start = [], "", 0
    for no, line, in_code in code_blocks_and_prose(lines):
        if in_code:
            if not pending:
                start = no
            if line.rstrip().endswith("\\"):
                pending += line.rstrip()[:-1] + " "
                continue
            for key in set_keys(pending + line):
                out.append((start, key, "--set key"))
            pending = ""
            continue
        pending = ""
        for m in re.finditer(r"(`+)(.+?)(?<!`)\1(?!`)", line):
            token = m.group(2).strip()
            if DOTTED.match(token) and token.rsplit(".", 1)[1] not in FILE_ENDINGS:
                out.append((no, token, "inline code"))
    return out


def main(argv):
    if len(argv) < 3:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    tree, how = load_values(argv[1])
    problems, checked = [], 0
    for md in argv[2:]:
        for no, name, kind in names_in(md):
            first = segments(name)[0]
            if kind == "inline code" and first not in tree:
                continue  # `spec.suspend`, `holdfast.dev/hold`: not a chart value
            checked += 1
            missing = resolve(tree, name)
            if missing:
                problems.append(f"{md}:{no}: {kind} `{name}` -> {missing}")
    if problems:
        print(f"values: {len(problems)} chart value(s) named in the book are not in {argv[1]}:", file=sys.stderr)
        for p in problems:
            print(f"  {p}", file=sys.stderr)
        print(f"fix the name in the markdown (or add the value to {argv[1]} and its schema)", file=sys.stderr)
        return 1
    print(f"values: {checked} chart value names resolve in {argv[1]} (parsed with {how})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
