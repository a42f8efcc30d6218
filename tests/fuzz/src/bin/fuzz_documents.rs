//! AFL++ target: `fleetwire_fuzz::documents::check` on each input (docs/reliability/parser-fuzz.md).

fn main() {
    fleetwire_fuzz::documents::prepare();
    afl::fuzz!(|data: &[u8]| {
        fleetwire_fuzz::documents::check(data);
    });
}
