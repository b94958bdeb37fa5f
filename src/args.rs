//! Argument parsing shared by the SNAPSHOT.* commands, with SCAN's rules
//! and error wording.

/// An error reply, code included (`ERR ...`, `LOADING ...`, `WRONGTYPE ...`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CmdError {
    WrongArity,
    Msg(String),
}

impl CmdError {
    pub fn msg(s: impl Into<String>) -> Self {
        CmdError::Msg(s.into())
    }
}

pub const SYNTAX: &str = "ERR syntax error";
pub const NOT_INTEGER: &str = "ERR value is not an integer or out of range";
pub const INVALID_CURSOR: &str = "ERR invalid cursor";
pub const NOVALUES_HSCAN_ONLY: &str = "ERR NOVALUES option can only be used in HSCAN";
pub const NOSCORES_ZSCAN_ONLY: &str = "ERR NOSCORES option can only be used in ZSCAN";

/// A cursor: unsigned 64-bit decimal digits only (`0` starts an iteration).
pub fn parse_cursor(b: &[u8]) -> Result<u64, CmdError> {
    if b.is_empty() || b.len() > 20 || !b.iter().all(u8::is_ascii_digit) {
        return Err(CmdError::msg(INVALID_CURSOR));
    }
    b.iter()
        .try_fold(0u64, |acc, d| {
            acc.checked_mul(10)?.checked_add(u64::from(d - b'0'))
        })
        .ok_or_else(|| CmdError::msg(INVALID_CURSOR))
}

/// A signed integer with the server's strictness (no spaces, no `+`, no
/// leading zeros, no `-0`).
pub fn parse_i64(b: &[u8]) -> Option<i64> {
    let (neg, digits) = match b.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, b),
    };
    if digits.is_empty() || digits.len() > 19 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    if digits[0] == b'0' && (digits.len() > 1 || neg) {
        return None;
    }
    let mag = digits
        .iter()
        .try_fold(0i128, |acc, d| Some(acc * 10 + i128::from(d - b'0')))?;
    let v = if neg { -mag } else { mag };
    i64::try_from(v).ok()
}

/// Options of SCAN-like commands.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ScanOptions<'a> {
    pub pattern: Option<&'a [u8]>,
    pub count: Option<usize>,
    pub type_name: Option<&'a [u8]>,
    pub novalues: bool,
    pub noscores: bool,
}

/// Which options a command accepts.
#[derive(Debug, Clone, Copy)]
pub struct Allowed {
    pub type_filter: bool,
    pub novalues: bool,
    pub noscores: bool,
}

