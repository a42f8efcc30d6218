//! A PostgreSQL schema of its own for each test ([`test_schema`]), so that parallel tests and
//! runs on one server never collide. Public for the end-to-end tests (tests/).
//!
//! The server is `FLEETWIRE_TEST_POSTGRES` (default `postgres://postgres@127.0.0.1:5432/test`,
//! the one `.ci/run` starts). When it cannot be reached the test is skipped with a message
//! saying how to run it, except under `CI=true`, where that is a failure.

/// The server tests use unless `FLEETWIRE_TEST_POSTGRES` names another.
pub const DEFAULT_URL: &str = "postgres://postgres@127.0.0.1:5432/test";

/// A fresh schema, dropped with everything in it when this is dropped.
pub struct TestSchema {
    /// The server's URL with the schema as the connections' `search_path`.
    pub url: String,
    /// The schema's name (`fw_test_<random>`).
    pub name: String,
    server: String,
}

/// A fresh schema on the test server, or `None` (and a message on stderr) when the server is
/// not reachable outside CI.
pub fn test_schema() -> Option<TestSchema> {
    let server = std::env::var("FLEETWIRE_TEST_POSTGRES").unwrap_or_else(|_| DEFAULT_URL.into());
    let name = format!("fw_test_{:016x}", rand::random::<u64>());
    // On a thread of its own, as `Drop`: the caller may be on an async runtime.
    let (url, create) = (server.clone(), format!("CREATE SCHEMA {name}"));
    let created = std::thread::spawn(move || {
        let mut client = super::connect_client(&url)?;
        client
            .batch_execute(&create)
            .map_err(|e| crate::store::error::StoreError::postgres("create the test schema", e))
    })
    .join()
    .expect("the schema thread panicked");
    match created {
        Ok(()) => {}
        Err(error) => {
            if std::env::var("CI").is_ok_and(|ci| ci == "true") {
                panic!("CI=true and the test PostgreSQL is not reachable: {error}");
            }
            eprintln!(
                "skipped: PostgreSQL not reachable ({error}); start one at {DEFAULT_URL} \
                 (trust auth, database test) or set FLEETWIRE_TEST_POSTGRES to run this test"
            );
            return None;
        }
    };
    let separator = if server.contains('?') { '&' } else { '?' };
    Some(TestSchema {
        url: format!("{server}{separator}options=-csearch_path%3D{name}"),
        name,
        server,
    })
}

impl Drop for TestSchema {
    fn drop(&mut self) {
        let (server, name) = (self.server.clone(), self.name.clone());
        // On a thread of its own: a test on an async runtime may drop this there, where the
        // sync client's own runtime cannot run.
        let dropped = std::thread::spawn(move || {
            let mut client = super::connect_client(&server)?;
            client
                .batch_execute(&format!("DROP SCHEMA IF EXISTS {name} CASCADE"))
                .map_err(|e| crate::store::error::StoreError::postgres("drop the test schema", e))
        })
        .join();
        if let Ok(Err(error)) = dropped {
            eprintln!("could not drop the test schema {}: {error}", self.name);
        }
    }
}
