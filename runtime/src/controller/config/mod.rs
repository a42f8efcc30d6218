//! What the controller runs with: its command line as given (`arguments`), the checked
//! settings (`settings`) and its log output (`logging`). Nothing here depends on the rest of
//! the controller.

pub mod arguments;
pub mod logging;
pub mod settings;
