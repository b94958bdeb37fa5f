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

/// The names CONFIG GET/SET use, with their values: `none`, `all`, and
/// one per command. The server renders a value as `all` or `none` when it
/// equals one, else as the single flags it holds.
pub fn names() -> [(&'static str, i64); 7] {
    [
        ("none", 0),
        ("scan", Native::Scan.bit()),
        ("keys", Native::Keys.bit()),
        ("hscan", Native::Hscan.bit()),
        ("sscan", Native::Sscan.bit()),
        ("zscan", Native::Zscan.bit()),
        ("all", ALL),
    ]
}

/// Parses a value as the server's flags configs take it: names separated
/// by spaces, any case; `none` alone (or an empty value) is 0.
pub fn parse(v: &[u8]) -> Option<i64> {
    let mut bits = 0;
    for word in v.split(|&b| b == b' ').filter(|w| !w.is_empty()) {
        let (_, b) = names()
            .into_iter()
            .find(|(n, _)| word.eq_ignore_ascii_case(n.as_bytes()))?;
        bits |= b;
    }
    Some(bits)
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

/// The command to route: `name` when `mode` serves it.
pub fn route(mode: i64, name: &[u8]) -> Option<Native> {
    if mode == 0 {
        return None;
    }
    Native::from_name(name).filter(|n| mode & n.bit() != 0)
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
        assert_eq!(route(mode, name), want);
    }
}
