//! Stores written by earlier formats' own code (the fixtures in tests/fixtures/) open in this
//! build with every record, upgraded in place; a newer format is refused untouched.

#[path = "../common/mod.rs"]
mod common;
#[path = "../fixtures/generator/data.rs"]
mod data;
#[path = "../fixtures/generator/messages.rs"]
mod messages;

mod expected;
mod fixtures;
mod inspect;
mod opening;
mod records;
mod streams;
