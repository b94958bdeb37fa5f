//! SNAPSHOT.ZSCAN key cursor [MATCH pattern] [COUNT count] [NOSCORES]

use super::args::CmdError;
use super::collection;
use crate::ffi::Ctx;
use crate::hash::Kind;

/// `SNAPSHOT.ZSCAN key cursor [MATCH pattern] [COUNT count] [NOSCORES]`
pub fn run(ctx: Ctx, args: &[&[u8]]) -> Result<(), CmdError> {
    collection::run(ctx, args, Kind::Zset)
}
