#!/usr/bin/env bash
# A release of holdfast, from the tree, with no network but the package registries:
#
#   tests/release.sh [--quick] VERSION OUTDIR [REGISTRY]
#
# writes into OUTDIR (created; refused if it holds anything):
#   holdfast-VERSION.tgz                          the chart (`helm package`), version and
#                                                 appVersion VERSION, so the image tag too
#   install.yaml, install-kueue.yaml              `helm template` of that chart in plain and in
#                                                 Kueue mode, with the Namespace, for kubectl apply
#   kubectl-holdfast-vVERSION-x86_64-unknown-linux-gnu.tar.gz (+ .sha256)
#                                                 the CLI (`cargo build --release`), LICENSE, README.md
#   holdfast.krew.yaml                            the krew manifest, from cli/krew/holdfast.yaml.in
#   holdfast-VERSION.cdx.json                     CycloneDX SBOM of the image's binaries
#   holdfast-image-VERSION.oci.tar                the image, an OCI image layout (tarred), from
#                                                 the Dockerfile's recipe (tests/cluster/node/holdfast-image.sh)
#   CHANGELOG.md, RELEASE-NOTES.md                the repo's changelog with Unreleased moved under
#                                                 `## [VERSION] - DATE`, and that section alone
#   SHA256SUMS                                    every file above
#
# The tree must be committed: tracked changes anywhere, or untracked files under the crates,
# the chart or the krew template, are refused (commit them, or remove them), so a release is
# built from a commit, and the commit (`git rev-parse HEAD`) is written into RELEASE-NOTES.md
# and into the SBOM (metadata properties holdfast:git-commit and holdfast:git-tree-dirty).
#
# Only linux/amd64 is built (the only target this machine builds). VERSION must be the
# workspace's version in Cargo.toml (the binaries report it): bump that first. The krew
# manifest points at HOLDFAST_RELEASE_URL (default: the GitHub release's download URL for
# vVERSION), where the archive is to be uploaded; this script uploads nothing there.
#
# With REGISTRY (host[:port][/path]) the chart's default image is REGISTRY/holdfast, and once
# everything is built the chart is pushed to oci://REGISTRY/charts (`helm push`) and the image
# to REGISTRY/holdfast:VERSION with crane (HOLDFAST_CRANE, or the one
# tests/tools/registry/build.sh builds from its Go module);
# HOLDFAST_REGISTRY_PLAIN_HTTP=1 pushes over plain HTTP. Without REGISTRY nothing is pushed.
#
# --quick (the test's mode, tests/tests/it/release.rs): the CLI from the dev profile (built as
# `cargo build --workspace --bins`, which tests/run.sh has built by then), no image (the
# release builds take minutes), and a dirty tree allowed (recorded as dirty). Its output is
# not a release and says so: OUTDIR/QUICK-NOT-A-RELEASE (listed in SHA256SUMS), a first
# line in RELEASE-NOTES.md, the SBOM's property holdfast:quick, and a krew manifest whose URI
# is the archive in OUTDIR (file://), never HOLDFAST_RELEASE_URL.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
quick=false
if [ "${1:-}" = "--quick" ]; then quick=true; shift; fi
usage="usage: tests/release.sh [--quick] VERSION OUTDIR [REGISTRY]"
[ $# -ge 2 ] && [ $# -le 3 ] || { echo "$usage" >&2; exit 2; }
version=$1 out=$2 registry=${3:-}
fail() { echo "release: $*" >&2; exit 1; }
# Run from a test, the environment holds the CARGO_* variables cargo sets for test binaries;
# build scripts that watch them would rebuild: drop them (as holdfast-image.sh does).
for v in $(env | grep -o '^CARGO[A-Z_]*' | sort -u); do
  case $v in CARGO_HOME|CARGO_TARGET_DIR|CARGO_TERM_COLOR|CARGO_BUILD_JOBS|CARGO_INCREMENTAL|CARGO_NET_*|CARGO_REGISTRIES_*) ;; *) unset "$v" ;; esac
done

