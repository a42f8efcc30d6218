//! The `fleetwire` binary: controller, agent, `up`, `validate`, `loadgen`.

fn main() -> std::process::ExitCode {
    fleetwire::cli::main()
}
