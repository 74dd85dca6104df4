#!/usr/bin/env bash
# Builds Shoal's release archive: the three binaries (shoal-controller,
# shoal-worker, kubectl-shoal) with the LICENSE and README, as
#   target/dist/shoal-<version>-<target>.tar.gz
# plus SHA256SUMS and a krew plugin manifest (kubectl-shoal.krew.yaml) whose
# download address is SHOAL_DIST_URL_BASE/<archive>.
#
# Reproducible: the same sources, toolchain and SOURCE_DATE_EPOCH give the same
# bytes (files sorted, owner 0, one modification time, gzip without a name or
# time), so a checksum can be checked against a build of one's own.
#
# Environment:
#   SHOAL_DIST_TARGET    Rust target (default: x86_64-unknown-linux-musl when its
#                        standard library is installed, which links statically;
#                        else the host's target, linked against its C library)
#   SHOAL_DIST_BINARIES  package the binaries found in this directory instead of
#                        building them (how the packaging test runs this script)
#   SHOAL_DIST_OUT       output directory (default: target/dist)
#   SHOAL_DIST_URL_BASE  where the archive will be published (default:
#                        <repository in Cargo.toml>/releases/download/v<version>)
#   SOURCE_DATE_EPOCH    modification time of every archived file (default: the
#                        last commit's time, else 0)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

die() { echo "dist: $*" >&2; exit 1; }

for tool in cargo tar gzip sha256sum; do
  command -v "$tool" >/dev/null 2>&1 || die "$tool is not installed"
done

version="$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"$/\1/p' Cargo.toml)"
[ -n "$version" ] || die "no version under [workspace.package] in Cargo.toml"
repository="$(sed -n '/^\[workspace.package\]/,/^\[/s/^repository = "\(.*\)"$/\1/p' Cargo.toml)"
[ -n "$repository" ] || die "no repository under [workspace.package] in Cargo.toml"

host="$(rustc -vV | sed -n 's/^host: //p')"
if [ -n "${SHOAL_DIST_TARGET:-}" ]; then
  target="$SHOAL_DIST_TARGET"
elif rustup target list --installed 2>/dev/null | grep -qx x86_64-unknown-linux-musl; then
  target=x86_64-unknown-linux-musl
else
  target="$host"
  echo "dist: the musl target is not installed; building for $host (dynamically linked" \
    "against its C library). For static binaries: rustup target add x86_64-unknown-linux-musl" >&2
fi

out="${SHOAL_DIST_OUT:-target/dist}"
url_base="${SHOAL_DIST_URL_BASE:-$repository/releases/download/v$version}"
export SOURCE_DATE_EPOCH="${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 0)}"
binaries=(shoal-controller shoal-worker kubectl-shoal)

if [ -n "${SHOAL_DIST_BINARIES:-}" ]; then
  from="$SHOAL_DIST_BINARIES"
else
  cargo build --release --locked --target "$target" \
    -p shoal-controller -p shoal-worker --bins
  from="target/$target/release"
fi
for binary in "${binaries[@]}"; do
  [ -x "$from/$binary" ] || die "$from/$binary is missing or not executable"
done

name="shoal-$version-$target"
stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/$name" "$out"
for binary in "${binaries[@]}"; do
  install -m 0755 "$from/$binary" "$stage/$name/$binary"
done
install -m 0644 LICENSE README.md "$stage/$name/"

archive="$name.tar.gz"
tar --sort=name --mtime="@$SOURCE_DATE_EPOCH" --owner=0 --group=0 --numeric-owner \
  --format=gnu -C "$stage" -cf - "$name" | gzip -n -9 > "$out/$archive"
(cd "$out" && sha256sum "$archive" > SHA256SUMS)
sha256="$(cut -d' ' -f1 "$out/SHA256SUMS")"

# krew's plugin manifest (krew.sigs.k8s.io/docs/developer-guide): one platform
# per archive; `files` picks the plugin and its licence out of the archive.
os="${target#*-*-}"; os="${os%%-*}"
arch="${target%%-*}"
case "$arch" in x86_64) arch=amd64 ;; aarch64) arch=arm64 ;; esac
cat > "$out/kubectl-shoal.krew.yaml" <<EOF
apiVersion: krew.googlecontainertools.github.com/v1alpha2
kind: Plugin
metadata:
  name: shoal
spec:
  version: v$version
  homepage: $repository
  shortDescription: Review, approve and follow Shoal's Swarms and DeploymentPlans
  description: |
    kubectl shoal diffs, approves and follows what the Shoal operator assigns:
    Swarm revisions (which jobs move from whom to whom) and DeploymentPlan
    operations, with hash-pinned approvals.
  platforms:
  - selector:
      matchLabels:
        os: $os
        arch: $arch
    uri: $url_base/$archive
    sha256: $sha256
    bin: kubectl-shoal
    files:
    - from: $name/kubectl-shoal
      to: .
    - from: $name/LICENSE
      to: .
EOF
echo "dist: $out/$archive (sha256 $sha256), $out/SHA256SUMS, $out/kubectl-shoal.krew.yaml"
