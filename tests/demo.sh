#!/usr/bin/env bash
# The demo: builds holdfast and the local control plane (first run: minutes; cached after),
# starts etcd, kube-apiserver and kube-controller-manager on loopback with holdfast's webhook
# and controller as processes against them, walks through a snapshot and a hold, then keeps
# running until Ctrl-C and prints the kubeconfig to reach it. `tests/demo.sh --exit` stops
# after the walk.
set -euo pipefail
cd "$(dirname "$0")/.."
tests/cluster/build.sh >/dev/null
cargo build --locked -p holdfast-controller -p holdfast-webhook -p holdfast-cli -p holdfast-tests --bin holdfast-controller --bin holdfast-webhook --bin holdfast --bin holdfast-demo
exec target/debug/holdfast-demo "$@"
