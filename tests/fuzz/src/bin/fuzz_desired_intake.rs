//! AFL++ target: `fleetwire_fuzz::desired_intake::check` on each input (docs/reliability/parser-fuzz.md).

fn main() {
    fleetwire_fuzz::desired_intake::prepare();
    afl::fuzz!(|data: &[u8]| {
        fleetwire_fuzz::desired_intake::check(data);
    });
}
