//! How one routed call is served, decided from its arguments alone: from a
//! snapshot (with the arguments the SNAPSHOT.* machinery takes) or by the
//! native command. Pure: no server types.

use super::mode::Native;
use crate::args::{parse_cursor, parse_options, Allowed};
use crate::cursor::is_issued;

/// Pages of at least this many keys (SCAN): COUNT is a hint, and a
/// `COUNT 10` loop (redis-cli, django-redis) served 100 keys a call makes a
/// tenth of the calls, each cheaper on the main thread than the ten native
/// calls it replaces.
pub const SCAN_MIN_COUNT: usize = 100;

/// Pages of at least this many elements (HSCAN/SSCAN/ZSCAN).
pub const COLLECTION_MIN_COUNT: usize = 512;

/// A collection of at most this many elements (the servers' default
/// listpack limit), or in a compact encoding (listpack, intset) whatever
/// its size, is answered by the native command at cursor 0: it comes back
/// whole in one call natively (a small one in few), cheaper than any copy.
pub const SMALL_COLLECTION: usize = 128;

/// Options of the native commands that not every server has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Options {
    /// `HSCAN ... NOVALUES` (Redis 7.4+, Valkey 8+).
    pub novalues: bool,
    /// `ZSCAN ... NOSCORES` (Valkey 8+).
    pub noscores: bool,
}

impl Options {
    pub fn bits(self) -> u8 {
        u8::from(self.novalues) | u8::from(self.noscores) << 1
    }

    pub fn from_bits(b: u8) -> Options {
        Options {
            novalues: b & 1 != 0,
            noscores: b & 2 != 0,
        }
    }
}

/// How to serve a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// Run the native command with the arguments unchanged: a cursor
    /// snapscan did not issue, or arguments the native command refuses
    /// (its own error reply, word for word).
    Native,
    /// Serve from a snapshot: the SNAPSHOT.* command's arguments (name
    /// first). `cursor` is the one given; `key` the collection's, if any.
    Snapshot {
        args: Vec<Vec<u8>>,
        cursor: u64,
        key: Option<Vec<u8>>,
    },
}

/// The SNAPSHOT.* command serving `n`.
pub fn snapshot_command(n: Native) -> &'static [u8] {
    match n {
        Native::Scan => b"SNAPSHOT.SCAN",
        Native::Keys => b"SNAPSHOT.KEYS",
        Native::Hscan => b"SNAPSHOT.HSCAN",
        Native::Sscan => b"SNAPSHOT.SSCAN",
        Native::Zscan => b"SNAPSHOT.ZSCAN",
    }
}

/// Decides how to serve `n` called with `args` (without the command
/// name). `type_known` says whether SCAN's `TYPE` argument names a type;
/// `has` which options the server's own commands take (one it lacks is
/// left to the native command's `ERR syntax error`).
pub fn plan(n: Native, args: &[&[u8]], has: Options, type_known: impl Fn(&[u8]) -> bool) -> Plan {
    if n == Native::Keys {
        return match args {
            [pattern] => Plan::Snapshot {
                args: vec![snapshot_command(n).to_vec(), pattern.to_vec()],
                cursor: 0,
                key: None,
            },
            _ => Plan::Native,
        };
    }
    let (key, rest) = match n {
        Native::Scan => (None, args),
        _ => match args.split_first() {
            Some((k, rest)) => (Some(*k), rest),
            None => return Plan::Native,
        },
    };
    let Some((c, opts)) = rest.split_first() else {
        return Plan::Native;
    };
    let Ok(cursor) = parse_cursor(c) else {
        return Plan::Native;
    };
    if cursor != 0 && !is_issued(cursor) {
        return Plan::Native;
    }
    let allowed = Allowed {
        type_filter: n == Native::Scan,
        novalues: n == Native::Hscan && has.novalues,
        noscores: n == Native::Zscan && has.noscores,
    };
    let Ok(o) = parse_options(opts, allowed) else {
        return Plan::Native;
    };
    if o.type_name.is_some_and(|t| !type_known(t)) {
        return Plan::Native;
    }
    let floor = match n {
        Native::Scan => SCAN_MIN_COUNT,
        _ => COLLECTION_MIN_COUNT,
    };
    let count = o.count.unwrap_or(10).max(floor);
    let mut out: Vec<Vec<u8>> = vec![snapshot_command(n).to_vec()];
    out.extend(key.map(<[u8]>::to_vec));
    out.push(c.to_vec());
    if let Some(p) = o.pattern {
        out.extend([b"MATCH".to_vec(), p.to_vec()]);
    }
    out.extend([b"COUNT".to_vec(), count.to_string().into_bytes()]);
    if let Some(t) = o.type_name {
        out.extend([b"TYPE".to_vec(), t.to_vec()]);
    }
    if o.novalues {
        out.push(b"NOVALUES".to_vec());
    }
    if o.noscores {
        out.push(b"NOSCORES".to_vec());
    }
    Plan::Snapshot {
        args: out,
        cursor,
        key: key.map(<[u8]>::to_vec),
    }
}

