//! Shared pieces of the end-to-end tests, compiled once: the basics every test uses (re-exported
//! here), the harnesses of the real agent and controller, stand-in peers and the real ones.

pub mod agent_harness;
pub mod background;
pub mod basics;
pub mod controller_harness;
pub mod cuttable_link;
pub mod loadgen;
pub mod real_peers;
pub mod real_smolvm;
pub mod reported_watch;
pub mod standin_ppn_controller;
pub mod standin_smolvm;
pub mod up_process;

pub use basics::*;
