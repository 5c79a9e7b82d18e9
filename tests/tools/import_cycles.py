#!/usr/bin/env python3
"""Module import cycles inside each crate's src/.

Every file is a module. Its imports -- `use` trees (braces expanded, `self`, `super`, `crate`,
child-module-relative), and paths written in code that start with `crate`/`super`/`self`, a
child module or an imported name -- are resolved
through `mod` declarations and `use`/`pub use` re-exports to the module that DEFINES the item;
the file gets an edge to that module. `mod x;` alone is no edge. `#[cfg(test)]` modules are left
out. Prints every cycle (a strongly connected set of modules) and exits 1 if there is one."""
import os, re, sys

ITEM = re.compile(r'^(?:pub(?:\([^)]*\))?\s+)?(?:async\s+|unsafe\s+|const\s+(?=fn))*'
                  r'(fn|struct|enum|trait|type|const|static|mod|union)\s+(\w+)', re.M)
USE = re.compile(r'^\s*(?:pub(?:\([^)]*\))?\s+)?use\s+([^;]*);', re.M)
PATH = re.compile(r'(?<![\w:])(\w+)((?:::\w+)+)')

def strip(src):
    src = re.sub(r'r(#*)"(?:.|\n)*?"\1', '""', src)
    src = re.sub(r'"(?:\\.|[^"\\])*"', '""', src)
    src = re.sub(r"'(?:\\.|[^'\\])'", "' '", src)
    src = re.sub(r'/\*(?:.|\n)*?\*/', '', src)
    src = re.sub(r'//[^\n]*', '', src)
    # drop #[cfg(test)] items (a braced block or a `mod x;` line)
    out, i = [], 0
    for m in re.finditer(r'#\[cfg\(test\)\]', src):
        if m.start() < i: continue
        out.append(src[i:m.start()])
        j = m.end()
        semi, brace = src.find(';', j), src.find('{', j)
        if semi != -1 and (brace == -1 or semi < brace): i = semi + 1; continue
        depth = 0
        for k in range(brace, len(src)):
            depth += {'{': 1, '}': -1}.get(src[k], 0)
            if depth == 0: break
        i = k + 1
    out.append(src[i:])
    return ''.join(out)

def use_paths(tree):
    """`a::{b, c::{self, d as e}}` -> [(['a','b'], 'b'), (['a','c'], 'c'), (['a','c','d'], 'e')]"""
    toks = re.findall(r'::|\{|\}|,|\*|\w+', tree) + ['<end>']
    pos = 0
    def tree_at(prefix):  # one use tree; leaves pos at the `,` / `}` / end after it
        nonlocal pos
        path = list(prefix)
        while True:
            t = toks[pos]
            if t == '::': pos += 1
            elif t == '{':
                pos += 1
                res = []
                while toks[pos] != '}':
                    res += tree_at(path)
                    if toks[pos] == ',': pos += 1
                pos += 1
                return res
            elif t == '*': pos += 1; return [(path + ['*'], '*')]
            elif t == 'as': pos += 2; return [(path, toks[pos - 1])]
            elif t in (',', '}', '<end>'): return [(path, path[-1])] if path else []
            elif t == 'self' and path: pos += 1
            else: path.append(t); pos += 1
    return tree_at([])

