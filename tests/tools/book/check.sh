#!/usr/bin/env bash
# The book's checks (tests/run.sh's `== book` stage): builds docs/ with mdBook and fails on any
# WARN or ERROR line it prints, then checks the rendered book's internal links and anchors
# (links.py), that every chart value it names is in charts/holdfast/values.yaml (values.py),
# that README.md stays within its size budget, and the book in headless Chromium (browser.py:
# sidebar, search, highlighting, tables, pictures, screenshots). The commands of the book's
# code blocks are parsed by the CLI's own parser in `cargo test` (cli/tests/book_cli_lines.rs).
#
# Usage: tests/tools/book/check.sh [MDBOOK]   MDBOOK: the mdbook binary; without it, mdbook
# 0.5.4 is installed once into ${HOLDFAST_CACHE:-~/.cache/holdfast}/tools/mdbook-0.5.4, as
# tests/run.sh's `tool` does.
set -euo pipefail
cd "$(dirname "$0")/../../.."
here=tests/tools/book
readme_budget=15360 # bytes: README.md is the front page; the rest is the book's

mdbook=${1:-}
if [ -z "$mdbook" ]; then
  root="${HOLDFAST_CACHE:-$HOME/.cache/holdfast}/tools/mdbook-0.5.4"
  if [ ! -x "$root/bin/mdbook" ]; then
    cargo install --locked --quiet --root "$root" mdbook --version 0.5.4 >&2
  fi
  mdbook="$root/bin/mdbook"
fi

start=$SECONDS
failed=()

echo "book: building docs/ with $("$mdbook" --version)"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
# create-missing off: a chapter SUMMARY.md names but that is not there is an error, not a new
# empty file in docs/src.
rc=0
MDBOOK_BUILD__CREATE_MISSING=false NO_COLOR=1 "$mdbook" build docs >"$log" 2>&1 || rc=$?
# Strip colour codes in case mdbook prints them anyway.
if [ "$rc" -ne 0 ] || sed 's/\x1b\[[0-9;]*m//g' "$log" | grep -Eq '^[[:space:]]*(WARN|ERROR)\b'; then
  sed 's/\x1b\[[0-9;]*m//g' "$log" | grep -Ev '^[[:space:]]*INFO\b' >&2 || true
  if [ "$rc" -ne 0 ]; then why="exited $rc"; else why="printed the WARN/ERROR lines above"; fi
  echo "book: FAIL mdbook build docs $why: fix them in docs/ (book.toml, src/SUMMARY.md, the pages)" >&2
  exit 1
fi
echo "book: built docs/book with no warnings"

python3 "$here/links.py" docs/book || failed+=("links")

mapfile -t pages < <(find docs/src -name '*.md' | LC_ALL=C sort)
python3 "$here/values.py" charts/holdfast/values.yaml README.md "${pages[@]}" || failed+=("chart values")

size=$(wc -c <README.md)
if [ "$size" -gt "$readme_budget" ]; then
  echo "readme: FAIL README.md is $size bytes, over its budget of $readme_budget bytes (15 KiB): move sections into the book (docs/src/) and link to them" >&2
  failed+=("README size")
else
  echo "readme: README.md is $size bytes, within its budget of $readme_budget"
fi

python3 "$here/browser.py" docs/book docs/src/SUMMARY.md || failed+=("browser")

if [ "${#failed[@]}" -gt 0 ]; then
  echo "book: FAIL $(IFS=,; echo "${failed[*]}" | sed 's/,/, /g') (in $((SECONDS - start))s; see above)" >&2
  exit 1
fi
echo "book: all checks passed in $((SECONDS - start))s"
