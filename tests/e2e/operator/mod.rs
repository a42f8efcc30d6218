//! The operator's commands from the shell: `nodes|vms|fleet`, `token`, `validate`, the systemd
//! units of packaging/, and the first hour of a new operator (issue 30): truthful creates,
//! field validation, kubectl's and nomad's habits, drain, and the terminal.

mod cli;
mod drain;
mod field_validation;
mod habits;
mod run_cli;
mod systemd_units;
mod terminal;
mod token;
mod translated_errors;
mod up_config;
mod validate;
mod vm_create;
