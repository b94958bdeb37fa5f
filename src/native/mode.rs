//! `snapshot.serve-native`: which native commands are served from
//! snapshots, as bit flags, and the routing decision of the command filter.
//! Pure: no server types.

/// One routed native command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Native {
    Scan,
    Keys,
    Hscan,
    Sscan,
    Zscan,
}

impl Native {
    pub const ALL: [Native; 5] = [
        Native::Scan,
        Native::Keys,
        Native::Hscan,
        Native::Sscan,
        Native::Zscan,
    ];

    /// Its flag in the config value.
    pub const fn bit(self) -> i64 {
        match self {
            Native::Scan => 1,
            Native::Keys => 2,
            Native::Hscan => 4,
            Native::Sscan => 8,
            Native::Zscan => 16,
        }
    }

    /// The native command's name (lower case), also the config flag's name.
    pub const fn name(self) -> &'static str {
        match self {
            Native::Scan => "scan",
            Native::Keys => "keys",
            Native::Hscan => "hscan",
            Native::Sscan => "sscan",
            Native::Zscan => "zscan",
        }
    }

    /// The native command's name for the server's API (upper case).
    pub const fn c_name(self) -> &'static std::ffi::CStr {
        match self {
            Native::Scan => c"SCAN",
            Native::Keys => c"KEYS",
            Native::Hscan => c"HSCAN",
            Native::Sscan => c"SSCAN",
            Native::Zscan => c"ZSCAN",
        }
    }

    /// The module command the filter rewrites it to.
    pub const fn internal(self) -> &'static str {
        match self {
            Native::Scan => "snapshot.native-scan",
            Native::Keys => "snapshot.native-keys",
            Native::Hscan => "snapshot.native-hscan",
            Native::Sscan => "snapshot.native-sscan",
            Native::Zscan => "snapshot.native-zscan",
        }
    }

    /// The fewest arguments (name included) the native command takes: a
    /// call with fewer is left to the native command's arity error.
    pub const fn min_args(self) -> usize {
        match self {
            Native::Scan | Native::Keys => 2,
            _ => 3,
        }
    }

    pub fn index(self) -> usize {
        self as usize
    }

    /// The routed command named `name` (any case), if any.
    pub fn from_name(name: &[u8]) -> Option<Native> {
        // Filters see every command: reject by length first.
        if !(4..=5).contains(&name.len()) {
            return None;
        }
        Native::ALL
            .into_iter()
            .find(|n| name.eq_ignore_ascii_case(n.name().as_bytes()))
    }
}

/// Every flag set (`all`).
pub const ALL: i64 = 31;

/// Parses a `snapshot.serve-native` value (see `config::parse_flags`).
pub fn parse(v: &[u8]) -> Option<i64> {
    crate::config::parse_flags(crate::config::SERVE_NATIVE_NAMES, v)
}

/// The value as CONFIG GET shows it.
pub fn render(bits: i64) -> String {
    match bits {
        0 => "none".into(),
        ALL => "all".into(),
        _ => Native::ALL
            .into_iter()
            .filter(|n| bits & n.bit() != 0)
            .map(Native::name)
            .collect::<Vec<_>>()
            .join(" "),
    }
}

/// Where the cursor is in a call of `n` (name at 0).
pub const fn cursor_at(n: Native) -> Option<usize> {
    match n {
        Native::Scan => Some(1),
        Native::Keys => None,
        _ => Some(2),
    }
}

