# Writes a one-layer OCI image archive (an OCI image layout, tarred) without a registry or a
# container engine, for `ctr -n k8s.io images import`. Sourced by build.sh and holdfast-image.sh.
#
#   oci_image NAME ROOTFS_DIR CONFIG_JSON OUT_TAR
#
# NAME is the full image reference (e.g. localhost/holdfast/pause:0123abcd); CONFIG_JSON the
# image config's `config` object (Entrypoint, User, Env, ...). The layer is an uncompressed
# tar of ROOTFS_DIR with fixed owners (0:0 unless the rootfs says otherwise with numeric
# ids), mtimes and order, so the same rootfs always gives the same digests.

oci_blob() { # oci_blob LAYOUT FILE: move FILE into LAYOUT's blobs, print "digest size"
  local d s
  d=$(sha256sum "$2" | cut -d' ' -f1)
  s=$(stat -c %s "$2")
  mv "$2" "$1/blobs/sha256/$d"
  echo "sha256:$d $s"
}

oci_image() {
  local name=$1 rootfs=$2 config=$3 out=$4
  local layout
  layout=$(mktemp -d)
  mkdir -p "$layout/blobs/sha256"
  tar --sort=name --mtime=@0 --numeric-owner --owner=0 --group=0 --format=posix \
    --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime \
    -C "$rootfs" -cf "$layout/layer.tar" .
  local layer layer_digest layer_size
  layer=$(oci_blob "$layout" "$layout/layer.tar")
  layer_digest=${layer% *}; layer_size=${layer#* }
  printf '{"architecture":"amd64","os":"linux","config":%s,"rootfs":{"type":"layers","diff_ids":["%s"]},"history":[{"created_by":"holdfast tests/cluster/node/oci.sh"}]}' \
    "$config" "$layer_digest" > "$layout/config.json"
  local cfg cfg_digest cfg_size
  cfg=$(oci_blob "$layout" "$layout/config.json")
  cfg_digest=${cfg% *}; cfg_size=${cfg#* }
  printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"%s","size":%s},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"%s","size":%s}]}' \
    "$cfg_digest" "$cfg_size" "$layer_digest" "$layer_size" > "$layout/manifest.json"
  local man man_digest man_size
  man=$(oci_blob "$layout" "$layout/manifest.json")
  man_digest=${man% *}; man_size=${man#* }
  printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"%s","size":%s,"platform":{"architecture":"amd64","os":"linux"},"annotations":{"io.containerd.image.name":"%s","org.opencontainers.image.ref.name":"%s"}}]}' \
    "$man_digest" "$man_size" "$name" "${name##*:}" > "$layout/index.json"
  echo '{"imageLayoutVersion":"1.0.0"}' > "$layout/oci-layout"
  tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$layout" -cf "$out" oci-layout index.json blobs
  rm -rf "$layout"
}
