//! The driver for each runtime this agent knows: the agent picks one with `VM_RUNTIME`.

use std::sync::Arc;

use super::driver::{Driver, DriverError, DriverSettings};
use super::process::ProcessDriver;
use super::qemu::QemuDriver;
use super::smolvm::SmolvmDriver;
use crate::runtimes::Runtime;

/// The driver of `runtime`, started with `settings`.
pub fn driver_for(
    runtime: Runtime,
    settings: &DriverSettings,
) -> Result<Arc<dyn Driver>, DriverError> {
    Ok(match runtime {
        Runtime::Process => Arc::new(ProcessDriver::new(settings)?),
        Runtime::Smolvm => Arc::new(SmolvmDriver::new(settings)?),
        Runtime::Qemu => Arc::new(QemuDriver::new(settings)?),
    })
}
