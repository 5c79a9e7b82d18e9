#!/usr/bin/env bash
# Builds promtool once from Prometheus's Go module (github.com/prometheus/prometheus, pinned in
# go.mod as a tool) and caches it outside the tree, keyed by version and by this module's files.
# Prints the path of the binary on stdout. The alert tests (tests/tests/it/alerts/mod.rs) run
# `promtool test rules` with it. No code of Prometheus's is in this tree.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/versions.env"
cache=${HOLDFAST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/holdfast}
sum=$(cat "$here/go.mod" "$here/go.sum" "$here/versions.env" "$here/build.sh" | sha256sum | cut -c1-12)
dir="$cache/tools/promtool-${PROMETHEUS_VERSION}-${sum}"
if [ -f "$dir/.complete" ]; then echo "$dir/bin/promtool"; exit 0; fi
mkdir -p "$cache/tools"
exec 9>"$cache/tools/.promtool.lock"
flock 9
if [ -f "$dir/.complete" ]; then echo "$dir/bin/promtool"; exit 0; fi
tmp=$(mktemp -d "$cache/tools/.promtool.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
echo "building promtool (prometheus ${PROMETHEUS_VERSION}) into $dir" >&2
# The module's v0.3XX.Y is Prometheus 3.XX.Y; promtool reports it as its version.
m=${PROMETHEUS_VERSION#v0.}; release="3.$(( ${m%%.*} - 300 )).${m#*.}"
v=github.com/prometheus/common/version
ldflags="-s -w -X $v.Version=${release} -X $v.Branch=HEAD -X $v.Revision=module"
mkdir -p "$tmp/bin"
(cd "$here" && CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$tmp/bin/promtool" github.com/prometheus/prometheus/cmd/promtool)
"$tmp/bin/promtool" --version >&2
touch "$tmp/.complete"
rm -rf "$dir"
mv "$tmp" "$dir"
trap - EXIT
echo "$dir/bin/promtool"
