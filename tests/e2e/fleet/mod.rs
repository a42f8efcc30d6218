//! Whole fleets of real processes: `fleetwire up`, the trust model end to end, hostile input
//! against every listener, and `fleetwire loadgen`.

mod hostile_input;
mod loadgen;
mod trust;
mod up;
