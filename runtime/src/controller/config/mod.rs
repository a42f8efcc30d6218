//! What the controller runs with: its command line as given (`arguments`), the checked
//! settings (`settings`); its log output is `crate::log_output`, shared with the agent.
//! Nothing here depends on the rest of the controller.

pub mod arguments;
pub mod settings;
