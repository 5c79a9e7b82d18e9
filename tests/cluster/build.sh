#!/usr/bin/env bash
# Builds the local control plane once and caches it outside the tree, keyed by version:
# etcd, kube-apiserver and kube-controller-manager from their Go modules (the go command
# builds them; no code of theirs is in this tree), plus the Trainer, JobSet and Kueue CRDs
# as shipped in those projects' modules, and Kueue's controller (tests/cluster/kueue). Prints the cache directory on stdout.
# With an argument, builds a version-matrix entry instead (a directory of matrix/ with its own
# versions.env, go.mod and kueue/go.mod; tests/matrix.sh runs the suite against each).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
mod=$(cd "${1:-$here}" && pwd)
. "$mod/versions.env"
cache=${HOLDFAST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/holdfast}
sum=$(cat "$mod/go.mod" "$mod/go.sum" "$mod/kueue/go.mod" "$mod/kueue/go.sum" "$mod/versions.env" "$here/build.sh" | sha256sum | cut -c1-12)
dir="$cache/cluster/k8s-${KUBERNETES_VERSION}-etcd-${ETCD_VERSION}-kueue-${KUEUE_VERSION}-trainer-${TRAINER_VERSION}-${sum}"
if [ -f "$dir/.complete" ]; then echo "$dir"; exit 0; fi
# The binary follows kueue/go.mod and the CRDs (and the cache key) follow versions.env: they
# must name the same Kueue.
if ! grep -q "sigs.k8s.io/kueue ${KUEUE_VERSION}\b" "$mod/kueue/go.mod"; then
  echo "$mod/kueue/go.mod does not pin sigs.k8s.io/kueue ${KUEUE_VERSION} (versions.env's KUEUE_VERSION)" >&2
  exit 1
fi
mkdir -p "$cache/cluster"
exec 9>"$cache/cluster/.lock"
flock 9
if [ -f "$dir/.complete" ]; then echo "$dir"; exit 0; fi
tmp=$(mktemp -d "$cache/cluster/.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
echo "building the control plane (${KUBERNETES_VERSION}, etcd ${ETCD_VERSION}) into $dir; the first build takes minutes" >&2
mkdir -p "$tmp/bin"
minor=${KUBERNETES_VERSION#v1.}; minor=${minor%%.*}
v=k8s.io/component-base/version
ldflags="-X $v.gitVersion=${KUBERNETES_VERSION} -X $v.gitMajor=1 -X $v.gitMinor=${minor} -X $v.gitTreeState=clean"
(cd "$mod" && go build -ldflags "$ldflags" -o "$tmp/bin/" \
  k8s.io/kubernetes/cmd/kube-apiserver \
  k8s.io/kubernetes/cmd/kube-controller-manager)
(cd "$mod" && go build -o "$tmp/bin/etcd" go.etcd.io/etcd/server/v3)
# Kueue is its own module: its dependencies must not move the apiserver's.
(cd "$mod/kueue" && go build -o "$tmp/bin/kueue" sigs.k8s.io/kueue/cmd/kueue)
moddir() { (cd "$tmp" && GOFLAGS=-mod=mod go mod download -json "$1" | sed -n 's/.*"Dir": "\(.*\)",/\1/p'); }
mkdir -p "$tmp/crds/trainer" "$tmp/crds/jobset" "$tmp/crds/kueue"
cp "$(moddir "github.com/kubeflow/trainer/v2@${TRAINER_VERSION}")"/manifests/base/crds/trainer.kubeflow.org_*.yaml "$tmp/crds/trainer/"
cp "$(moddir "sigs.k8s.io/jobset@${JOBSET_VERSION}")"/config/components/crd/bases/jobset.x-k8s.io_*.yaml "$tmp/crds/jobset/"
cp "$(moddir "sigs.k8s.io/kueue@${KUEUE_VERSION}")"/config/components/crd/bases/kueue.x-k8s.io_*.yaml "$tmp/crds/kueue/"
cp "$(moddir "sigs.k8s.io/kueue@${KUEUE_VERSION}")"/config/components/webhook/manifests.yaml "$tmp/crds/kueue-webhooks.yaml"
chmod -R u+w "$tmp"
touch "$tmp/.complete"
rm -rf "$dir"
mv "$tmp" "$dir"
trap - EXIT
echo "$dir"
