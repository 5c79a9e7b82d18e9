#!/usr/bin/env python3
"""Checks every internal link of the rendered book, offline.

Usage: links.py BUILD_DIR   (the book's build output, e.g. docs/book)

Every HTML page under BUILD_DIR (chapters, print.html, toc.html, 404.html) is read, and each
relative or site-absolute `href` and `src` on any element must name a file in the build (a
directory stands for its index.html), and a `#fragment` on a link to an HTML page must be an
`id` (or an `<a name>`) in that page. External links (http:, https:, mailto:, and other
schemes such as data: or javascript:) are skipped: there is no network here.

mdBook's own theme assets (CSS, JavaScript, fonts) are not read for links of their own, but a
page's links to them are checked like any other. A page with a `<base href>` (mdBook's
404.html, whose base is the book's site-url) has its links resolved against that base, the
site-url standing for BUILD_DIR.

Exits 1 listing every broken link as `page: link -> what is missing`, 0 when all resolve.
"""

import html.parser
import posixpath
import sys
import urllib.parse
from pathlib import Path


class Page(html.parser.HTMLParser):
    """The links, the ids and the `<base href>` of one HTML page."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.links = []  # (line, attribute, value)
        self.ids = set()
        self.base = None

    def handle_starttag(self, tag, attrs):
        line = self.getpos()[0]
        for name, value in attrs:
            if value is None:
                continue
            if name == "id" or (tag == "a" and name == "name"):
                self.ids.add(value)
            if tag == "base" and name == "href":
                self.base = value
            elif name in ("href", "src"):
                self.links.append((line, name, value))

    handle_startendtag = handle_starttag


def parse(path):
    page = Page()
    page.feed(path.read_text(encoding="utf-8", errors="replace"))
    page.close()
    return page


def is_external(value):
    """http(s), mailto and any other scheme (data:, javascript:, tel:, ...), or //host."""
    if value.startswith("//"):
        return True
    scheme = urllib.parse.urlsplit(value).scheme
    return scheme != ""


def main(argv):
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    root = Path(argv[1]).resolve()
    if not (root / "index.html").is_file():
        print(f"links: {root} has no index.html: build the book first", file=sys.stderr)
        return 2
    pages = sorted(root.rglob("*.html"))
    parsed = {}

    def page_of(path):
        if path not in parsed:
            parsed[path] = parse(path)
        return parsed[path]

    # The site-url is 404.html's base (mdBook writes it there); links under it are the build's.
    site = "/"
    notfound = root / "404.html"
    if notfound.is_file() and page_of(notfound).base:
        site = page_of(notfound).base
        if not site.endswith("/"):
            site += "/"

    broken = []
    checked = 0
    for path in pages:
        page = page_of(path)
        rel_page = path.relative_to(root).as_posix()
        # The directory (inside the build, as a posix path from its root) links resolve from.
        base_dir = posixpath.dirname(rel_page)
        if page.base is not None:
            base = page.base
            if base.startswith(site):
                base_dir = base[len(site):].rstrip("/")
            elif base.startswith("/"):
                base_dir = None  # a base outside the site: only fragments are checked
        # dict.fromkeys: mdBook writes each image twice (the picture and its zoomed copy).
        for line, attr, value in dict.fromkeys(page.links):
            value = value.strip()
            if not value or is_external(value):
                continue
            checked += 1
            parts = urllib.parse.urlsplit(value)
            target_path = urllib.parse.unquote(parts.path)
            fragment = urllib.parse.unquote(parts.fragment)
            where = f"{rel_page}:{line}"
            if target_path == "":
                target = path  # `#x` or `?q`: this page
            else:
                if target_path.startswith("/"):
                    if not target_path.startswith(site) and target_path + "/" != site:
                        broken.append(f"{where}: {attr}=\"{value}\" -> outside the book's site-url {site}")
                        continue
                    joined = target_path[len(site):]
                elif base_dir is None:
                    broken.append(f"{where}: {attr}=\"{value}\" -> the page's <base> is outside the site-url {site}")
                    continue
                else:
                    joined = posixpath.join(base_dir, target_path)
                norm = posixpath.normpath(joined) if joined else "."
                if norm == ".." or norm.startswith("../"):
                    broken.append(f"{where}: {attr}=\"{value}\" -> points outside the build ({norm})")
                    continue
                target = root / norm
                if target.is_dir():
                    target = target / "index.html"
                if not target.is_file():
                    missing = target.relative_to(root).as_posix()
                    broken.append(f"{where}: {attr}=\"{value}\" -> no file {missing} in the build")
                    continue
            if fragment and target.suffix == ".html":
                if fragment not in page_of(target).ids:
                    name = target.relative_to(root).as_posix()
                    broken.append(f"{where}: {attr}=\"{value}\" -> no id=\"{fragment}\" in {name}")

    if broken:
        print(f"links: {len(broken)} broken internal link(s) in {root}:", file=sys.stderr)
        for b in broken:
            print(f"  {b}", file=sys.stderr)
        print("fix the link in the chapter's markdown (docs/src/...): a page or an anchor it names does not exist", file=sys.stderr)
        return 1
    print(f"links: {checked} internal links in {len(pages)} pages resolve")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
