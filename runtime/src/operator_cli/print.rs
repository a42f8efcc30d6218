//! How the operator commands print: answers on standard output and messages on standard
//! error, through `anstream`, which strips the colours (`paint`) unless the stream is a
//! terminal and `NO_COLOR` is unset; failures as `error: ...` with an exit code.

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use fleetwire_client::{Error, ResponseValue};
use serde::Serialize;

use super::exit::Failure;
use super::output::{self, Format, View};
use super::paint;

/// How often `--watch`, `vms logs -f` and the waits ask again.
pub const POLL: Duration = Duration::from_millis(500);

/// What a command ends with, once it has printed its output.
pub type Done = Result<ExitCode, Error>;

/// Writes `text` to standard output, its colours stripped unless that is a terminal and
/// `NO_COLOR` is unset (`paint`).
pub fn out(text: &str) {
    let mut stdout = anstream::stdout().lock();
    let _ = stdout.write_all(text.as_bytes());
    let _ = stdout.flush();
}

/// Writes a line to standard error, as [`out`] does.
pub fn err_line(text: &str) {
    let mut stderr = anstream::stderr().lock();
    let _ = writeln!(stderr, "{text}");
}

/// One line per violation, each after a line break: `  /pointer: message (keyword)`.
pub fn violation_lines(violations: &[fleetwire_types::Violation]) -> String {
    violations
        .iter()
        .map(|v| format!("\n  {}: {} ({})", v.shown_path(), v.message, v.keyword))
        .collect()
}

/// Prints `error: message` on standard error; the exit code of `failure`.
pub fn fail(failure: Failure, message: &str) -> ExitCode {
    err_line(&format!("{} {message}", paint::error("error:")));
    failure.into()
}

/// The answer in the chosen format; what the controller sent that this fleetwire does not know
/// is named on standard error (it is left out of the JSON too: `-o json` prints the typed
/// answer).
pub fn shown<T: Serialize>(format: Format, answer: ResponseValue<T>, view: View<'_, T>) -> String {
    warn_of(&answer);
    output::render(format, &answer.into_inner(), view)
}

/// Names on standard error what the controller sent that this fleetwire does not know, and
/// the warnings it answered.
pub fn warn_of<T>(answer: &ResponseValue<T>) {
    let warning = paint::warning("warning:");
    for field in answer.unknown_fields() {
        err_line(&format!(
            "{warning} the controller's answer has a field this fleetwire does not know: {}",
            field.as_str()
        ));
    }
    for text in answer.warnings() {
        err_line(&format!("{warning} {text}"));
    }
}