# --- what is asked, checked before anything is built
[[ $version =~ ^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$ ]] ||
  fail "VERSION '$version' is not a SemVer version (X.Y.Z or X.Y.Z-pre, no leading v)"
workspace_version=$(sed -n '/^\[workspace.package\]/,/^\[/{s/^version = "\(.*\)"/\1/p}' "$repo/Cargo.toml")
[ "$version" = "$workspace_version" ] ||
  fail "VERSION $version is not the workspace's version ($workspace_version in Cargo.toml), which the binaries report: set [workspace.package] version = \"$version\" first"
if [ -e "$out" ] && [ -n "$(ls -A "$out")" ]; then fail "$out is not empty: give a new or empty OUTDIR"; fi
# The commit built, and whether the tree differs from it: a release only from a clean tree.
commit=$(git -C "$repo" rev-parse --verify HEAD 2>/dev/null) || fail "$repo is not a git checkout with a commit: a release is built from a commit"
tracked=$(git -C "$repo" status --porcelain --untracked-files=no)
untracked=$(cd "$repo" && git ls-files --others --exclude-standard -- \
  $(sed -n 's/^members = \[\(.*\)\]/\1/p' Cargo.toml | tr -d '",') charts cli/krew Dockerfile)
dirty=false
if [ -n "$tracked$untracked" ]; then
  dirty=true
  $quick || fail "the tree is not committed ($commit plus the changes below): commit or remove them, or use --quick (not a release)
$(printf '%s\n' "$tracked" | sed '/^$/d;s/^/  changed: /')
$(printf '%s\n' "$untracked" | sed '/^$/d;s/^/  untracked: /')"
fi
image="ghcr.io/holdfast-dev/holdfast"
if [ -n "$registry" ]; then
  [[ $registry =~ ^[A-Za-z0-9.-]+(:[0-9]+)?(/[a-z0-9._/-]+)?$ ]] ||
    fail "REGISTRY '$registry' is not host[:port][/path]"
  $quick && fail "--quick builds no image: a release pushed to $registry needs one; drop --quick"
  crane=${HOLDFAST_CRANE:-$("$repo/tests/tools/registry/build.sh")}
  [ -n "$crane" ] && [ -x "$crane" ] ||
    fail "pushing to $registry needs crane: tests/tools/registry/build.sh builds it, or set HOLDFAST_CRANE to its path"
  image="${registry%/}/holdfast"
fi
mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
date=$(date -u -d "@${SOURCE_DATE_EPOCH:-$(date +%s)}" +%F)
target=x86_64-unknown-linux-gnu
[ "$(uname -m)" = x86_64 ] && [ "$(uname -s)" = Linux ] || fail "only linux/amd64 is built, on linux/amd64"
helm="$("$repo/tests/cluster/helm/build.sh")/bin/helm"
export HELM_CONFIG_HOME="$work/helm/config" HELM_CACHE_HOME="$work/helm/cache" HELM_DATA_HOME="$work/helm/data"

# --- the chart: the tree's, with its default image the one this release builds
echo "== chart" >&2
cp -r "$repo/charts/holdfast" "$work/chart"
if [ "$image" != ghcr.io/holdfast-dev/holdfast ]; then
  n=$(grep -c '^  repository: ghcr.io/holdfast-dev/holdfast$' "$work/chart/values.yaml" || true)
  [ "$n" = 1 ] || fail "charts/holdfast/values.yaml: image.repository is not the one line 'repository: ghcr.io/holdfast-dev/holdfast' this script rewrites"
  sed -i "s|^  repository: ghcr.io/holdfast-dev/holdfast\$|  repository: $image|" "$work/chart/values.yaml"
