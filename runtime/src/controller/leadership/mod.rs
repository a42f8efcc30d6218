//! Several controllers on one PostgreSQL database, one leading at a time (docs/controller.md,
//! "Several controllers"): the lease in the database (`lease`), what a standby serves
//! (`standby`) and the service that switches between the two roles (`served`).
//!
//! This module only declares its parts; each part imports from the part that defines an item.

pub mod lease;
pub mod served;
pub mod standby;