/// Parses `[MATCH p] [COUNT n] [TYPE t] [NOVALUES] [NOSCORES]` in any order, options
/// case-insensitive; a later repetition overrides an earlier one, as in SCAN.
/// Errors are the native ones, from the first bad option: `COUNT` below 1 is
/// a plain syntax error, `NOVALUES`/`NOSCORES` on a command without them
/// gets Valkey's wording (Redis 7.0 answers a syntax error).
pub fn parse_options<'a>(rest: &[&'a [u8]], allowed: Allowed) -> Result<ScanOptions<'a>, CmdError> {
    let mut o = ScanOptions::default();
    let mut it = rest.iter().copied();
    while let Some(opt) = it.next() {
        if opt.eq_ignore_ascii_case(b"MATCH") {
            o.pattern = Some(it.next().ok_or_else(|| CmdError::msg(SYNTAX))?);
        } else if opt.eq_ignore_ascii_case(b"COUNT") {
            let v = it.next().ok_or_else(|| CmdError::msg(SYNTAX))?;
            let n = parse_i64(v).ok_or_else(|| CmdError::msg(NOT_INTEGER))?;
            if n < 1 {
                return Err(CmdError::msg(SYNTAX));
            }
            o.count = Some(usize::try_from(n).unwrap_or(usize::MAX));
        } else if allowed.type_filter && opt.eq_ignore_ascii_case(b"TYPE") {
            o.type_name = Some(it.next().ok_or_else(|| CmdError::msg(SYNTAX))?);
        } else if opt.eq_ignore_ascii_case(b"NOVALUES") {
            if !allowed.novalues {
                return Err(CmdError::msg(NOVALUES_HSCAN_ONLY));
            }
            o.novalues = true;
        } else if opt.eq_ignore_ascii_case(b"NOSCORES") {
            if !allowed.noscores {
                return Err(CmdError::msg(NOSCORES_ZSCAN_ONLY));
            }
            o.noscores = true;
        } else {
            return Err(CmdError::msg(SYNTAX));
        }
    }
    Ok(o)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    const SCAN: Allowed = Allowed {
        type_filter: true,
        novalues: false,
        noscores: false,
    };

    #[rstest]
    #[case(b"0", Ok(0))]
    #[case(b"18446744073709551615", Ok(u64::MAX))]
    #[case(b"007", Ok(7))]
    #[case(b"18446744073709551616", Err(()))]
    #[case(b"-1", Err(()))]
    #[case(b"+1", Err(()))]
    #[case(b" 1", Err(()))]
    #[case(b"1.5", Err(()))]
    #[case(b"", Err(()))]
    #[case(b"abc", Err(()))]
    fn cursors(#[case] input: &[u8], #[case] want: Result<u64, ()>) {
        assert_eq!(parse_cursor(input).map_err(|_| ()), want);
    }

    #[rstest]
    #[case(b"10", Some(10))]
    #[case(b"-5", Some(-5))]
    #[case(b"0", Some(0))]
    #[case(b"-0", None)]
    #[case(b"01", None)]
    #[case(b"9223372036854775807", Some(i64::MAX))]
    #[case(b"9223372036854775808", None)]
    #[case(b"1e3", None)]
    fn integers(#[case] input: &[u8], #[case] want: Option<i64>) {
        assert_eq!(parse_i64(input), want);
    }

    #[rstest]
    #[case(&[b"MATCH" as &[u8]], SYNTAX)]
    #[case(&[b"count" as &[u8], b"0"], SYNTAX)]
    #[case(&[b"COUNT" as &[u8], b"-3"], SYNTAX)]
    #[case(&[b"COUNT" as &[u8], b"-9223372036854775808"], SYNTAX)]
    #[case(&[b"COUNT" as &[u8], b"0", b"BOGUS"], SYNTAX)]
    #[case(&[b"BOGUS" as &[u8], b"COUNT", b"x"], SYNTAX)]
    #[case(&[b"COUNT" as &[u8], b"x", b"NOVALUES"], NOT_INTEGER)]
    #[case(&[b"COUNT" as &[u8], b"x"], NOT_INTEGER)]
    #[case(&[b"COUNT" as &[u8]], SYNTAX)]
    #[case(&[b"BOGUS" as &[u8], b"1"], SYNTAX)]
    #[case(&[b"NOVALUES" as &[u8]], NOVALUES_HSCAN_ONLY)]
    #[case(&[b"noscores" as &[u8]], NOSCORES_ZSCAN_ONLY)]
    #[case(&[b"NOVALUES" as &[u8], b"COUNT", b"0"], NOVALUES_HSCAN_ONLY)]
    #[case(&[b"TYPE" as &[u8]], SYNTAX)]
    fn option_errors(#[case] rest: &[&[u8]], #[case] want: &str) {
        assert_eq!(parse_options(rest, SCAN), Err(CmdError::msg(want)));
    }

    #[test]
    fn options_any_order_case_insensitive_last_wins() {
        let rest: Vec<&[u8]> = vec![
            b"type", b"hash", b"Count", b"5", b"mAtCh", b"a*", b"COUNT", b"7",
        ];
        let o = parse_options(&rest, SCAN).expect("valid");
        assert_eq!(o.pattern, Some(&b"a*"[..]));
        assert_eq!(o.count, Some(7));
        assert_eq!(o.type_name, Some(&b"hash"[..]));
        let hs = Allowed {
            type_filter: false,
            novalues: true,
            noscores: false,
        };
        assert!(
            parse_options(&[b"novalues" as &[u8]], hs)
                .expect("ok")
                .novalues
        );
        assert!(parse_options(&[b"TYPE" as &[u8], b"hash"], hs).is_err());
        assert_eq!(
            parse_options(&[b"NOSCORES" as &[u8]], hs),
            Err(CmdError::msg(NOSCORES_ZSCAN_ONLY))
        );
        let zs = Allowed {
            type_filter: false,
            novalues: false,
            noscores: true,
        };
        assert!(
            parse_options(&[b"noScores" as &[u8]], zs)
                .expect("ok")
                .noscores
        );
        assert_eq!(
            parse_options(&[b"NOVALUES" as &[u8]], zs),
            Err(CmdError::msg(NOVALUES_HSCAN_ONLY))
        );
    }
}
