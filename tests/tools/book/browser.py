#!/usr/bin/env python3
"""Checks the rendered book in a real browser (headless Chromium), offline.

Usage: browser.py BUILD_DIR SUMMARY_MD   (e.g. docs/book docs/src/SUMMARY.md)

BUILD_DIR is served on a free loopback port (127.0.0.1 only, by a server in this process that
stops with it), and headless Chromium (installed from Debian's `chromium` package when
/usr/bin/chromium is missing) loads it:
  - the sidebar of index.html, as its JavaScript builds it, lists every chapter SUMMARY_MD
    names, with the link SUMMARY_MD gives it;
  - the search: index.html?search=hold (the parameter mdBook's searcher.js reads) lists results,
    and each result links to a page (and an id) the build has;
  - a chapter with a code block and a table renders `<pre><code class="... hljs">` with
    highlight.js's `hljs-*` spans, and a `<table>`;
  - every `<img>` of the book names a file that exists, an SVG one parses as XML with a
    viewBox or a width and height, a raster one is a PNG, JPEG, GIF or WebP;
  - screenshots (1000x700) of index.html and of that chapter, written to
    BUILD_DIR/screenshots/, are PNGs of that size that are not blank.
Every browser run has a timeout. Exits 1 naming each failed check and what to fix.
"""

import functools
import html.parser
import http.server
import os
import posixpath
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import xml.etree.ElementTree as ET
import zlib
from pathlib import Path

CHROMIUM = "/usr/bin/chromium"
SIZE = (1000, 700)
RUN_TIMEOUT = 30  # seconds, one browser run
INSTALL_TIMEOUT = 900  # seconds, apt-get update and install
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--hide-scrollbars",
    "--mute-audio",
]

failures = []


def fail(msg):
    failures.append(msg)
    print(f"browser: FAIL {msg}", file=sys.stderr)


def ensure_chromium():
    if os.access(CHROMIUM, os.X_OK):
        return
    print("browser: /usr/bin/chromium missing; installing Debian's chromium", file=sys.stderr)
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for cmd in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "chromium"]):
        try:
            subprocess.run(cmd, check=True, env=env, timeout=INSTALL_TIMEOUT, stdout=subprocess.DEVNULL)
        except (subprocess.SubprocessError, OSError) as e:
            sys.exit(f"browser: `{' '.join(cmd)}` failed ({e}); install Chromium at {CHROMIUM} (Debian: apt-get install chromium)")
    if not os.access(CHROMIUM, os.X_OK):
        sys.exit(f"browser: chromium installed but {CHROMIUM} is not there")


def chromium(url, *extra):
    """One headless run on a profile of its own; its stdout, or None after a failure."""
    profile = tempfile.mkdtemp(prefix="holdfast-book-chromium-")
    cmd = [CHROMIUM, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *extra, url]
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        try:
            out, err = proc.communicate(timeout=RUN_TIMEOUT)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            fail(f"chromium did not finish within {RUN_TIMEOUT}s on {url}")
            return None
        if proc.returncode != 0:
            tail = "\n    ".join(err.decode(errors="replace").splitlines()[-5:])
            fail(f"chromium exited {proc.returncode} on {url}:\n    {tail}")
            return None
        return out.decode(errors="replace")
    finally:
        shutil.rmtree(profile, ignore_errors=True)


def dump_dom(url):
    return chromium(url, "--virtual-time-budget=3000", "--dump-dom")


