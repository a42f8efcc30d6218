//! AFL++ target: `fleetwire_fuzz::csr::check` on each input (docs/reliability/parser-fuzz.md).

fn main() {
    fleetwire_fuzz::csr::prepare();
    afl::fuzz!(|data: &[u8]| {
        fleetwire_fuzz::csr::check(data);
    });
}
