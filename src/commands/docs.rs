//! What `COMMAND DOCS` and `COMMAND INFO` say about each command: one entry
//! per command name (summary, since, complexity, arguments, history, tips,
//! key specs), registered with RedisModule_SetCommandInfo for the commands
//! this build registers (entries for others are skipped). redis-cli's
//! argument hints and documentation tools read them.
//!
//! Tips follow the native counterparts: SCAN carries
//! `nondeterministic_output request_policy:special response_policy:special`,
//! HSCAN/SSCAN/ZSCAN `nondeterministic_output`; SNAPSHOT.UNLINK, which
//! answers a count per node, is sent to all shards and summed like DBSIZE.

use std::ffi::CStr;

pub use crate::server::cmdinfo::{Arg, ArgType, Doc, KeySpec};

/// The module version commands first appeared in.
pub const SINCE: &CStr = c"0.1.0";

const fn arg(name: &'static CStr, kind: ArgType, summary: &'static CStr) -> Arg {
    Arg {
        name,
        kind,
        token: None,
        summary,
        optional: false,
        multiple: false,
    }
}

const fn option(
    name: &'static CStr,
    kind: ArgType,
    token: &'static CStr,
    summary: &'static CStr,
) -> Arg {
    Arg {
        name,
        kind,
        token: Some(token),
        summary,
        optional: true,
        multiple: false,
    }
}

const KEY: Arg = arg(c"key", ArgType::Key, c"The key of the collection.");
const CURSOR: Arg = arg(
    c"cursor",
    ArgType::Integer,
    c"0 to start a new iteration, else the cursor of the previous reply (each cursor is used once).",
);
const MATCH: Arg = option(
    c"pattern",
    ArgType::Pattern,
    c"MATCH",
    c"Only elements whose name matches this glob pattern.",
);
const COUNT: Arg = option(
    c"count",
    ArgType::Integer,
    c"COUNT",
    c"At most this many elements per reply (default 10).",
);
const TYPE: Arg = option(
    c"type",
    ArgType::String,
    c"TYPE",
    c"Only keys of this type (a TYPE name, module types included).",
);