class Elements(html.parser.HTMLParser):
    """Start tags with attributes, and the text inside each `<a>` (for the sidebar)."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tags = []  # (tag, attrs dict)
        self.block_code = []  # the classes of each <code> inside a <pre>
        self._pre = 0
        self.anchors = []  # (href, text, inside the sidebar's <ol class="chapter">)
        self._a = None
        self._chapter_depth = 0
        self._ol_depth = 0
        self.ids = set()

    def handle_starttag(self, tag, attrs):
        a = {k: (v or "") for k, v in attrs}
        self.tags.append((tag, a))
        if tag == "pre":
            self._pre += 1
        if tag == "code" and self._pre:
            self.block_code.append(a.get("class", "").split())
        if "id" in a:
            self.ids.add(a["id"])
        if tag == "ol":
            self._ol_depth += 1
            if "chapter" in a.get("class", "").split() and not self._chapter_depth:
                self._chapter_depth = self._ol_depth
        if tag == "a":
            self._a = [a.get("href", ""), [], bool(self._chapter_depth)]

    def handle_endtag(self, tag):
        if tag == "pre" and self._pre:
            self._pre -= 1
        if tag == "ol":
            if self._chapter_depth == self._ol_depth:
                self._chapter_depth = 0
            self._ol_depth -= 1
        if tag == "a" and self._a is not None:
            href, text, in_toc = self._a
            self.anchors.append((href, " ".join("".join(text).split()), in_toc))
            self._a = None

    def handle_data(self, data):
        if self._a is not None:
            self._a[1].append(data)


def elements(text):
    p = Elements()
    p.feed(text)
    p.close()
    return p


def summary_chapters(summary):
    """(title, page.html) of each linked chapter in SUMMARY.md (drafts, `[x]()`, left out)."""
    out = []
    for m in re.finditer(r"\[((?:[^\[\]]|\[[^\]]*\])+)\]\(([^)\s]+)\)", summary.read_text(encoding="utf-8")):
        title, target = m.group(1), m.group(2).split("#")[0]
        if target.endswith(".md"):
            title = re.sub(r"[`*_]", "", title)
            out.append((" ".join(title.split()), target[: -len(".md")] + ".html"))
    return out


def check_sidebar(base, summary):
    dom = dump_dom(base + "index.html")
    if dom is None:
        return
    toc = [(h, t) for h, t, in_toc in elements(dom).anchors if in_toc]
    if not toc:
        fail("index.html: the sidebar (<ol class=\"chapter\">) is empty in the rendered DOM; toc.js did not build it")
        return
    wanted, bad = summary_chapters(summary), len(failures)
    for title, page in wanted:
        if not any(h == page and (t == title or t.endswith(" " + title)) for h, t in toc):
            fail(f"index.html: the sidebar has no entry {title!r} -> {page} (SUMMARY.md names it); it lists: "
                 + ", ".join(f"{t!r} -> {h}" for h, t in toc))
    if len(failures) == bad:
        print(f"browser: the sidebar lists the {len(wanted)} chapters of SUMMARY.md")


def check_search(base, root):
    dom = dump_dom(base + "index.html?search=hold")
    if dom is None:
        return
    # The result list is <ul id="mdbook-searchresults"><li><a href=...>...
    m = re.search(r'<ul id="mdbook-searchresults"[^>]*>(.*?)</ul>', dom, re.S)
    results = [h for h, _, _ in elements(m.group(1)).anchors] if m else []
    if not results:
        fail("index.html?search=hold lists no search results: mdBook's search (searcher.js, searchindex.js, "
             "[output.html.search] in book.toml) is broken or disabled")
        return
    for href in results:
        parts = urllib.parse.urlsplit(href)
        page = root / posixpath.normpath(urllib.parse.unquote(parts.path))
        if not page.is_file():
            fail(f"search result {href!r} names no page in the build")
        elif parts.fragment and urllib.parse.unquote(parts.fragment) not in elements(page.read_text(encoding="utf-8")).ids:
            fail(f"search result {href!r}: {page.name} has no id {parts.fragment!r}")
    print(f"browser: searching 'hold' lists {len(results)} results, each a page of the build")


def code_and_table_page(root):
    for page in sorted(root.rglob("*.html")):
        if page.name in ("print.html", "toc.html", "404.html") or page.parent.name == "screenshots":
            continue
        text = page.read_text(encoding="utf-8", errors="replace")
        if "<pre><code" in text and "<table" in text:
            return page.relative_to(root).as_posix()
    return None


def check_code_and_table(base, page):
    dom = dump_dom(base + page)
    if dom is None:
        return
    # mdBook's JavaScript puts its copy button between <pre> and <code>.
    highlighted = [c for c in elements(dom).block_code if "hljs" in c]
    if not highlighted:
        fail(f"{page}: no <pre><code class=\"... hljs\"> in the rendered DOM: highlight.js did not run")
    elif 'class="hljs-' not in dom:
        fail(f"{page}: code blocks have no highlight.js spans (class=\"hljs-...\")")
    if "<table" not in dom:
        fail(f"{page}: no <table> in the rendered DOM")
    print(f"browser: {page} renders highlighted code ({len(highlighted)} blocks) and a table")


def check_images(root):
    seen = {}
    for page in sorted(root.rglob("*.html")):
        rel = page.relative_to(root)
        for tag, a in elements(page.read_text(encoding="utf-8", errors="replace")).tags:
            src = a.get("src", "")
            if tag != "img" or not src or urllib.parse.urlsplit(src).scheme or src.startswith("//"):
                continue
            path = (page.parent / urllib.parse.unquote(urllib.parse.urlsplit(src).path)).resolve()
            seen.setdefault(path, f"{rel.as_posix()}: <img src={src!r}>")
    bad = len(failures)
    for path, where in seen.items():
        if not path.is_file():
            fail(f"{where}: the file does not exist in the build (put it under docs/src/ next to the page)")
            continue
        data = path.read_bytes()
        if path.suffix.lower() == ".svg":
            try:
                svg = ET.fromstring(data)
            except ET.ParseError as e:
                fail(f"{where}: not well-formed XML ({e})")
                continue
            if not svg.tag.endswith("svg"):
                fail(f"{where}: the root element is {svg.tag}, not <svg>")
            elif "viewBox" not in svg.attrib and not ("width" in svg.attrib and "height" in svg.attrib):
                fail(f"{where}: the SVG has neither a viewBox nor a width and height, so it renders at no size")
        elif not (data.startswith(b"\x89PNG\r\n\x1a\n") or data.startswith(b"\xff\xd8\xff")
                  or data[:6] in (b"GIF87a", b"GIF89a") or (data[:4] == b"RIFF" and data[8:12] == b"WEBP")):
            fail(f"{where}: not a PNG, JPEG, GIF or WebP picture")
    if len(failures) == bad:
        print(f"browser: {len(seen)} pictures exist and are pictures")


def png_pixels(path):
    """(width, height, rows of pixel tuples) of an 8-bit non-interlaced PNG, decoded with zlib."""
    data = path.read_bytes()
    if not data.startswith(b"\x89PNG\r\n\x1a\n"):
        raise ValueError("not a PNG (bad signature)")
    pos, idat, ihdr = 8, b"", None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos : pos + 8])
        body = data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            ihdr = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        elif kind == b"IEND":
            break
        pos += 12 + length
    if ihdr is None:
        raise ValueError("no IHDR chunk")
    width, height, depth, colour, _, _, interlace = ihdr
    channels = {0: 1, 2: 3, 4: 2, 6: 4}.get(colour)
    if depth != 8 or channels is None or interlace:
        raise ValueError(f"unexpected PNG format (depth {depth}, colour type {colour}, interlace {interlace})")
    raw = zlib.decompress(idat)
    stride, bpp = width * channels, channels
    rows, prev, pos = [], bytearray(stride), 0
    for _ in range(height):
        ftype, line = raw[pos], bytearray(raw[pos + 1 : pos + 1 + stride])
        pos += 1 + stride
        for i in range(stride):
            left = line[i - bpp] if i >= bpp else 0
            up, ul = prev[i], (prev[i - bpp] if i >= bpp else 0)
            if ftype == 1:
                line[i] = (line[i] + left) & 0xFF
            elif ftype == 2:
                line[i] = (line[i] + up) & 0xFF
            elif ftype == 3:
                line[i] = (line[i] + ((left + up) >> 1)) & 0xFF
            elif ftype == 4:
                p = left + up - ul
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - ul)
                line[i] = (line[i] + (left if pa <= pb and pa <= pc else up if pb <= pc else ul)) & 0xFF
        rows.append(bytes(line))
        prev = line
    return width, height, rows, channels


def check_screenshot(base, page, out):
    if chromium(base + page, f"--window-size={SIZE[0]},{SIZE[1]}", "--virtual-time-budget=2000", f"--screenshot={out}") is None:
        return
    try:
        width, height, rows, channels = png_pixels(out)
    except (ValueError, zlib.error, struct.error, IndexError) as e:
        fail(f"screenshot of {page} ({out}) is not a valid PNG: {e}")
        return
    if (width, height) != SIZE:
        fail(f"screenshot of {page} is {width}x{height}, not {SIZE[0]}x{SIZE[1]}")
        return
    counts = {}
    for row in rows:
        for i in range(0, len(row), channels):
            px = row[i : i + channels]
            counts[px] = counts.get(px, 0) + 1
    background = max(counts.values())
    inked = 1 - background / (width * height)
    if len(counts) < 16 or inked < 0.01:
        fail(f"screenshot of {page} looks blank: {len(counts)} distinct colours, {inked:.1%} of pixels off the background")
        return
    print(f"browser: screenshot of {page}: {out} ({width}x{height}, {len(counts)} colours, {inked:.0%} inked)")


def main(argv):
    if len(argv) != 3:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    root, summary = Path(argv[1]).resolve(), Path(argv[2])
    if not (root / "index.html").is_file():
        print(f"browser: {root} has no index.html: build the book first", file=sys.stderr)
        return 2
    ensure_chromium()
    handler = functools.partial(QuietHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{server.server_address[1]}/"
    started = time.monotonic()
    try:
        check_sidebar(base, summary)
        check_search(base, root)
        page = code_and_table_page(root)
        if page is None:
            fail("no chapter has both a code block and a table; the rendering check needs one")
        else:
            check_code_and_table(base, page)
        check_images(root)
        shots = root / "screenshots"
        shots.mkdir(exist_ok=True)
        for p in ["index.html"] + ([page] if page else []):
            check_screenshot(base, p, shots / (p.replace("/", "_")[: -len(".html")] + ".png"))
    finally:
        server.shutdown()
        server.server_close()
    if failures:
        print(f"browser: {len(failures)} check(s) failed (see FAIL lines above)", file=sys.stderr)
        return 1
    print(f"browser: all checks passed in {time.monotonic() - started:.1f}s")
    return 0


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 (the base class's name)
        pass


if __name__ == "__main__":
    sys.exit(main(sys.argv))