class Crate:
    def __init__(self, src_dir):
        self.root = src_dir
        self.files = {}  # module path tuple -> file
        self.children, self.defs, self.uses, self.code = {}, {}, {}, {}
        top = 'lib.rs' if os.path.exists(os.path.join(src_dir, 'lib.rs')) else 'main.rs'
        self.load((), os.path.join(src_dir, top), src_dir)

    def load(self, mod, path, dir_):
        self.files[mod] = path
        src = strip(open(path).read())
        self.children[mod] = set()
        self.defs[mod] = set()
        self.code[mod] = src
        for kind, name in ITEM.findall(src):
            if kind == 'mod':
                m = re.search(r'^(?:pub(?:\([^)]*\))?\s+)?mod\s+' + name + r'\s*(;|\{)', src, re.M)
                if m and m.group(1) == ';':
                    f1, f2 = os.path.join(dir_, name + '.rs'), os.path.join(dir_, name, 'mod.rs')
                    f = f1 if os.path.exists(f1) else f2
                    self.children[mod].add(name)
                    self.load(mod + (name,), f, os.path.join(dir_, name))
                    continue
            self.defs[mod].add(name)
        self.uses[mod] = {}
        for tree in USE.findall(src):
            for p, alias in use_paths(tree):
                self.uses[mod].setdefault(alias, []).append(p)

    def start(self, mod, p, seen=frozenset()):
        """Absolute module path and remaining segments of path p written in mod, or None (extern)."""
        if not p: return None
        # `use jiff;` or `use kube::{self}` name an extern crate by itself: not a module here.
        if (mod, p[0]) in seen: return None
        seen = seen | {(mod, p[0])}
        if p[0] == 'crate': return (), p[1:]
        if p[0] in ('self', 'super'):
            m = mod
            while p and p[0] in ('self', 'super'):
                if p[0] == 'super': m = m[:-1]
                p = p[1:]
            return m, p
        if p[0] in self.children[mod] or p[0] in self.defs[mod]: return mod, p
        if p[0] in self.uses[mod]:
            for q in self.uses[mod][p[0]]:
                s = self.start(mod, q, seen)
                if s: return s[0], s[1] + p[1:]
        return None

    def resolve(self, mod, p, depth=0):
        """Module that defines what path p (written in mod) names."""
        s = self.start(mod, p)
        if s is None or depth > 20: return None
        m, rest = s
        while rest:
            head = rest[0]
            if head == '*': return m
            if head in self.children[m]: m = m + (head,); rest = rest[1:]; continue
            if head in self.defs[m]: return m
            if head in self.uses[m]:
                for q in self.uses[m][head]:
                    r = self.resolve(m, q + rest[1:], depth + 1)
                    if r is not None: return r
            return m
        return m

    def graph(self):
        g = {m: set() for m in self.files}
        for mod in self.files:
            paths = [p for ps in self.uses[mod].values() for p in ps]
            body = USE.sub('', self.code[mod])
            local = self.children[mod] | set(self.uses[mod]) | {'crate', 'super', 'self'}
            paths += [[a] + b.split('::')[1:] for a, b in PATH.findall(body) if a in local]
            for p in paths:
                r = self.resolve(mod, p)
                if r is not None and r != mod: g[mod].add(r)
        return g

def sccs(g):
    idx, low, st, on, out, n = {}, {}, [], set(), [], [0]
    def visit(v):
        idx[v] = low[v] = n[0]; n[0] += 1; st.append(v); on.add(v)
        for w in g[v]:
            if w not in idx: visit(w); low[v] = min(low[v], low[w])
            elif w in on: low[v] = min(low[v], idx[w])
        if low[v] == idx[v]:
            c = []
            while True:
                w = st.pop(); on.discard(w); c.append(w)
                if w == v: break
            if len(c) > 1: out.append(sorted(c))
    sys.setrecursionlimit(10000)
    for v in g:
        if v not in idx: visit(v)
    return out

def name(m): return '::'.join(m) or 'crate'

verbose = '-v' in sys.argv
found = 0
for d in [a for a in sys.argv[1:] if a != '-v']:
    # A src/ folder that is no crate's (the book's docs/src) has no modules to read.
    if not os.path.isfile(os.path.join(os.path.dirname(os.path.normpath(d)) or '.', 'Cargo.toml')):
        continue
    c = Crate(d)
    g = c.graph()
    if verbose:
        for m in sorted(g): print(f'{d}: {name(m)} -> {", ".join(name(x) for x in sorted(g[m])) or "-"}')
    for comp in sccs(g):
        found += 1
        edges = [f'{name(a)} -> {name(b)}' for a in comp for b in sorted(g[a]) if b in comp]
        print(f'{d}: cycle among {", ".join(name(m) for m in comp)}:\n    ' + '\n    '.join(edges))
sys.exit(1 if found else 0)
