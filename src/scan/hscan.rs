//! SNAPSHOT.HSCAN key cursor [MATCH pattern] [COUNT count] [NOVALUES]

use super::collection;
use crate::collections::Kind;
use crate::commands::args::CmdError;
use crate::server::Ctx;

pub use super::collection::HASH_FIELD_TTL;

/// Collection snapshot and SNAPSHOT.UNLINK figures for INFO.
pub fn info_figures(m: &crate::state::Module) -> Vec<(&'static str, u64)> {
    let mut v = collection::info_figures(m).to_vec();
    v.extend(crate::unlink::info_figures(m));
    v
}

/// `SNAPSHOT.HSCAN key cursor [MATCH pattern] [COUNT count] [NOVALUES]`
pub fn run(ctx: Ctx, args: &[&[u8]]) -> Result<(), CmdError> {
    collection::run(ctx, args, Kind::Hash)
}
