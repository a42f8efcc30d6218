//! End-to-end tests live under `tests/`; they start the real `fleetwire` binary.
