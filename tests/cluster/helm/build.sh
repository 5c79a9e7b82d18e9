#!/usr/bin/env bash
# Builds helm once from its Go module (helm.sh/helm/v3, pinned in go.mod as a tool) and caches
# it outside the tree, keyed by version and by this module's files. Prints the cache
# directory on stdout; the binary is "$dir/bin/helm". No code of helm's is in this tree.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/versions.env"
cache=${HOLDFAST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/holdfast}
sum=$(cat "$here/go.mod" "$here/go.sum" "$here/versions.env" "$here/build.sh" | sha256sum | cut -c1-12)
dir="$cache/helm/helm-${HELM_VERSION}-${sum}"
if [ -f "$dir/.complete" ]; then echo "$dir"; exit 0; fi
mkdir -p "$cache/helm"
exec 9>"$cache/helm/.lock"
flock 9
if [ -f "$dir/.complete" ]; then echo "$dir"; exit 0; fi
tmp=$(mktemp -d "$cache/helm/.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
echo "building helm ${HELM_VERSION} into $dir" >&2
# As helm's Makefile does: the version, and the Kubernetes version `helm template` and
# `helm lint` assume by default (from the client-go helm is built with).
k8s=$(cd "$here" && go list -f '{{.Version}}' -m k8s.io/client-go)
k8s=${k8s#v0.}; minor=${k8s%%.*}
p=helm.sh/helm/v3
ldflags="-s -w -X $p/internal/version.version=${HELM_VERSION} -X $p/internal/version.metadata= -X $p/internal/version.gitTreeState=clean"
ldflags="$ldflags -X $p/pkg/lint/rules.k8sVersionMajor=1 -X $p/pkg/lint/rules.k8sVersionMinor=${minor}"
ldflags="$ldflags -X $p/pkg/chartutil.k8sVersionMajor=1 -X $p/pkg/chartutil.k8sVersionMinor=${minor}"
mkdir -p "$tmp/bin"
(cd "$here" && CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$tmp/bin/helm" helm.sh/helm/v3/cmd/helm)
"$tmp/bin/helm" version --short >&2
touch "$tmp/.complete"
rm -rf "$dir"
mv "$tmp" "$dir"
trap - EXIT
echo "$dir"
