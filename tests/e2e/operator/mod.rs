//! The operator's commands from the shell: `nodes|vms|fleet`, `token`, `validate`, and the
//! systemd units of packaging/.

mod cli;
mod systemd_units;
mod token;
mod translated_errors;
mod up_config;
mod validate;
