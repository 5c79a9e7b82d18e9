#!/usr/bin/env bash
# Builds the tier-3 node once and caches it outside the tree, keyed by version and by every
# file it is built from; prints the cache directory on stdout (a second run returns at once).
#
#   bin/   kubelet kube-scheduler kube-proxy kubectl   (../go.mod's k8s.io/kubernetes)
#          containerd containerd-shim-runc-v2 ctr      (containerd/go.mod)
#          runc                                        (runc/go.mod, cgo + libseccomp)
#          jobset-controller                           (jobset/go.mod)
#          trainer-controller-manager                  (trainer/go.mod, ../versions.env's TRAINER_VERSION)
#          trainer-controller-manager-<previous>       (trainer-<previous>/go.mod)
#          pause workload                              (programs/, Rust, static)
#   cni/   bridge host-local loopback portmap          (cni/go.mod)
#   images/pause.tar workload.tar (+ .ref: the image name) — OCI archives for `ctr images import`
#   manifests/ JobSet's CRDs and webhooks, Trainer's webhooks and runtimes, from their modules
#   build-times.txt
#
# Everything is built by the go command and cargo from pinned modules and crates; no code of
# theirs is in this tree. Debian packages it needs (libseccomp-dev for runc, iptables for
# kube-proxy) are installed with apt-get when missing. Go builds run under `nice -n 10`.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../versions.env"
. "$here/versions.env"
cache=${HOLDFAST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/holdfast}
modules="containerd runc cni jobset trainer trainer-${TRAINER_PREVIOUS_VERSION}"
sum=$( (cd "$here" && cat ../go.mod ../go.sum ../versions.env versions.env build.sh oci.sh \
  $(for m in $modules; do echo "$m/go.mod $m/go.sum"; done) \
  programs/Cargo.toml $(find programs/src -type f | sort)) | sha256sum | cut -c1-12)
dir="$cache/node/k8s-${KUBERNETES_VERSION}-containerd-${CONTAINERD_VERSION}-trainer-${TRAINER_VERSION}-${sum}"
if [ -f "$dir/.complete" ]; then echo "$dir"; exit 0; fi

