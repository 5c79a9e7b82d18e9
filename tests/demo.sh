#!/usr/bin/env bash
# The demo: builds holdfast and the local control plane (first run: minutes; cached after),
# starts etcd, kube-apiserver and kube-controller-manager on loopback with holdfast's webhook
# and controller as processes against them, walks through a snapshot and a hold, then keeps
# running until Ctrl-C and prints the kubeconfig to reach it. `tests/demo.sh --exit` stops
# after the walk.
#
# `tests/demo.sh --node` runs the walk on tier 3's real node instead (containerd, kubelet,
# the real Trainer and JobSet; holdfast installed by its chart from its locally built image):
# a TrainJob's pod runs, is held and really terminates, and runs again after the release.
# It builds what the node needs (first run: tens of minutes; cached after). `--exit` combines;
# `--node --kueue` runs the same walk in kueue mode (Kueue running, the job queued).
set -euo pipefail
cd "$(dirname "$0")/.."
tests/cluster/build.sh >/dev/null
node=false
for a in "$@"; do [ "$a" = --node ] && node=true; done
if $node; then
  tests/cluster/helm/build.sh >/dev/null
  tests/cluster/node/build.sh >/dev/null
  # holdfast's image: a release build of this tree, from the Dockerfile's recipe (cached).
  tests/cluster/node/holdfast-image.sh >/dev/null
fi
cargo build --locked -p holdfast-controller -p holdfast-webhook -p holdfast-cli -p holdfast-tests --bin holdfast-controller --bin holdfast-webhook --bin holdfast --bin holdfast-demo
exec "${CARGO_TARGET_DIR:-target}/debug/holdfast-demo" "$@"
