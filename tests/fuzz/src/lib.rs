//! fleetwire's fuzz targets: one property check per parser, each taking the fuzzer's bytes
//! (docs/reliability/parser-fuzz.md). The AFL++ binaries (`src/bin/`) call them in the
//! fuzzer's loop; `tests/replay.rs` calls them on every file of the kept corpora and of the
//! crashes found, so `cargo test --workspace` runs them without a fuzzer.

pub mod contact_log;
pub mod csr;
pub mod desired_intake;
pub mod documents;
pub mod targets;
