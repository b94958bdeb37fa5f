//! SNAPSHOT.HSCAN key cursor [MATCH pattern] [COUNT count] [NOVALUES]

use super::args::CmdError;
use super::collection;
use crate::ffi::Ctx;
use crate::hash::Kind;

pub use super::collection::HASH_FIELD_TTL;

/// Collection snapshot and SNAPSHOT.UNLINK figures for INFO.
pub fn info_figures(m: &crate::state::Module) -> Vec<(&'static str, u64)> {
    let mut v = collection::info_figures(m).to_vec();
    v.extend(super::unlink::info_figures(m));
    v
}

/// `SNAPSHOT.HSCAN key cursor [MATCH pattern] [COUNT count] [NOVALUES]`
pub fn run(ctx: Ctx, args: &[&[u8]]) -> Result<(), CmdError> {
    collection::run(ctx, args, Kind::Hash)
}
