//! Writes the fuzz targets' starting seeds into `<out>/<target>/` (tests/fuzz/seed.sh; the
//! corpora kept in the repository are these after fuzzing and `afl-cmin`):
//! - documents: every example of `schemas/examples/` (valid, invalid, with unknown fields),
//!   each behind the byte that picks its document;
//! - desired_intake: the desired-state examples as they are;
//! - contact_log: blobs the store's `Encoder` writes (one and several batches) and a blob of
//!   the text-time format earlier builds wrote.
//!
//! The CSR seeds are made by openssl in seed.sh (ring makes no RSA keys).

use std::path::{Path, PathBuf};

use fleetwire::store::contact_log::Encoder;
use fleetwire::store::NodeWrite;
use fleetwire_fuzz::contact_log::join;
use fleetwire_types::DOCUMENTS;

fn write(out: &Path, target: &str, name: &str, bytes: &[u8]) {
    let dir = out.join(target);
    std::fs::create_dir_all(&dir).expect("creating a seed folder");
    std::fs::write(dir.join(name), bytes).expect("writing a seed");
}

fn examples(repo: &Path, document: &str) -> Vec<(String, Vec<u8>)> {
    let mut found = Vec::new();
    for kind in ["valid", "invalid", "unknown-fields"] {
        let dir = repo.join("schemas/examples").join(document).join(kind);
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        let mut paths: Vec<PathBuf> = entries.map(|e| e.expect("an entry").path()).collect();
        paths.sort();
        for path in paths {
            let file = path.file_name().expect("a name").to_string_lossy();
            found.push((
                format!("{document}-{kind}-{file}"),
                std::fs::read(&path).expect("reading an example"),
            ));
        }
    }
    found
}

fn seen(id: &str, time: &str) -> NodeWrite {
    NodeWrite::Seen {
        node_id: id.into(),
        last_heartbeat: time.parse().expect("a timestamp"),
    }
}

fn main() {
    let out = PathBuf::from(std::env::args().nth(1).expect("usage: write_seeds OUT_DIR"));
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");

    for (index, document) in DOCUMENTS.iter().enumerate() {
        for (name, body) in examples(&repo, document.name) {
            let mut seed = vec![index as u8];
            seed.extend_from_slice(&body);
            write(&out, "documents", &name, &seed);
        }
    }
    for (name, body) in examples(&repo, "HostDesiredState") {
        write(&out, "desired_intake", &name, &body);
    }

    let mut encoder = Encoder::default();
    let mut blob = |batch: &[NodeWrite]| {
        encoder
            .encode(batch)
            .expect("encodes")
            .expect("has contacts")
            .to_vec()
    };
    let one = blob(&[
        seen("node-b", "2026-11-30T10:00:00.123456789Z"),
        seen("node-a", "2026-11-30T10:00:01Z"),
        seen("node-a", "2026-11-30T10:00:02+02:00"),
        seen("nöde-ä", "1969-12-31T23:59:59.5-05:30"),
    ]);
    let fleet: Vec<NodeWrite> = (0..40)
        .map(|i| {
            seen(
                &format!("fleet-x-{i:04}"),
                &format!("2026-11-30T10:00:0{}.{i:03}Z", i % 3),
            )
        })
        .collect();
    let fleet = blob(&fleet);
    let later = blob(&[
        seen("node-a", "2026-11-30T10:00:05Z"),
        seen("node-c", "9999-12-31T23:59:59.999999999+14:00"),
    ]);
    write(&out, "contact_log", "one-batch", &one);
    write(&out, "contact_log", "fleet-batch", &fleet);
    write(
        &out,
        "contact_log",
        "three-batches",
        &join(&[&one, &later, &fleet]),
    );
    // Format 1 (text times), as the store's unit tests lay it out: node-a at 10:00:05Z, then
    // node-b front-coded against it.
    let mut text = vec![1u8, 0, 6, 0];
    text.extend_from_slice(b"node-a");
    text.extend_from_slice(&[0, 20]);
    text.extend_from_slice(b"2026-11-30T10:00:05Z");
    text.extend_from_slice(&[5, 1, 0, b'b', 18, 5]);
    text.extend_from_slice(b"7.25Z");
    write(&out, "contact_log", "text-times", &text);
    write(
        &out,
        "contact_log",
        "text-then-numeric",
        &join(&[&text, &later]),
    );
}
