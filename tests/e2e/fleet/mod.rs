//! Whole fleets of real processes: `fleetwire up`, the trust model end to end, hostile input
//! against every listener, and the load generator (`fleetwire-loadgen`, run in-process) with
//! its parts.

mod hostile_input;
mod loadgen;
mod loadgen_parts;
mod one_owner;
mod private_files;
mod trust;
mod up;
