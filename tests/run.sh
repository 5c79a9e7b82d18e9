#!/usr/bin/env bash
# Every check and every test: formatting, clippy, the dependency checks, all unit and
# integration tests, then the demo's walk-through. The integration tests run against a real
# local control plane (etcd, kube-apiserver, kube-controller-manager, Kueue) built from Go
# modules on first use and cached in ${HOLDFAST_CACHE:-~/.cache/holdfast}; later runs start
# it in seconds. Tier 3 (a real node, tests/tests/it/node.rs) runs last, in a network namespace
# of its own, followed by the demo's walk on that node (tests/demo.sh --node --exit).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR=${CARGO_TERM_COLOR:-never}
# A one-off build gains nothing from incremental artifacts and they cost many gigabytes.
export CARGO_INCREMENTAL=${CARGO_INCREMENTAL:-0}
# Every topic of the integration tests keeps its own control plane (and Kueue) up until the
# test binary exits, and each apiserver, controller-manager and Kueue takes inotify
# instances: the kernel's default of 128 per user ran out with the MultiKueue topic's two
# planes (Kueue then exits at start with "too many open files"). Raised where this runs
# as root; elsewhere, say what to do.
inotify=/proc/sys/fs/inotify/max_user_instances
if [ -r "$inotify" ] && [ "$(cat "$inotify")" -lt 1024 ]; then
  if [ -w "$inotify" ]; then
    echo 1024 > "$inotify"
  else
    echo "warning: fs.inotify.max_user_instances is $(cat "$inotify"); the integration tests need about 200: run sysctl -w fs.inotify.max_user_instances=1024 as root" >&2
  fi
