//! Whole fleets of real processes: `fleetwire up`, the trust model end to end, hostile input
//! against every listener, and the load generator (`fleetwire-loadgen`, run in-process) with
//! its parts.

mod hostile_input;
mod loadgen;
mod loadgen_parts;
mod one_owner;
mod private_files;
mod readme_quick_start;
mod trust;
mod up;
mod up_readiness;
mod up_terminal;
