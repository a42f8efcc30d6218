//! The reference site the controller serves: its examples, compression, and a real browser.

mod browser;
mod compression;
mod examples;
