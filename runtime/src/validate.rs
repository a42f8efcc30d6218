//! `fleetwire validate FILE [--type NAME] [--strict]`: the programs' own validated reader, from
//! the shell, under the same unknown-field policy (README "Unknown fields"): fields the schema
//! does not define are set aside and printed as warnings, or refused with `--strict`.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;
use fleetwire_types::{describe, read_named, read_named_strict, Rejection, DOCUMENTS};

#[derive(Args, Debug)]
pub struct ValidateArgs {
    /// The document to check; `-` reads standard input.
    pub file: PathBuf,
    /// The root document it should be, e.g. `HostReportedState` or `NodeHeartbeat`. Without it,
    /// `reported.json` and `desired.json` are recognised by name.
    #[arg(long = "type", value_name = "NAME")]
    pub type_name: Option<String>,
    /// Refuse fields the schema does not define (each an `additionalProperties` violation)
    /// instead of setting them aside with a warning.
    #[arg(long)]
    pub strict: bool,
}

/// Exit codes: 0 valid (unknown fields, if any, printed as warnings on stderr), 1 invalid (with
/// `--strict`, also for unknown fields), 2 unreadable, not JSON, or an unknown type.
pub fn run(args: &ValidateArgs) -> ExitCode {
    let Some(type_name) = args
        .type_name
        .clone()
        .or_else(|| type_from_file_name(&args.file))
    else {
        eprintln!(
            "{}: say which document it is with --type NAME (one of: {})",
            args.file.display(),
            names()
        );
        return ExitCode::from(2);
    };
    let bytes = match read_input(&args.file) {
        Ok(bytes) => bytes,
        Err(err) => {
            eprintln!("{}: cannot read: {err}", args.file.display());
            return ExitCode::from(2);
        }
    };
    let outcome = if args.strict {
        read_named_strict(&type_name, &bytes).map(|r| r.map(|()| Vec::new()))
    } else {
        read_named(&type_name, &bytes).map(|r| r.map(|accepted| accepted.unknown_fields))
    };
    match outcome {
        None => {
            eprintln!("unknown document type `{type_name}` (one of: {})", names());
            ExitCode::from(2)
        }
        Some(Ok(unknown)) if unknown.is_empty() => {
            println!("{}: valid {type_name}", args.file.display());
            ExitCode::SUCCESS
        }
        Some(Ok(unknown)) => {
            for field in &unknown {
                eprintln!("warning: unknown field {}", field.as_str());
            }
            println!(
                "{}: valid {type_name} once {} unknown field{} set aside (--strict refuses them)",
                args.file.display(),
                unknown.len(),
                if unknown.len() == 1 { " is" } else { "s are" }
            );
            ExitCode::SUCCESS
        }
        Some(Err(Rejection::Malformed(v))) => {
            eprintln!("{}: {}", args.file.display(), describe(&v));
            ExitCode::from(2)
        }
        Some(Err(Rejection::Invalid(violations))) => {
            for v in &violations {
                println!("{}", describe(v));
            }
            eprintln!(
                "{}: not a valid {type_name} ({} violation{})",
                args.file.display(),
                violations.len(),
                if violations.len() == 1 { "" } else { "s" }
            );
            ExitCode::from(1)
        }
    }
}

fn read_input(path: &Path) -> std::io::Result<Vec<u8>> {
    if path == Path::new("-") {
        let mut buf = Vec::new();
        std::io::stdin().read_to_end(&mut buf)?;
        Ok(buf)
    } else {
        std::fs::read(path)
    }
}

fn type_from_file_name(path: &Path) -> Option<String> {
    match path.file_name()?.to_str()? {
        "reported.json" => Some("HostReportedState".into()),
        "desired.json" => Some("HostDesiredState".into()),
        _ => None,
    }
}

fn names() -> String {
    DOCUMENTS
        .iter()
        .map(|d| d.name)
        .collect::<Vec<_>>()
        .join(", ")
}
