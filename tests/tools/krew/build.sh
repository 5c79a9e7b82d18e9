#!/usr/bin/env bash
# Builds krew (the kubectl plugin manager) once from its Go module (sigs.k8s.io/krew, pinned
# in go.mod as a tool) and caches it outside the tree, keyed by version and by this module's
# files. Prints the path of the binary on stdout. The krew test (tests/tests/it/node/krew.rs)
# installs the release's CLI archive with it offline and runs `kubectl holdfast` through its
# shim. No code of krew's is in this tree.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/versions.env"
cache=${HOLDFAST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/holdfast}
sum=$(cat "$here/go.mod" "$here/go.sum" "$here/versions.env" "$here/build.sh" | sha256sum | cut -c1-12)
dir="$cache/tools/krew-${KREW_VERSION}-${sum}"
if [ -f "$dir/.complete" ]; then echo "$dir/bin/krew"; exit 0; fi
mkdir -p "$cache/tools"
exec 9>"$cache/tools/.krew.lock"
flock 9
if [ -f "$dir/.complete" ]; then echo "$dir/bin/krew"; exit 0; fi
tmp=$(mktemp -d "$cache/tools/.krew.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
echo "building krew ${KREW_VERSION} into $dir" >&2
mod=$(cd "$here" && go list -f '{{.Version}}' -m sigs.k8s.io/krew)
[ "$mod" = "$KREW_VERSION" ] || { echo "go.mod pins krew $mod, versions.env says $KREW_VERSION" >&2; exit 1; }
ldflags="-s -w -X sigs.k8s.io/krew/internal/version.gitTag=${KREW_VERSION}"
mkdir -p "$tmp/bin"
(cd "$here" && CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$tmp/bin/krew" sigs.k8s.io/krew/cmd/krew)
touch "$tmp/.complete"
rm -rf "$dir"
mv "$tmp" "$dir"
trap - EXIT
echo "$dir/bin/krew"