# Debian packages: libseccomp-dev to build runc with seccomp; iptables for kube-proxy.
need=()
[ -f /usr/include/seccomp.h ] || need+=(libseccomp-dev)
command -v iptables-restore >/dev/null || need+=(iptables)
command -v pkg-config >/dev/null || need+=(pkg-config)
if [ ${#need[@]} -gt 0 ]; then
  echo "installing ${need[*]} with apt-get" >&2
  if ! DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${need[@]}" >&2; then
    apt-get update >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${need[@]}" >&2
  fi
fi

mkdir -p "$cache/node"
exec 9>"$cache/node/.lock"
flock 9
if [ -f "$dir/.complete" ]; then echo "$dir"; exit 0; fi
tmp=$(mktemp -d "$cache/node/.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
echo "building the tier-3 node into $dir; the first build takes several minutes" >&2
mkdir -p "$tmp/bin" "$tmp/cni" "$tmp/images" "$tmp/manifests"
times="$tmp/build-times.txt"

# Each module must pin what versions.env says (a version is changed in both places).
pinned() { # pinned MODULE_DIR GO_MODULE WANT
  local got
  got=$(cd "$here/$1" && go list -m -f '{{.Version}}' "$2")
  if [ "$got" != "$3" ]; then
    echo "$1/go.mod pins $2 $got, versions.env says $3: change them together" >&2
    exit 1
  fi
}
pinned containerd github.com/containerd/containerd/v2 "$CONTAINERD_VERSION"
pinned runc github.com/opencontainers/runc "$RUNC_VERSION"
pinned cni github.com/containernetworking/plugins "$CNI_PLUGINS_VERSION"
pinned jobset sigs.k8s.io/jobset "$JOBSET_CONTROLLER_VERSION"
pinned trainer github.com/kubeflow/trainer/v2 "$TRAINER_VERSION"
pinned "trainer-${TRAINER_PREVIOUS_VERSION}" github.com/kubeflow/trainer/v2 "$TRAINER_PREVIOUS_VERSION"

gob() { # gob NAME MODULE_DIR CGO_ENABLED GO_BUILD_ARGS...: go build, timed
  local name=$1 mod=$2 cgo=$3; shift 3
  local t0=$SECONDS
  echo "  building $name" >&2
  (cd "$here/$mod" && CGO_ENABLED=$cgo nice -n 10 go build -trimpath "$@")
  echo "$name $((SECONDS - t0))s" | tee -a "$times" >&2
}
minor=${KUBERNETES_VERSION#v1.}; minor=${minor%%.*}
v=k8s.io/component-base/version
gob kubernetes-node .. 1 -ldflags "-X $v.gitVersion=${KUBERNETES_VERSION} -X $v.gitMajor=1 -X $v.gitMinor=${minor} -X $v.gitTreeState=clean" \
  -o "$tmp/bin/" k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-scheduler \
  k8s.io/kubernetes/cmd/kube-proxy k8s.io/kubernetes/cmd/kubectl
gob containerd containerd 0 -ldflags "-X github.com/containerd/containerd/v2/version.Version=${CONTAINERD_VERSION}" \
  -o "$tmp/bin/" github.com/containerd/containerd/v2/cmd/containerd \
  github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2 github.com/containerd/containerd/v2/cmd/ctr
gob runc runc 1 -tags "seccomp urfave_cli_no_docs" -ldflags "-X main.version=${RUNC_VERSION#v}" \
  -o "$tmp/bin/runc" github.com/opencontainers/runc
gob cni-plugins cni 0 -ldflags "-X github.com/containernetworking/plugins/pkg/utils/buildversion.BuildVersion=${CNI_PLUGINS_VERSION}" \
  -o "$tmp/cni/" github.com/containernetworking/plugins/plugins/main/bridge \
  github.com/containernetworking/plugins/plugins/main/loopback \
  github.com/containernetworking/plugins/plugins/ipam/host-local \
  github.com/containernetworking/plugins/plugins/meta/portmap
gob jobset jobset 0 -o "$tmp/bin/jobset-controller" sigs.k8s.io/jobset
gob trainer trainer 0 -o "$tmp/bin/trainer-controller-manager" github.com/kubeflow/trainer/v2/cmd/trainer-controller-manager
gob "trainer-${TRAINER_PREVIOUS_VERSION}" "trainer-${TRAINER_PREVIOUS_VERSION}" 0 \
  -o "$tmp/bin/trainer-controller-manager-${TRAINER_PREVIOUS_VERSION}" github.com/kubeflow/trainer/v2/cmd/trainer-controller-manager

# The node's small programs: static, so their images need nothing else.
t0=$SECONDS
(cd "$here/programs" && RUSTFLAGS='-C target-feature=+crt-static' nice -n 10 \
  cargo build --release --locked --target x86_64-unknown-linux-gnu --target-dir "$tmp/programs-target" >&2)
echo "programs $((SECONDS - t0))s" | tee -a "$times" >&2
for p in pause workload; do cp "$tmp/programs-target/x86_64-unknown-linux-gnu/release/$p" "$tmp/bin/$p"; done
rm -rf "$tmp/programs-target"

# Their images, as OCI archives (oci.sh), named by content so a change is a new image.
. "$here/oci.sh"
for p in pause workload; do
  root="$tmp/rootfs-$p"
  mkdir -p "$root"
  cp "$tmp/bin/$p" "$root/$p"
  tag=$(sha256sum "$root/$p" | cut -c1-12)
  oci_image "localhost/holdfast/$p:$tag" "$root" \
    "{\"Entrypoint\":[\"/$p\"],\"User\":\"65532:65532\",\"Env\":[\"PATH=/\"]}" "$tmp/images/$p.tar"
  echo "localhost/holdfast/$p:$tag" > "$tmp/images/$p.ref"
  rm -rf "$root"
done

# Manifests, as shipped in the modules: JobSet's CRDs and webhooks (of the JobSet the node
# runs), Trainer's webhooks and its default runtimes.
moddir() { (cd "$here/$1" && go list -m -f '{{.Dir}}' "$2"); }
js=$(moddir jobset sigs.k8s.io/jobset)
tr=$(moddir trainer github.com/kubeflow/trainer/v2)
mkdir -p "$tmp/manifests/jobset-crds" "$tmp/manifests/trainer-runtimes"
cp "$js"/config/components/crd/bases/jobset.x-k8s.io_*.yaml "$tmp/manifests/jobset-crds/"
cp "$js"/config/components/webhook/manifests.yaml "$tmp/manifests/jobset-webhooks.yaml"
cp "$tr"/manifests/base/webhook/manifests.yaml "$tmp/manifests/trainer-webhooks.yaml"
cp "$tr"/manifests/base/runtimes/*.yaml "$tmp/manifests/trainer-runtimes/" 2>/dev/null || true
chmod -R u+w "$tmp"

"$tmp/bin/kubelet" --version >&2
"$tmp/bin/containerd" --version >&2
"$tmp/bin/runc" --version >&2
touch "$tmp/.complete"
rm -rf "$dir"
mv "$tmp" "$dir"
trap - EXIT
echo "$dir"
