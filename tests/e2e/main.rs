//! fleetwire's end-to-end tests: one test binary, as dropshot's `tests/integration-tests` and
//! rust-analyzer's are, so the support is compiled and linked once.
//!
//! It is a test target of the `fleetwire` package (runtime/Cargo.toml): cargo then builds the
//! `fleetwire` binary first, with the same features, and names it in `CARGO_BIN_EXE_fleetwire`
//! (`support::fleetwire_bin`). One folder per part of the fleet under test:
//!
//! ```sh
//! cargo test -p fleetwire --test e2e                  # all of them
//! cargo test -p fleetwire --test e2e -- controller::  # one folder
//! cargo test -p fleetwire --test e2e -- --ignored     # the real peers (docs/interop.md)
//! ```

mod agent;
mod controller;
mod crates;
mod docs;
mod fleet;
mod operator;
mod peers;
mod site;
mod support;