fi
echo "== control plane"
tests/cluster/build.sh
# helm: Helm 4 for every test, Helm 3 for the chart suite's second pass below.
tests/cluster/helm/build.sh 4
tests/cluster/helm/build.sh 3
# promtool, for the alerts' tests (tests/tests/it/alerts/mod.rs): built from Prometheus's Go module
# once (about 8 min), cached like helm.
tests/tools/promtool/build.sh
echo "== tier-3 node (containerd, runc, CNI, kubelet, JobSet, Trainer; cached like the control plane)"
tests/cluster/node/build.sh
# crane, for the node's local OCI registry and the pushes to it (tests/src/registry.rs): built
# from go-containerregistry's Go module once (about 25 s), cached like promtool.
tests/tools/registry/build.sh
# krew, for the test that installs the CLI archive with it offline (node::krew): from its Go
# module once (about 1.5 min).
tests/tools/krew/build.sh
echo "== fmt"
cargo fmt --all -- --check
# The project's cargo tools (mdbook here, cargo-machete and cargo-deny below) are each built
# once from the crate registry into the cache, pinned (a cold build of mdbook took about 6 min).
tool() { # tool NAME VERSION: prints the path of NAME's binary, installing it if missing
  local root="${HOLDFAST_CACHE:-$HOME/.cache/holdfast}/tools/$1-$2"
  if [ ! -x "$root/bin/$1" ]; then
    cargo install --locked --quiet --root "$root" "$1" --version "$2" >&2
  fi
  echo "$root/bin/$1"
}
echo "== book (docs/: mdBook's build, its links, the chart values it names, the README's size, the book in Chromium)"
mdbook=$(tool mdbook 0.5.4)
tests/tools/book/check.sh "$mdbook"
echo "== clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings
echo "== dependencies (unused ones: cargo-machete; licences, duplicates, sources: cargo deny)"
# Each tool is built once from the crate registry into the cache, pinned (a cold build took
# about 8 min for cargo-machete and 30 min for cargo-deny on two busy cores); later runs
# find it there at once.
machete=$(tool cargo-machete 0.9.2)
"$machete"
deny=$(tool cargo-deny 0.20.2)
# deny.toml says what passes; duplicate versions only warn. Advisories are left out: they
# need the RustSec database fetched over the network (`cargo deny fetch`), which a machine
# without it cannot do. Run `cargo deny check advisories` where the network is reachable.
"$deny" --locked check --hide-inclusion-graph licenses bans sources
echo "== import cycles (no module imports from one that imports it back; issue #13)"
python3 tests/tools/import_cycles.py */src
echo "== module files (a module with submodules is name/mod.rs, never name.rs beside name/)"
rs=$(git ls-files '*.rs')
both=$(for f in $rs; do [ "${f##*/}" != mod.rs ] && [ -d "${f%.rs}" ] && echo "$f"; done; true)
[ -z "$both" ] || { echo "name.rs beside name/ (move it to name/mod.rs): $both"; exit 1; }
echo "== go client (gofmt, vet)"
unformatted=$(cd clients/go && gofmt -l .)
[ -z "$unformatted" ] || { echo "gofmt would change: $unformatted (run gofmt -w in clients/go)"; exit 1; }
(cd clients/go && GOFLAGS=-mod=mod go vet ./... && GOFLAGS=-mod=mod go vet -tags node ./...)
echo "== build (the fault tests and the demo run the real binaries)"
cargo build --workspace --bins --locked
echo "== tests"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
# The adversary and the fault group run on their own below: the adversary where its output is
# shown, the faults one test at a time (each loads the machine with a control plane of its own).
cargo test --workspace --locked -- --skip generated_sequences_in_ --skip every_sequence_the_adversary --skip faults:: 2>&1 | tee "$log"
echo "== faults (the real binaries and the control plane under kill -9, outages, floods)"
cargo test -p holdfast-tests --locked --test it -- faults:: --test-threads 1 2>&1 | tee -a "$log"
echo "== adversary (generated sequences in both modes, then the corpus; see the README's \"The adversary\")"
cargo test -p holdfast-tests --locked --test it -- adversary:: --nocapture 2>&1 | tee -a "$log"
echo "== the webhook suite and the adversary's corpus under validation.engine=policy (issue #14)"
# The same tests, with the chart's ValidatingAdmissionPolicies judging the validating rules and
# the webhook keeping only its lookups and mutations.
HOLDFAST_TEST_VALIDATION_ENGINE=policy cargo test -p holdfast-tests --locked --test it -- admission:: seams:: outage:: holds_kueue:: mode_switch:: adoption:: adversary::every_sequence_the_adversary 2>&1 | tee -a "$log"
echo "== the chart suite with Helm 3 (every other test ran Helm 4)"
HOLDFAST_HELM_MAJOR=3 cargo test -p holdfast-tests --locked --test it -- chart:: chart_conventions:: 2>&1 | tee -a "$log"
echo "== tier 3: a real node (holdfast's image from the Dockerfile's recipe, then the node tests)"
tests/cluster/node/holdfast-image.sh
cargo test -p holdfast-tests --locked --test it -- --ignored node:: --test-threads 1 2>&1 | tee -a "$log"
echo "== the demo on the node (tests/demo.sh --node, stopping after its walk-through)"
tests/demo.sh --node --exit
echo "== benchmarks at a tiny size (so that none rots; the README has the real sizes)"
cargo run --locked -q -p holdfast-webhook --example admission_bench -- --seconds 1 --rate 50 --connections 2
HOLDFAST_BENCH_ITERS=5 cargo run --locked -q -p holdfast-tests --example hold_bench
HOLDFAST_BENCH_ITERS=5 cargo run --locked -q -p holdfast-tests --example hold_kueue_bench
cargo run --locked -q -p holdfast-tests --example hold_wave_bench -- --jobs 20 --concurrency 4
cargo run --locked -q -p holdfast-tests --example snapshot_bench -- --jobs 20 --steady 5 --webhook --trainer
HOLDFAST_BENCH_ITERS=5 cargo run --locked -q -p holdfast-tests --example admission_cost_bench
echo "== demo (the README's demo command, stopping after its walk-through)"
tests/demo.sh --exit
grep -E '^adversary: ([0-9]+ sequences|corpus)' "$log" || true
# One closing line for the whole run, summed over every test binary.
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i; if ($(i+1) ~ /^ignored/) s += $i } }
     END { printf "tests: %d passed, %d failed, %d skipped\n", p, f, s }' "$log"