/// Whether the call of `n` (`args` without the name) carries a cursor
/// snapscan issued (in `[2^52, 2^53)`, out of any native cursor's reach).
pub fn continues_issued(n: Native, args: &[&[u8]]) -> bool {
    super::mode::cursor_at(n)
        .and_then(|at| args.get(at - 1))
        .is_some_and(|c| parse_cursor(c).is_ok_and(is_issued))
}

/// The native call that restarts an iteration snapscan can no longer
/// continue: the same arguments with cursor 0.
pub fn restart(n: Native, args: &[&[u8]]) -> Vec<Vec<u8>> {
    let at = match n {
        Native::Scan => 0,
        Native::Keys => usize::MAX,
        _ => 1,
    };
    args.iter()
        .enumerate()
        .map(|(i, a)| if i == at { b"0".to_vec() } else { a.to_vec() })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    const OURS: &str = "4503599627370497"; // 2^52 + 1

    fn v(args: &[&str]) -> Vec<Vec<u8>> {
        args.iter().map(|a| a.as_bytes().to_vec()).collect()
    }

    const ALL: Options = Options {
        novalues: true,
        noscores: true,
    };

    fn run(n: Native, args: &[&str]) -> Plan {
        run_on(n, args, ALL)
    }

    fn run_on(n: Native, args: &[&str], has: Options) -> Plan {
        let a: Vec<&[u8]> = args.iter().map(|s| s.as_bytes()).collect();
        plan(n, &a, has, |t| t.eq_ignore_ascii_case(b"string"))
    }

    #[rstest]
    #[case::start(&["0"], &["SNAPSHOT.SCAN", "0", "COUNT", "100"])]
    #[case::count_10_is_raised(&["0", "COUNT", "10"], &["SNAPSHOT.SCAN", "0", "COUNT", "100"])]
    #[case::count_1000_kept(&["0", "count", "1000"], &["SNAPSHOT.SCAN", "0", "COUNT", "1000"])]
    #[case::match_type(&["0", "MATCH", "a*", "TYPE", "string"], &["SNAPSHOT.SCAN", "0", "MATCH", "a*", "COUNT", "100", "TYPE", "string"])]
    #[case::last_wins(&["0", "MATCH", "a*", "match", "b*"], &["SNAPSHOT.SCAN", "0", "MATCH", "b*", "COUNT", "100"])]
    #[case::ours(&[OURS, "COUNT", "10"], &["SNAPSHOT.SCAN", OURS, "COUNT", "100"])]
    fn scan_served(#[case] args: &[&str], #[case] want: &[&str]) {
        match run(Native::Scan, args) {
            Plan::Snapshot { args, .. } => assert_eq!(args, v(want)),
            p => panic!("{p:?}"),
        }
    }

    #[rstest]
    #[case::no_cursor(&[])]
    #[case::native_cursor(&["17"])]
    #[case::native_cursor_below_tag(&["4503599627370495"])]
    #[case::above_2_53(&["9007199254740992"])]
    #[case::old_range(&["4611686018427387905"])]
    #[case::above_2_63(&["9223372036854775808"])]
    #[case::bad_cursor(&["x"])]
    #[case::negative(&["-1"])]
    #[case::count_zero(&["0", "COUNT", "0"])]
    #[case::count_word(&["0", "COUNT", "ten"])]
    #[case::unknown_type(&["0", "TYPE", "nosuch"])]
    #[case::novalues(&["0", "NOVALUES"])]
    #[case::bogus_option(&["0", "BOGUS"])]
    fn scan_native(#[case] args: &[&str]) {
        assert_eq!(run(Native::Scan, args), Plan::Native);
    }

    #[rstest]
    #[case::hscan(Native::Hscan, &["h", "0", "NOVALUES"], &["SNAPSHOT.HSCAN", "h", "0", "COUNT", "512", "NOVALUES"])]
    #[case::sscan(Native::Sscan, &["s", "0", "MATCH", "x", "COUNT", "1000"], &["SNAPSHOT.SSCAN", "s", "0", "MATCH", "x", "COUNT", "1000"])]
    #[case::zscan(Native::Zscan, &["z", OURS, "noscores"], &["SNAPSHOT.ZSCAN", "z", OURS, "COUNT", "512", "NOSCORES"])]
    fn collections_served(#[case] n: Native, #[case] args: &[&str], #[case] want: &[&str]) {
        match run(n, args) {
            Plan::Snapshot { args, key, .. } => {
                assert_eq!(args, v(want));
                assert_eq!(key.as_deref(), Some(want[1].as_bytes()));
            }
            p => panic!("{p:?}"),
        }
    }

    #[rstest]
    #[case::no_cursor(Native::Hscan, &["h"])]
    #[case::native_cursor(Native::Sscan, &["s", "5"])]
    #[case::noscores_on_hscan(Native::Hscan, &["h", "0", "NOSCORES"])]
    #[case::type_on_zscan(Native::Zscan, &["z", "0", "TYPE", "string"])]
    #[case::keys_arity(Native::Keys, &[])]
    #[case::keys_arity2(Native::Keys, &["a", "b"])]
    fn collections_native(#[case] n: Native, #[case] args: &[&str]) {
        assert_eq!(run(n, args), Plan::Native);
    }

    /// Issue 26, item 7: an option the server's own command lacks (no
    /// Redis has `ZSCAN ... NOSCORES`, Redis 7.0 no `HSCAN ... NOVALUES`) is
    /// left to the native command's error, whatever the collection's size.
    #[rstest]
    #[case::noscores_on_redis(Native::Zscan, &["z", "0", "NOSCORES"], Options { novalues: true, noscores: false })]
    #[case::noscores_ours(Native::Zscan, &["z", OURS, "noscores"], Options { novalues: true, noscores: false })]
    #[case::novalues_on_redis_7_0(Native::Hscan, &["h", "0", "NOVALUES"], Options::default())]
    fn options_the_server_lacks_are_native(
        #[case] n: Native,
        #[case] args: &[&str],
        #[case] has: Options,
    ) {
        assert_eq!(run_on(n, args, has), Plan::Native);
        assert!(matches!(run_on(n, args, ALL), Plan::Snapshot { .. }));
    }

    #[test]
    fn options_round_trip_as_bits() {
        for b in 0..4 {
            assert_eq!(Options::from_bits(b).bits(), b);
        }
    }

    #[test]
    fn keys_is_served() {
        assert_eq!(
            run(Native::Keys, &["user:*"]),
            Plan::Snapshot {
                args: v(&["SNAPSHOT.KEYS", "user:*"]),
                cursor: 0,
                key: None
            }
        );
    }

    #[rstest]
    #[case(Native::Scan, &[OURS, "COUNT", "10"], &["0", "COUNT", "10"])]
    #[case(Native::Hscan, &["h", OURS, "MATCH", "0"], &["h", "0", "MATCH", "0"])]
    fn restarts_at_cursor_0(#[case] n: Native, #[case] args: &[&str], #[case] want: &[&str]) {
        let a: Vec<&[u8]> = args.iter().map(|s| s.as_bytes()).collect();
        assert_eq!(restart(n, &a), v(want));
    }

    /// Whether a call carries a cursor snapscan issued: `[2^52, 2^53)` in
    /// the cursor's position only.
    #[rstest]
    #[case(Native::Scan, &[OURS], true)]
    #[case(Native::Scan, &[OURS, "COUNT", "10"], true)]
    #[case(Native::Scan, &["4503599627370496"], true)] // 2^52
    #[case(Native::Scan, &["9007199254740991"], true)] // 2^53 - 1
    #[case(Native::Scan, &["9007199254740992"], false)] // 2^53
    #[case(Native::Scan, &["4503599627370495"], false)] // 2^52 - 1
    #[case(Native::Scan, &["0"], false)]
    #[case(Native::Scan, &["x"], false)]
    #[case(Native::Scan, &[], false)]
    #[case(Native::Scan, &["0", "MATCH", OURS], false)]
    #[case(Native::Hscan, &["h", OURS], true)]
    #[case(Native::Zscan, &[OURS, "0"], false)]
    #[case(Native::Sscan, &["s"], false)]
    #[case(Native::Keys, &[OURS], false)]
    fn tells_issued_cursors(#[case] n: Native, #[case] args: &[&str], #[case] want: bool) {
        let a: Vec<&[u8]> = args.iter().map(|s| s.as_bytes()).collect();
        assert_eq!(continues_issued(n, &a), want);
    }
}
