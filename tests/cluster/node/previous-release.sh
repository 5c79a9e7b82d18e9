#!/usr/bin/env bash
# Builds the previous release (the commit previous-release.env records) for the upgrade tests
# and prints a directory holding its image (image.tar, image.ref: an OCI archive built by that
# commit's own tests/cluster/node/holdfast-image.sh from its own Dockerfile), its chart
# (chart/), and the commit and version it was built as.
#
# The commit's tree is taken with `git archive` from this checkout's history (a shallow clone
# lacks it: fetch main's full history), built in a target directory of its own, and the result
# cached in ${HOLDFAST_CACHE:-~/.cache/holdfast}/node/previous/<commit>-<version>/; the build's
# target directory is removed once the image is cached. A first build compiles the commit's
# release binaries from scratch: about 6 minutes on 2 cores, once per machine. One build at a
# time (a lock); a build killed outright leaves its directory, removed by the next one.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../../.." && pwd)
cache=${HOLDFAST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/holdfast}
. "$here/previous-release.env"
commit=$HOLDFAST_PREVIOUS_COMMIT
out="$cache/node/previous/$commit-$HOLDFAST_PREVIOUS_VERSION"
if [ -f "$out/.complete" ]; then echo "$out"; exit 0; fi
mkdir -p "$cache/node/previous"
exec 9>"$cache/node/previous/.lock"
flock 9
if [ -f "$out/.complete" ]; then echo "$out"; exit 0; fi
# Under the lock no other build runs: what a killed build left is garbage.
rm -rf "$cache/node/previous"/.build.*
git -C "$repo" cat-file -e "$commit^{commit}" 2>/dev/null || {
  echo "previous-release.sh: commit $commit (previous-release.env) is not in $repo's history; a shallow clone lacks it: git fetch --unshallow" >&2
  exit 1
}
tmp=$(mktemp -d "$cache/node/previous/.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/src" "$tmp/out"
git -C "$repo" archive --format=tar "$commit" | tar -x -C "$tmp/src"
echo "building the previous release ($commit) from its own tree" >&2
image_dir=$(CARGO_TARGET_DIR="$tmp/target" HOLDFAST_CACHE="$tmp/cache" "$tmp/src/tests/cluster/node/holdfast-image.sh")
cp "$image_dir/image.tar" "$image_dir/image.ref" "$tmp/out/"
cp -r "$tmp/src/charts/holdfast" "$tmp/out/chart"
echo "$commit" > "$tmp/out/commit"
echo "$HOLDFAST_PREVIOUS_VERSION" > "$tmp/out/version"
touch "$tmp/out/.complete"
rm -rf "$out"
mv "$tmp/out" "$out"
echo "$out"
