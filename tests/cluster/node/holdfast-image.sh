#!/usr/bin/env bash
# Builds holdfast's image for the tier-3 node without a container engine or a registry, from
# the Dockerfile's own recipe, and prints the directory holding it: image.tar (an OCI archive
# for `ctr images import`) and image.ref (its name, localhost/holdfast/holdfast:<digest>).
#
# The Dockerfile is the one recipe: this script runs its build stage's `cargo build` command
# as written there, and assembles its final stage — each `COPY --from=build`, `USER` and
# `ENTRYPOINT` — as written there; an instruction it does not know fails the build, so the two
# cannot drift apart silently.
#
# What differs from `docker build`: the final stage's base (distroless/cc-debian12, which
# cannot be pulled here) is assembled from this Debian 12 machine instead — the shared
# libraries the binaries load (ldd: glibc, libgcc_s, as in distroless/cc), the CA roots, and
# /etc/passwd and /etc/group naming nonroot (65532) — and the binaries are built with the
# machine's Rust toolchain instead of the rust:<version>-bookworm image. Cached in
# ${HOLDFAST_CACHE:-~/.cache/holdfast}/node/holdfast-image/, keyed by the binaries' contents.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../../.." && pwd)
dockerfile="$repo/Dockerfile"
cache=${HOLDFAST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/holdfast}
. "$here/oci.sh"

# The build stage's cargo command, and where it leaves the binaries.
build_cmd=$(grep -o 'cargo build [^&\\]*' "$dockerfile" | head -1 | sed 's/ *$//')
[ -n "$build_cmd" ] || { echo "no cargo build command in $dockerfile" >&2; exit 1; }
echo "building holdfast's binaries: $build_cmd" >&2
# Called from a test, the environment holds the CARGO_* variables cargo sets for test
# binaries; some build scripts watch such variables, and would rebuild the release: drop them.
unset_cargo=()
for v in $(env | grep -o '^CARGO[A-Z_]*' | sort -u); do
  case $v in CARGO_HOME|CARGO_TARGET_DIR|CARGO_TERM_COLOR|CARGO_BUILD_JOBS|CARGO_NET_*|CARGO_REGISTRIES_*) ;; *) unset_cargo+=(-u "$v") ;; esac
done
(cd "$repo" && env "${unset_cargo[@]}" nice -n 5 $build_cmd >&2)
target=${CARGO_TARGET_DIR:-$repo/target}

# The final stage: everything after the last FROM.
final=$(awk 'toupper($1)=="FROM"{buf=""; next} {buf=buf $0 "\n"} END{printf "%s", buf}' "$dockerfile" |
  sed -e ':a' -e '/\\$/N; s/\\\n//; ta' | grep -v '^\s*#' | grep -v '^\s*$')
copies=() user="" entrypoint=""
while read -r instr rest; do
  case "${instr^^}" in
    LABEL) ;;
    COPY)
      set -- $rest
      [ "$1" = "--from=build" ] || { echo "final stage: only COPY --from=build is known: COPY $rest" >&2; exit 1; }
      shift
      dest=${*: -1}
      [ "$dest" = "/" ] || { echo "final stage: only COPY ... / is known: COPY $rest" >&2; exit 1; }
      for src in "${@:1:$#-1}"; do copies+=("$(basename "$src")"); done ;;
    USER) user=$rest ;;
    ENTRYPOINT) entrypoint=$rest ;;
    *) echo "final stage: instruction $instr is not known to $0: teach it, or the local image would differ" >&2; exit 1 ;;
  esac
done <<< "$final"
[ ${#copies[@]} -gt 0 ] && [ -n "$user" ] && [ -n "$entrypoint" ] ||
  { echo "final stage of $dockerfile: no COPY, USER or ENTRYPOINT found" >&2; exit 1; }

sum=$( (cat "$dockerfile" "$here/oci.sh" "$0"; for b in "${copies[@]}"; do cat "$target/release/$b"; done) | sha256sum | cut -c1-12)
dir="$cache/node/holdfast-image/$sum"
if [ -f "$dir/.complete" ]; then echo "$dir"; exit 0; fi
mkdir -p "$cache/node/holdfast-image"
tmp=$(mktemp -d "$cache/node/holdfast-image/.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
root="$tmp/rootfs"
mkdir -p "$root/etc/ssl/certs" "$root/tmp"
chmod 1777 "$root/tmp"
for b in "${copies[@]}"; do install -m 0755 "$target/release/$b" "$root/$b"; done
# distroless/cc's content, from this Debian 12 machine: the libraries the binaries load...
for b in "${copies[@]}"; do
  ldd "$root/$b" | awk '/=>/ {print $3} /^[ \t]*\// {print $1}'
done | sort -u | while read -r lib; do
  [ -n "$lib" ] || continue
  mkdir -p "$root$(dirname "$lib")"
  cp -L "$lib" "$root$lib"
done
# ...the CA roots, and the users.
cp -L /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/ca-certificates.crt"
printf 'root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' > "$root/etc/passwd"
printf 'root:x:0:\nnobody:x:65534:\nnonroot:x:65532:\n' > "$root/etc/group"

ep_json=$(echo "$entrypoint" | tr -d '\n')
config=$(printf '{"User":"%s","Entrypoint":%s,"Env":["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin","SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"],"WorkingDir":"/"}' "$user" "$ep_json")
ref="localhost/holdfast/holdfast:$sum"
oci_image "$ref" "$root" "$config" "$tmp/image.tar"
echo "$ref" > "$tmp/image.ref"
printf '%s\n' "${copies[@]}" > "$tmp/binaries"
rm -rf "$root"
touch "$tmp/.complete"
rm -rf "$dir"
mv "$tmp" "$dir"
trap - EXIT
echo "$dir"
