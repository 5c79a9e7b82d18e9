#!/usr/bin/env bash
# Builds helm once from its Go module and caches it outside the tree, keyed by version and
# by the module's files: `build.sh` (or `build.sh 4`) Helm 4 (helm.sh/helm/v4, pinned in
# go.mod as a tool), `build.sh 3` Helm 3 (helm.sh/helm/v3, in v3/go.mod). Prints the cache
# directory on stdout; the binary is "$dir/bin/helm". No code of helm's is in this tree.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/versions.env"
major=${1:-4}
case "$major" in
  4) mod=$here; version=$HELM_VERSION ;;
  3) mod=$here/v3; version=$HELM3_VERSION ;;
  *) echo "build.sh: unknown helm major version '$major' (3 or 4)" >&2; exit 2 ;;
esac
cache=${HOLDFAST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/holdfast}
sum=$(cat "$mod/go.mod" "$mod/go.sum" "$here/versions.env" "$here/build.sh" | sha256sum | cut -c1-12)
dir="$cache/helm/helm-${version}-${sum}"
if [ -f "$dir/.complete" ]; then echo "$dir"; exit 0; fi
mkdir -p "$cache/helm"
exec 9>"$cache/helm/.lock"
flock 9
if [ -f "$dir/.complete" ]; then echo "$dir"; exit 0; fi
tmp=$(mktemp -d "$cache/helm/.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
echo "building helm ${version} into $dir" >&2
p=helm.sh/helm/v$major
ldflags="-s -w -X $p/internal/version.version=${version} -X $p/internal/version.metadata= -X $p/internal/version.gitTreeState=clean"
if [ "$major" = 3 ]; then
  # As Helm 3's Makefile does: the Kubernetes version `helm template` and `helm lint` assume
  # by default, from the client-go it is built with (Helm 4 reads it from its build info).
  k8s=$(cd "$mod" && go list -f '{{.Version}}' -m k8s.io/client-go)
  k8s=${k8s#v0.}; minor=${k8s%%.*}
  ldflags="$ldflags -X $p/pkg/lint/rules.k8sVersionMajor=1 -X $p/pkg/lint/rules.k8sVersionMinor=${minor}"
  ldflags="$ldflags -X $p/pkg/chartutil.k8sVersionMajor=1 -X $p/pkg/chartutil.k8sVersionMinor=${minor}"
fi
mkdir -p "$tmp/bin"
(cd "$mod" && CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$tmp/bin/helm" "$p/cmd/helm")
"$tmp/bin/helm" version --short >&2
touch "$tmp/.complete"
rm -rf "$dir"
mv "$tmp" "$dir"
trap - EXIT
echo "$dir"
