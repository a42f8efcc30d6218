//! The `fleetwire` binary: controller, agent, `up`, `validate`, the operator commands.

/// The controller's hot path allocates and frees many small buffers from several threads;
/// mimalloc does that with far less contention than the system allocator (measured in
/// docs/performance.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    fleetwire::cli::main()
}
