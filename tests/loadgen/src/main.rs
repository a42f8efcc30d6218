//! The `fleetwire-loadgen` binary: its flags, then [`fleetwire_loadgen::run`].

/// As the `fleetwire` binary it loads (runtime/src/main.rs): the simulated nodes' heartbeats
/// allocate many small buffers from several threads.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    use clap::Parser;
    let args = fleetwire_loadgen::LoadgenArgs::parse();
    fleetwire_loadgen::run(&args, &mut std::io::stdout(), &mut std::io::stderr())
}
