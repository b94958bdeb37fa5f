//! SNAPSHOT.SSCAN key cursor [MATCH pattern] [COUNT count]

use super::args::CmdError;
use super::collection;
use crate::ffi::Ctx;
use crate::hash::Kind;

/// `SNAPSHOT.SSCAN key cursor [MATCH pattern] [COUNT count]`
pub fn run(ctx: Ctx, args: &[&[u8]]) -> Result<(), CmdError> {
    collection::run(ctx, args, Kind::Set)
}
