#!/usr/bin/env bash
# Writes the fuzz targets' starting seeds into DIR/<target>/ (default target/fuzz-seeds). The
# corpora kept in tests/fuzz/corpus/ began as these (docs/reliability/parser-fuzz.md).
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-target/fuzz-seeds}
rm -rf "$out"
cargo run -q -p fleetwire-fuzz --example write_seeds -- "$out"

# CSRs of every kind of key: those the CA signs for and those it refuses, each as PEM text
# (behind the byte 0) and as DER (behind the byte 1), see tests/fuzz/src/csr.rs.
mkdir -p "$out/csr"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
key() { openssl genpkey -quiet "$@"; }
key -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$work/rsa2048.key"
key -algorithm RSA -pkeyopt rsa_keygen_bits:1024 -out "$work/rsa1024.key"
key -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$work/p256.key"
key -algorithm EC -pkeyopt ec_paramgen_curve:P-384 -out "$work/p384.key"
key -algorithm EC -pkeyopt ec_paramgen_curve:P-521 -out "$work/p521.key"
key -algorithm EC -pkeyopt ec_paramgen_curve:secp256k1 -out "$work/secp256k1.key"
key -algorithm ED25519 -out "$work/ed25519.key"
key -algorithm ED448 -out "$work/ed448.key"
for k in "$work"/*.key; do
  name=$(basename "$k" .key)
  openssl req -new -key "$k" -subj "/CN=evil.example/O=root" \
    -addext "subjectAltName=DNS:evil.example,IP:1.2.3.4" -addext "basicConstraints=critical,CA:TRUE" \
    -out "$work/$name.pem"
  { printf '\0'; cat "$work/$name.pem"; } >"$out/csr/$name-pem"
  { printf '\1'; openssl req -in "$work/$name.pem" -outform DER; } >"$out/csr/$name-der"
done
# Two requests in one text: the first is the one checked and signed.
{ printf '\0'; cat "$work/p256.pem" "$work/rsa1024.pem"; } >"$out/csr/two-requests-pem"
echo "seeds in $out: $(find "$out" -type f | wc -l) files"
