#!/usr/bin/env sh
# Installs libgridwise (shared and static), grpc.h and gridwise.pc under PREFIX
# (default /usr/local), building it first with `cargo build --release -p gridwise-capi`.
#
#   crates/capi/install.sh                       # as root, or:
#   PREFIX=$HOME/.local crates/capi/install.sh
#   cc prog.c $(pkg-config --cflags --libs gridwise)
#
# LIB_DIR=<dir> installs the libraries found there instead of building (the tests use it).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
PREFIX=${PREFIX:-/usr/local}
if [ -z "${LIB_DIR:-}" ]; then
    cargo build --release -p gridwise-capi --manifest-path "$root/Cargo.toml"
    LIB_DIR="$root/target/release"
fi
version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$root/Cargo.toml" | head -n 1)
for f in libgridwise.a libgridwise.so; do
    [ -f "$LIB_DIR/$f" ] || { echo "install.sh: $LIB_DIR/$f is missing: build gridwise-capi first" >&2; exit 1; }
done
mkdir -p "$PREFIX/lib/pkgconfig" "$PREFIX/include"
cp "$LIB_DIR/libgridwise.a" "$LIB_DIR/libgridwise.so" "$PREFIX/lib/"
cp "$here/include/grpc.h" "$PREFIX/include/"
sed -e "s|@PREFIX@|$PREFIX|" -e "s|@VERSION@|$version|" "$here/gridwise.pc.in" \
    > "$PREFIX/lib/pkgconfig/gridwise.pc"
echo "installed libgridwise $version under $PREFIX"
