#!/usr/bin/env bash
# Every check and every test: formatting, clippy, then all unit and integration tests.
# The integration tests run against a real local control plane (etcd, kube-apiserver,
# kube-controller-manager, Kueue) built from Go modules on first use and cached in
# ${HOLDFAST_CACHE:-~/.cache/holdfast}; later runs start it in seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR=${CARGO_TERM_COLOR:-never}
echo "== control plane"
tests/cluster/build.sh
echo "== fmt"
cargo fmt --all -- --check
echo "== clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings
echo "== tests"
cargo test --workspace --locked