fi
# Artifact Hub's list of images: the one this release builds.
n=$(grep -c '^      image: ghcr.io/holdfast-dev/holdfast:[^ ]*$' "$work/chart/Chart.yaml" || true)
[ "$n" = 1 ] || fail "charts/holdfast/Chart.yaml: the artifacthub.io/images annotation does not name ghcr.io/holdfast-dev/holdfast once"
sed -i "s|^      image: ghcr.io/holdfast-dev/holdfast:[^ ]*\$|      image: $image:$version|" "$work/chart/Chart.yaml"
"$helm" lint --strict "$work/chart" >&2
"$helm" package "$work/chart" --version "$version" --app-version "$version" -d "$out" >&2
chart="$out/holdfast-$version.tgz"
[ -f "$chart" ] || fail "helm package wrote no $chart"

# --- the install manifests for kubectl apply: the Namespace, then the chart's objects
# (its `helm test` Pod left out: nobody runs it there).
for mode in plain kueue; do
  file="$out/install.yaml"; [ "$mode" = kueue ] && file="$out/install-kueue.yaml"
  {
    printf '# holdfast %s, %s mode: kubectl apply --server-side -f %s\n' "$version" "$mode" "$(basename "$file")"
    printf -- '---\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: holdfast-system\n'
    "$helm" template holdfast "$chart" --namespace holdfast-system --skip-tests --set "mode=$mode"
  } > "$file"
done

# --- the CLI archive and its sha256
echo "== CLI (kubectl-holdfast, $target)" >&2
if $quick; then
  # The dev profile, built as tests/run.sh's build stage builds it (the whole workspace's
  # binaries, so the same features): there, nothing is left to compile.
  (cd "$repo" && cargo build --locked --workspace --bins >&2)
else
  (cd "$repo" && cargo build --release --locked -p holdfast-cli >&2)
fi
dir=release; $quick && dir=debug
mkdir -p "$work/cli"
install -m 0755 "${CARGO_TARGET_DIR:-$repo/target}/$dir/kubectl-holdfast" "$work/cli/kubectl-holdfast"
install -m 0644 "$repo/LICENSE" "$repo/README.md" "$work/cli/"
archive="kubectl-holdfast-v$version-$target.tar.gz"
# Reproducible: fixed order, owners and mtimes, no name or time in the gzip header.
tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$work/cli" -cf - kubectl-holdfast LICENSE README.md |
  gzip -9n > "$out/$archive"
(cd "$out" && sha256sum "$archive" > "$archive.sha256")
sha=$(cut -d' ' -f1 "$out/$archive.sha256")

