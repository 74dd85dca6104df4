#!/bin/sh
# Stubs every target of the workspace's crates (an empty lib, an empty main, one empty
# file per declared [[bench]]) so that the Dockerfiles can build the dependencies alone
# from the Cargo.toml files and Cargo.lock: that layer is reused until a dependency
# changes. Run from the workspace root with each crate's Cargo.toml in place; the
# Dockerfiles delete the stubs before copying the real sources.
set -eu
for manifest in core/Cargo.toml controller/Cargo.toml worker/Cargo.toml \
    tests/emulator/Cargo.toml tests/sandbox/Cargo.toml; do
  crate="${manifest%/Cargo.toml}"
  mkdir -p "$crate/src" "$crate/benches"
  : > "$crate/src/lib.rs"
  echo 'fn main() {}' > "$crate/src/main.rs"
  sed -n '/^\[\[bench\]\]/{n;s/^name = "\(.*\)"$/\1/p;}' "$manifest" | while read -r bench; do
    echo 'fn main() {}' > "$crate/benches/$bench.rs"
  done
done
