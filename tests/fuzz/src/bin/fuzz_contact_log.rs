//! AFL++ target: `fleetwire_fuzz::contact_log::check` on each input (docs/reliability/parser-fuzz.md).

fn main() {
    fleetwire_fuzz::contact_log::prepare();
    afl::fuzz!(|data: &[u8]| {
        fleetwire_fuzz::contact_log::check(data);
    });
}
