//! Reads one fixture many times in one way, for instruction counting under callgrind:
//! `valgrind --tool=callgrind target/release/examples/read_profile <mode> <fixture> <n>`, where
//! mode is `plain`, `read` or `validate` (a heartbeat) or the same with `-reported` (reported.json).
use fleetwire_types::{read, HostReportedState, NodeHeartbeat, WireDocument};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (mode, path, n): (&str, &str, usize) = (&args[1], &args[2], args[3].parse().unwrap());
    let bytes = std::fs::read(path).unwrap();
    let value: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    let mut ok = 0usize;
    for _ in 0..n {
        ok += match mode {
            "plain" => serde_json::from_slice::<NodeHeartbeat>(&bytes).is_ok() as usize,
            "read" => read::<NodeHeartbeat>(&bytes).is_ok() as usize,
            "validate" => NodeHeartbeat::validator().is_valid(&value) as usize,
            "plain-reported" => {
                serde_json::from_slice::<HostReportedState>(&bytes).is_ok() as usize
            }
            "read-reported" => read::<HostReportedState>(&bytes).is_ok() as usize,
            "validate-reported" => HostReportedState::validator().is_valid(&value) as usize,
            other => panic!("unknown mode {other}"),
        };
    }
    println!("{ok}/{n}");
}