/// Every command's documentation, keyed by command name.
pub static DOCS: &[Doc] = &[
    Doc {
        name: "snapshot.scan",
        summary: c"Iterates a point-in-time snapshot of the key names of the selected database, off the main thread.",
        since: SINCE,
        complexity: c"O(1) to open the snapshot (cursor 0). Each call: O(log N + M) on a worker thread, M the index entries examined (at most COUNT matches and snapshot.scan-budget entries). A MATCH with a literal prefix visits only keys with that prefix.",
        arity: -2,
        tips: c"nondeterministic_output request_policy:special response_policy:special",
        history: &[],
        key: KeySpec::None,
        args: &[CURSOR, MATCH, COUNT, TYPE],
    },
    Doc {
        name: "snapshot.hscan",
        summary: c"Iterates a point-in-time snapshot of a hash's fields and values, off the main thread.",
        since: SINCE,
        complexity: c"O(1) per call for a copy already made. Cursor 0 copies the hash: O(N), on the main thread in slices of snapshot.hash-copy-batch fields; sorting on a worker thread.",
        arity: -3,
        tips: c"nondeterministic_output",
        history: &[],
        key: KeySpec::ReadAt1,
        args: &[
            KEY,
            CURSOR,
            MATCH,
            COUNT,
            option(
                c"novalues",
                ArgType::PureToken,
                c"NOVALUES",
                c"Fields only, without their values.",
            ),
        ],
    },
    Doc {
        name: "snapshot.sscan",
        summary: c"Iterates a point-in-time snapshot of a set's members, off the main thread.",
        since: SINCE,
        complexity: c"O(1) per call for a copy already made. Cursor 0 copies the set: O(N), on the main thread in bounded slices; sorting on a worker thread.",
        arity: -3,
        tips: c"nondeterministic_output",
        history: &[],
        key: KeySpec::ReadAt1,
        args: &[KEY, CURSOR, MATCH, COUNT],
    },
    Doc {
        name: "snapshot.zscan",
        summary: c"Iterates a point-in-time snapshot of a sorted set's members and scores, off the main thread.",
        since: SINCE,
        complexity: c"O(1) per call for a copy already made. Cursor 0 copies the sorted set: O(N), on the main thread in bounded slices; sorting on a worker thread.",
        arity: -3,
        tips: c"nondeterministic_output",
        history: &[],
        key: KeySpec::ReadAt1,
        args: &[
            KEY,
            CURSOR,
            MATCH,
            COUNT,
            option(
                c"noscores",
                ArgType::PureToken,
                c"NOSCORES",
                c"Members only, without their scores.",
            ),
        ],
    },
    Doc {
        name: "snapshot.unlink",
        summary: c"Unlinks the keys of the selected database that match a pattern in a point-in-time snapshot; returns how many.",
        since: SINCE,
        complexity: c"O(log N + K) on a worker thread to find the K matching keys; O(K) to unlink them, on the main thread in slices of at most 1 ms.",
        arity: -2,
        tips: c"request_policy:all_shards response_policy:agg_sum",
        history: &[],
        key: KeySpec::None,
        args: &[
            arg(
                c"pattern",
                ArgType::Pattern,
                c"Glob pattern of the keys to unlink (as MATCH of SNAPSHOT.SCAN).",
            ),
            TYPE,
            option(
                c"dryrun",
                ArgType::PureToken,
                c"DRYRUN",
                c"Count the keys that would be unlinked, unlink nothing.",
            ),
        ],
    },
    Doc {
        name: "snapshot.keys",
        summary: c"Returns the key names of the selected database that match a pattern, from a point-in-time snapshot walked on a worker thread (KEYS without the stall).",
        since: SINCE,
        complexity: c"O(1) on the main thread to open the snapshot; O(N) on a worker thread, N the keys of the database (O(log N + M) for a pattern with a literal prefix, M the keys with that prefix).",
        arity: -2,
        tips: c"request_policy:all_shards nondeterministic_output_order",
        history: &[],
        key: KeySpec::None,
        args: &[arg(
            c"pattern",
            ArgType::Pattern,
            c"Glob pattern of the keys to return (as KEYS).",
        )],
    },
    native(
        "snapshot.native-scan",
        c"Internal: what SCAN becomes under snapshot.serve-native (SCAN's arguments and replies, served from a snapshot).",
        c"nondeterministic_output request_policy:special response_policy:special",
        KeySpec::None,
    ),
    native(
        "snapshot.native-keys",
        c"Internal: what KEYS becomes under snapshot.serve-native (KEYS's argument and reply, served from a snapshot).",
        c"request_policy:all_shards nondeterministic_output_order",
        KeySpec::None,
    ),
    native(
        "snapshot.native-hscan",
        c"Internal: what HSCAN becomes under snapshot.serve-native (HSCAN's arguments and replies, served from a snapshot).",
        c"nondeterministic_output",
        KeySpec::ReadAt1,
    ),
    native(
        "snapshot.native-sscan",
        c"Internal: what SSCAN becomes under snapshot.serve-native (SSCAN's arguments and replies, served from a snapshot).",
        c"nondeterministic_output",
        KeySpec::ReadAt1,
    ),
    native(
        "snapshot.native-zscan",
        c"Internal: what ZSCAN becomes under snapshot.serve-native (ZSCAN's arguments and replies, served from a snapshot).",
        c"nondeterministic_output",
        KeySpec::ReadAt1,
    ),
];

/// The entry of a module command the command filter routes a native
/// command to: the native command's arguments, passed through.
const fn native(
    name: &'static str,
    summary: &'static CStr,
    tips: &'static CStr,
    key: KeySpec,
) -> Doc {
    Doc {
        name,
        summary,
        since: SINCE,
        complexity:
            c"As the native command on the main thread; the snapshot work runs on worker threads.",
        arity: match key {
            KeySpec::None => -1,
            KeySpec::ReadAt1 => -2,
        },
        tips,
        history: &[],
        key,
        args: match key {
            KeySpec::None => &[],
            KeySpec::ReadAt1 => &[KEY],
        },
    }
}

/// The entry for `name` (case-insensitive).
pub fn doc(name: &str) -> Option<&'static Doc> {
    DOCS.iter().find(|d| d.name.eq_ignore_ascii_case(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_well_formed() {
        for d in DOCS {
            assert!(d.name.starts_with("snapshot."), "{}", d.name);
            assert_eq!(doc(&d.name.to_uppercase()).map(|x| x.name), Some(d.name));
            // The mandatory arguments and the command name make the arity.
            let required = d.args.iter().filter(|a| !a.optional).count() as i32;
            assert_eq!(d.arity, -(required + 1), "{}", d.name);
            let keys = d.args.iter().filter(|a| a.kind == ArgType::Key).count();
            assert_eq!(keys, usize::from(d.key == KeySpec::ReadAt1), "{}", d.name);
            for a in d.args {
                if a.kind == ArgType::PureToken {
                    let t = a.token.expect("a pure token has its token");
                    assert!(t.to_bytes().eq_ignore_ascii_case(a.name.to_bytes()));
                    assert!(a.optional, "{:?}", a.name);
                }
            }
        }
    }
}
