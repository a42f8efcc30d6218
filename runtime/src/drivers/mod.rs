//! Runtime drivers: what runs a host's machines. One trait (`driver`), chosen by the node's
//! runtime name (`registry`); what a driver sees is an `observation`.

pub mod driver;
pub mod observation;
pub mod proc_stats;
pub mod process;
pub mod qemu;
pub mod qemu_settings;
pub mod registry;
pub mod restart_backoff;
pub mod smolvm;
pub mod supervision;

pub use driver::{ClientTlsFiles, Driver, DriverError, DriverSettings};
pub use observation::{InstanceStatus, Observation, RuntimeStatus, VolumeStatus};