# --- the krew manifest, from its template: no @NAME@ may be left
base=${HOLDFAST_RELEASE_URL:-https://github.com/holdfast-dev/holdfast/releases/download/v$version}
# --quick's archive is no release's: its manifest points at the file here, for
# `kubectl krew install --manifest=holdfast.krew.yaml --archive=ARCHIVE` trials only.
$quick && base="file://$out"
sed -e "s|@VERSION@|$version|g" -e "s|@URI_LINUX_AMD64@|${base%/}/$archive|g" -e "s|@SHA256_LINUX_AMD64@|$sha|g" \
  "$repo/cli/krew/holdfast.yaml.in" > "$out/holdfast.krew.yaml"
if left=$(grep -no '@[A-Z0-9_]*@' "$out/holdfast.krew.yaml"); then
  fail "holdfast.krew.yaml: placeholders left unfilled: $left"
fi

# --- the SBOM: the crates of the packages the Dockerfile builds, resolved as that build does
echo "== SBOM" >&2
build_cmd=$(grep -o 'cargo build [^&\\]*' "$repo/Dockerfile" | head -1)
packages=$(echo "$build_cmd" | grep -o -- '-p [a-z0-9_-]*' | sed 's/^-p //')
[ -n "$packages" ] || fail "no -p PACKAGE in the Dockerfile's build command: $build_cmd"
tree_args=() quick_property=()
$quick && quick_property=("holdfast:quick=not a release: the CLI is from the dev profile and the image named here was not built")
for p in $packages; do tree_args+=(-p "$p"); done
(cd "$repo" && cargo tree --locked -e normal "${tree_args[@]}" --target "$target" --prefix depth -f '{p}|{l}') |
  python3 "$repo/tests/tools/release/sbom.py" "$version" "$image:$version" "$repo/Cargo.lock" \
    "holdfast:git-commit=$commit" "holdfast:git-tree-dirty=$dirty" \
    "${quick_property[@]}" \
    > "$out/holdfast-$version.cdx.json"

# --- the image, from the Dockerfile's recipe, named for this release
if ! $quick; then
  echo "== image" >&2
  built=$("$repo/tests/cluster/node/holdfast-image.sh")
  mkdir -p "$work/image"
  tar -C "$work/image" -xf "$built/image.tar"
  python3 - "$work/image/index.json" "$image:$version" <<'PY'
import json, sys
path, ref = sys.argv[1], sys.argv[2]
index = json.load(open(path))
for m in index["manifests"]:
    m["annotations"] = {"io.containerd.image.name": ref, "org.opencontainers.image.ref.name": ref.rsplit(":", 1)[1]}
json.dump(index, open(path, "w"), separators=(",", ":"))
PY
  tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$work/image" \
    -cf "$out/holdfast-image-$version.oci.tar" oci-layout index.json blobs
fi

# --- the changelog: Unreleased becomes this version's section (the repo's file is left as is)
python3 - "$repo/CHANGELOG.md" "$version" "$date" "$out" "$commit" "$dirty" "$quick" <<'PY'
import re, sys
src, version, date, out, commit, dirty, quick = sys.argv[1:]
text = open(src, encoding="utf-8").read()
m = re.search(r"^## \[Unreleased\][^\n]*\n(.*?)(?=^## |\Z)", text, re.S | re.M)
if not m or not m.group(1).strip():
    sys.exit("release: CHANGELOG.md has no ## [Unreleased] section with notes in it")
if re.search(r"^## \[" + re.escape(version) + r"\]", text, re.M):
    sys.exit(f"release: CHANGELOG.md already has a section for {version}")
notes = m.group(1).strip() + "\n"
head = f"## [{version}] - {date}\n\n"
changelog = text[: m.start()] + "## [Unreleased]\n\n" + head + notes + "\n" + text[m.end():]
open(f"{out}/CHANGELOG.md", "w", encoding="utf-8").write(changelog.rstrip("\n") + "\n")
built = f"Built from commit {commit}" + (" with uncommitted changes" if dirty == "true" else "") + ".\n\n"
if quick == "true":
    built = "NOT A RELEASE: tests/release.sh --quick (the CLI from the dev profile, no image). " + built
open(f"{out}/RELEASE-NOTES.md", "w", encoding="utf-8").write(f"# holdfast {version} ({date})\n\n" + built + notes)
PY

if $quick; then
  printf '%s\n' "tests/release.sh --quick: NOT A RELEASE. The CLI archive holds a dev-profile build," \
    "no image was built (the SBOM and the chart name one that does not exist), and the krew" \
    "manifest points at the archive here. Commit $commit$($dirty && echo ', with uncommitted changes')." \
    "Make a release with tests/release.sh VERSION OUTDIR, from a committed tree." > "$out/QUICK-NOT-A-RELEASE"
fi
(cd "$out" && find . -maxdepth 1 -type f ! -name SHA256SUMS -printf '%P\n' | sort | xargs sha256sum > SHA256SUMS)

# --- the pushes, last: only what was all built
if [ -n "$registry" ]; then
  echo "== push to $registry" >&2
  plain=(); insecure=()
  if [ "${HOLDFAST_REGISTRY_PLAIN_HTTP:-}" = 1 ]; then plain=(--plain-http); insecure=(--insecure); fi
  mkdir -p "$work/push"
  tar -C "$work/push" -xf "$out/holdfast-image-$version.oci.tar"
  "$crane" push "${insecure[@]}" "$work/push" "$image:$version" >&2
  "$helm" push "${plain[@]}" "$chart" "oci://${registry%/}/charts" >&2
fi
echo "release $version of $commit$($quick && echo " (--quick, NOT A RELEASE: dev-profile CLI, no image$($dirty && echo ', uncommitted changes'))") in $out:" >&2
(cd "$out" && ls -1)