/// The command to route: `name` when `mode` serves it; else, once the
/// mode was ever on (`ever`), a continuation of an iteration snapscan
/// serves (`arg(i)`: the call's argument `i`; the cursor one snapscan
/// issued), so that switching the mode off breaks no iteration in flight.
pub fn route<'a>(
    mode: i64,
    ever: bool,
    name: &[u8],
    arg: impl FnOnce(usize) -> &'a [u8],
) -> Option<Native> {
    if !ever && mode == 0 {
        return None;
    }
    let n = Native::from_name(name)?;
    if mode & n.bit() != 0 {
        return Some(n);
    }
    let at = cursor_at(n)?;
    crate::args::parse_cursor(arg(at))
        .is_ok_and(crate::cursor::is_issued)
        .then_some(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[rstest]
    #[case(b"none", Some(0))]
    #[case(b"", Some(0))]
    #[case(b"all", Some(ALL))]
    #[case(b"ALL", Some(ALL))]
    #[case(b"scan", Some(1))]
    #[case(b"scan keys", Some(3))]
    #[case(b"Hscan  SSCAN zscan", Some(28))]
    #[case(b"scan none", Some(1))]
    #[case(b"scan scan", Some(1))]
    #[case(b"scan keys hscan sscan zscan", Some(ALL))]
    #[case(b"bogus", None)]
    #[case(b"scan,keys", None)]
    #[case(b"clusterscan", None)]
    fn parses(#[case] v: &[u8], #[case] want: Option<i64>) {
        assert_eq!(parse(v), want);
    }

    #[test]
    fn the_config_names_are_the_flags() {
        for n in Native::ALL {
            assert_eq!(parse(n.name().as_bytes()), Some(n.bit()));
        }
        assert_eq!(parse(b"all"), Some(ALL));
        assert_eq!(
            Native::ALL.iter().map(|n| n.bit()).sum::<i64>(),
            ALL,
            "all is every flag"
        );
    }

    #[rstest]
    #[case(0, "none")]
    #[case(ALL, "all")]
    #[case(1, "scan")]
    #[case(3, "scan keys")]
    #[case(20, "hscan zscan")]
    fn renders(#[case] bits: i64, #[case] want: &str) {
        assert_eq!(render(bits), want);
        assert_eq!(parse(want.as_bytes()), Some(bits));
    }

    #[rstest]
    #[case(ALL, b"SCAN", Some(Native::Scan))]
    #[case(ALL, b"keys", Some(Native::Keys))]
    #[case(ALL, b"hScan", Some(Native::Hscan))]
    #[case(ALL, b"sscan", Some(Native::Sscan))]
    #[case(ALL, b"ZSCAN", Some(Native::Zscan))]
    #[case(0, b"scan", None)]
    #[case(2, b"scan", None)]
    #[case(1, b"keys", None)]
    #[case(ALL, b"clusterscan", None)]
    #[case(ALL, b"snapshot.scan", None)]
    #[case(ALL, b"get", None)]
    #[case(ALL, b"scans", None)]
    #[case(ALL, b"", None)]
    fn routes(#[case] mode: i64, #[case] name: &[u8], #[case] want: Option<Native>) {
        assert_eq!(route(mode, false, name, |_| b"0"), want);
    }

    const OURS: &[u8] = b"4503599627370497"; // 2^52 + 1

    #[rstest]
    #[case::issued_scan_after_off(0, true, b"scan", &[b"scan" as &[u8], OURS], Some(Native::Scan))]
    #[case::issued_hscan_after_off(0, true, b"HSCAN", &[b"hscan" as &[u8], b"h", OURS], Some(Native::Hscan))]
    #[case::never_on(0, false, b"scan", &[b"scan" as &[u8], OURS], None)]
    #[case::native_cursor(0, true, b"scan", &[b"scan" as &[u8], b"17"], None)]
    #[case::cursor_0(0, true, b"scan", &[b"scan" as &[u8], b"0"], None)]
    #[case::other_command_on(2, true, b"sscan", &[b"sscan" as &[u8], b"s", OURS], Some(Native::Sscan))]
    #[case::keys_has_no_cursor(0, true, b"keys", &[b"keys" as &[u8], OURS], None)]
    #[case::missing_cursor(0, true, b"zscan", &[b"zscan" as &[u8], b"z"], None)]
    fn continuations_route_whatever_the_mode(
        #[case] mode: i64,
        #[case] ever: bool,
        #[case] name: &[u8],
        #[case] args: &[&[u8]],
        #[case] want: Option<Native>,
    ) {
        assert_eq!(
            route(mode, ever, name, |i| args.get(i).copied().unwrap_or(b"")),
            want
        );
    }
}
