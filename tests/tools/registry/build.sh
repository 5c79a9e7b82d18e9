#!/usr/bin/env bash
# Builds crane once from go-containerregistry's Go module (pinned in go.mod as a tool) and
# caches it outside the tree, keyed by version and by this module's files. Prints the path of
# the binary on stdout. The tier-3 node tests serve their local OCI registry with it
# (`crane registry serve`, tests/src/registry.rs) and push the release's image there
# (`crane push`); tests/release.sh pushes a release's image with it. No code of
# go-containerregistry's is in this tree.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/versions.env"
cache=${HOLDFAST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/holdfast}
sum=$(cat "$here/go.mod" "$here/go.sum" "$here/versions.env" "$here/build.sh" | sha256sum | cut -c1-12)
dir="$cache/tools/crane-${CRANE_VERSION}-${sum}"
if [ -f "$dir/.complete" ]; then echo "$dir/bin/crane"; exit 0; fi
mkdir -p "$cache/tools"
exec 9>"$cache/tools/.crane.lock"
flock 9
if [ -f "$dir/.complete" ]; then echo "$dir/bin/crane"; exit 0; fi
tmp=$(mktemp -d "$cache/tools/.crane.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
echo "building crane (go-containerregistry ${CRANE_VERSION}) into $dir" >&2
mod=$(cd "$here" && go list -f '{{.Version}}' -m github.com/google/go-containerregistry)
[ "$mod" = "$CRANE_VERSION" ] || { echo "go.mod pins go-containerregistry $mod, versions.env says $CRANE_VERSION" >&2; exit 1; }
ldflags="-s -w -X github.com/google/go-containerregistry/cmd/crane/cmd.Version=${CRANE_VERSION}"
mkdir -p "$tmp/bin"
(cd "$here" && CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$tmp/bin/crane" github.com/google/go-containerregistry/cmd/crane)
echo "crane $("$tmp/bin/crane" version)" >&2
touch "$tmp/.complete"
rm -rf "$dir"
mv "$tmp" "$dir"
trap - EXIT
echo "$dir/bin/crane"
