#!/usr/bin/env bash
# The version matrix (the README's "Compatibility"): the tier-1/2 integration suite against
# each control plane of tests/cluster/matrix/ and the default one (tests/cluster, the one CI
# runs), then the validating rules again under validation.engine=policy. Each entry's control
# plane is built from its Go modules on first use and cached like the default one (a cold
# Kubernetes build takes 15-25 minutes on two cores; later runs start in seconds).
#
#   tests/matrix.sh                   every entry: current (the newest, CI's), oldest, previous
#   tests/matrix.sh oldest previous   the named entries only
#
# Left out of the matrix, as from nothing else: the fault suite (each fault test starts control
# planes of its own and proves holdfast's behaviour, not the apiserver's; CI runs it on the
# default) and the adversary's generated sequences (its corpus runs). Tier 3 (the node) runs on
# the default only. Prints one line per entry and a closing table.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR=${CARGO_TERM_COLOR:-never}
export CARGO_INCREMENTAL=${CARGO_INCREMENTAL:-0}
entries=("$@")
[ ${#entries[@]} -gt 0 ] || entries=(current oldest previous)
module() { # module ENTRY: the directory holding the entry's versions.env and go.mod
  if [ "$1" = current ]; then echo tests/cluster; else echo "tests/cluster/matrix/$1"; fi
}
for e in "${entries[@]}"; do
  [ -f "$(module "$e")/versions.env" ] || { echo "no matrix entry '$e' (tests/cluster/matrix/*, or current)" >&2; exit 2; }
done
cargo build --workspace --bins --locked
results=$(mktemp)
trap 'rm -f "$results" "$results.versions"' EXIT
status=0
for e in "${entries[@]}"; do
  mod=$(module "$e")
  echo "== matrix entry $e ($mod)"
  dir=$(tests/cluster/build.sh "$mod")
  (. "$mod/versions.env"; echo "$e $KUBERNETES_VERSION $ETCD_VERSION $KUEUE_VERSION $TRAINER_VERSION") > "$results.versions"
  log=$(mktemp)
  start=$(date +%s)
  rc=0
  HOLDFAST_CLUSTER_DIR=$dir cargo test -p holdfast-tests --locked --test it -- \
    --skip faults:: --skip generated_sequences_in_ 2>&1 | tee "$log" || rc=$?
  HOLDFAST_CLUSTER_DIR=$dir HOLDFAST_TEST_VALIDATION_ENGINE=policy cargo test -p holdfast-tests --locked --test it -- \
    admission:: seams:: outage:: holds_kueue:: mode_switch:: adoption:: adversary::every_sequence_the_adversary 2>&1 | tee -a "$log" || rc=$?
  secs=$(($(date +%s) - start))
  counts=$(awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
                END { printf "%d %d", p, f }' "$log")
  grep -E '^    [a-z_:]+$' "$log" | sed "s/^/$e failed: /" || true
  rm -f "$log"
  read -r name k8s etcd kueue trainer < "$results.versions"
  read -r passed failed <<< "$counts"
  verdict=passed; [ "$rc" -eq 0 ] && [ "$failed" -eq 0 ] || { verdict=FAILED; status=1; }
  printf '| %s | %s | %s | %s | %s | %s passed, %s failed | %s | %d min |\n' \
    "$name" "$k8s" "$etcd" "$kueue" "$trainer" "$passed" "$failed" "$verdict" $(((secs + 59) / 60)) >> "$results"
done
echo
echo "| entry | Kubernetes | etcd | Kueue | Trainer CRDs | tests | result | time |"
echo "|---|---|---|---|---|---|---|---|"
cat "$results"
exit $status
