//! SNAPSHOT.HSCAN key cursor [MATCH pattern] [COUNT count] [NOVALUES]

use super::collection;
use crate::args::CmdError;
use crate::collections::Kind;
use crate::server::locked::ServerLock;
use crate::server::Ctx;

/// `SNAPSHOT.HSCAN key cursor [MATCH pattern] [COUNT count] [NOVALUES]`
pub fn run(_lock: &ServerLock, ctx: Ctx, args: &[&[u8]]) -> Result<(), CmdError> {
    collection::run(ctx, args, Kind::Hash)
}
