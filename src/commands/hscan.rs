//! SNAPSHOT.HSCAN key cursor [MATCH pattern] [COUNT count] [NOVALUES]

use super::args::CmdError;
use super::collection;
use crate::ffi::Ctx;
use crate::hash::Kind;

pub use super::collection::{info_figures, HASH_FIELD_TTL};

/// `SNAPSHOT.HSCAN key cursor [MATCH pattern] [COUNT count] [NOVALUES]`
pub fn run(ctx: Ctx, args: &[&[u8]]) -> Result<(), CmdError> {
    collection::run(ctx, args, Kind::Hash)
}
