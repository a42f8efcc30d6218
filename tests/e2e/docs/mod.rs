//! Docs that run (issue 31): the shell blocks of README.md and docs/, and the curl lines of the
//! reference site, run against a real fleet of `fleetwire up`, secure and plain; an example that
//! lies fails. How a block says how it runs, or why it cannot: `blocks.rs`.

mod blocks;
mod docs_fleet;
mod shell_blocks;
mod site_curl;
