//! Against the real peer programs (smolvm 1.9.2, PPN) from `../shared/peers`: `#[ignore]`d, run
//! with `cargo test -p fleetwire --test e2e -- --ignored` (docs/interop.md).

mod ppn;
mod smolvm;
mod smolvm_fleet_mode;
