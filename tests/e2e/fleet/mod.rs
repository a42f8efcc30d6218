//! Whole fleets of real processes: `fleetwire up`, the trust model end to end, hostile input
//! against every listener, and `fleetwire loadgen`.

mod hostile_input;
mod loadgen;
mod one_owner;
mod private_files;
mod trust;
mod up;
