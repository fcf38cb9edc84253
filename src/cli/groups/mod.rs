//! Every setting of the binary, declared once, in the groups `--help` shows them in. A group is
//! a `settings!` struct (see `declare.rs`): per field its flag, environment variable, default
//! and help (clap's attributes and the doc comment) and its key in the config file (`toml`).

mod access;
mod limits;
mod listen;
mod misc;
mod storage;
mod test_double;

pub(crate) use access::Access;
pub(crate) use limits::Limits;
pub(crate) use listen::Listen;
pub(crate) use misc::Misc;
pub(crate) use storage::Storage;
pub(crate) use test_double::TestDouble;
