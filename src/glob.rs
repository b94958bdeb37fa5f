//! Glob matching with exactly the semantics of `KEYS`, `SCAN MATCH` and `HSCAN MATCH` in
//! Valkey/Redis: [`stringmatchlen`] is `stringmatchlen(pattern, string, nocase = 0)` from
//! `src/util.c`; [`matches()`] adds the commands' shortcut for the exact pattern `*`.
//!
//! Server behaviour reproduced on purpose, quirks included:
//! * `*` matches any run of bytes, runs of `*` collapse; but for `stringmatchlen` an EMPTY
//!   string only matches the empty pattern (`"*"`, `"**"` reject `""`). SCAN/KEYS never call it
//!   for the exact pattern `*` (see [`matches_all`]), so `MATCH *` does return an empty key
//!   while `MATCH **` does not.
//! * `?` is any one byte; `\x` is a literal `x`; a trailing lone `\` is a literal `\`.
//! * `[...]` sets: a leading `^` negates; `\x` is a literal inside too; `a-z` ranges, reversed
//!   ranges are swapped; `]` right after `[` (or `[^`) closes an empty set; a range end may be
//!   `]` or `\` (`[a-]` is the range `]`..`a`, and the set goes on); an unterminated set ends at
//!   the end of the pattern (`[^` matches any byte, `[` matches nothing).
//! * Range bounds compare as C `char`, whose sign is the target's: signed on x86-64, where
//!   bytes >= 0x80 are negative, so `[a-\xff]` is -1..=97 (0xff, 0x00..=0x61) and
//!   `[\x7f-\x80]` matches every byte; unsigned on aarch64 Linux (Graviton, Ampere), where
//!   `[a-\xff]` is 97..=255 and `[\x7f-\x80]` is 0x7f..=0x80. The module matches as the server
//!   it is loaded in was built: for the target it was built for ([`CHAR_SIGNED`]).
//! * The C code reads the NUL terminator one past the pattern end; out-of-range pattern bytes
//!   read as 0 here (never observable: 0 is only compared against `*`, `^`, `-`, `]`).
//! * Nesting limit: each `*` recursion adds one level and a level above 1000 fails, so the
//!   1001st non-trailing `*` group can never be passed. The `skipLongerMatches` early exit
//!   keeps the cost polynomial. Recursion depth is thus at most 1001 small frames.

/// `if (nesting > 1000) return 0;` in the server.
const MAX_NESTING: u32 = 1000;

/// Pattern byte at `i`, or 0 past the end (the C string's NUL terminator).
#[inline]
fn byte_at(p: &[u8], i: usize) -> u8 {
    p.get(i).copied().unwrap_or(0)
}

/// Whether C `char` is signed on the target (x86-64: yes; aarch64 Linux: no), as for the
/// server built for it.
pub const CHAR_SIGNED: bool = std::os::raw::c_char::MIN != 0;

/// A byte as a C `char` promoted to `int`, signed or not.
#[inline]
fn c_char(b: u8, signed: bool) -> i32 {
    if signed {
        i32::from(b as i8)
    } else {
        i32::from(b)
    }
}

/// The state of one match: the server's `skipLongerMatches`, and the sign of `char`.
struct Walk {
    skip_longer: bool,
    signed: bool,
}

/// True when `string` is accepted by `MATCH pattern` of SCAN/HSCAN/SSCAN/ZSCAN and by
/// `KEYS pattern`: [`matches_all`] (exactly `*`, which also accepts `""`) or else
/// [`stringmatchlen`]. Arbitrary bytes.
pub fn matches(pattern: &[u8], string: &[u8]) -> bool {
    matches_all(pattern) || stringmatchlen(pattern, string)
}

/// Exactly the server's `stringmatchlen(pattern, string, nocase=0)`, without the
/// commands' `*` shortcut: `stringmatchlen(b"*", b"")` is false.
pub fn stringmatchlen(pattern: &[u8], string: &[u8]) -> bool {
    stringmatchlen_char(pattern, string, CHAR_SIGNED)
}

/// [`stringmatchlen`] as built for a target whose C `char` is `signed` or not.
pub fn stringmatchlen_char(pattern: &[u8], string: &[u8], signed: bool) -> bool {
    let mut w = Walk {
        skip_longer: false,
        signed,
    };
    match_from(pattern, 0, string, 0, &mut w, 0)
}

/// `stringmatchlen_impl` on `p[pi..]` / `s[si..]`. Invariant: `pi <= p.len()`, `si <= s.len()`.
fn match_from(
    p: &[u8],
    mut pi: usize,
    s: &[u8],
    mut si: usize,
    w: &mut Walk,
    nesting: u32,
) -> bool {
    if nesting > MAX_NESTING {
        return false;
    }
    while pi < p.len() && si < s.len() {
        match p[pi] {
            b'*' => {
                while byte_at(p, pi + 1) == b'*' {
                    pi += 1;
                }
                if pi + 1 == p.len() {
                    return true; // trailing `*` eats the rest
                }
                while si < s.len() {
                    if match_from(p, pi + 1, s, si, w, nesting + 1) {
                        return true;
                    }
                    if w.skip_longer {
                        return false;
                    }
                    si += 1;
                }
                // The rest failed at every later offset: longer matches of earlier `*`s
                // cannot help either (the server's `skipLongerMatches`).
                w.skip_longer = true;
                return false;
            }
            b'?' => {}
            b'[' => match match_set(p, pi + 1, s[si], w.signed) {
                (end, true) => pi = end,
                (_, false) => return false,
            },
            b'\\' => {
                if p.len() - pi >= 2 {
                    pi += 1;
                }
                if p[pi] != s[si] {
                    return false;
                }
            }
            c => {
                if c != s[si] {
                    return false;
                }
            }
        }
        si += 1;
        pi += 1;
        if si == s.len() {
            while byte_at(p, pi) == b'*' {
                pi += 1;
            }
            break;
        }
    }
    pi == p.len() && si == s.len()
}

/// Evaluates the set whose body starts at `pi` (just after its `[`, so `pi >= 1`) against `c`.
/// Returns the index of the set's last byte (its `]`, or the pattern's last byte when the set
/// is unterminated) and whether `c` is accepted.
fn match_set(p: &[u8], mut pi: usize, c: u8, signed: bool) -> (usize, bool) {
    let negate = byte_at(p, pi) == b'^';
    if negate {
        pi += 1;
    }
    let mut hit = false;
    loop {
        let rem = p.len() - pi;
        if rem >= 2 && p[pi] == b'\\' {
            pi += 1;
            hit |= p[pi] == c;
        } else if rem == 0 {
            pi -= 1; // unterminated: step back onto the last byte, like the C code
            break;
        } else if p[pi] == b']' {
            break;
        } else if rem >= 3 && p[pi + 1] == b'-' {
            let (a, b) = (c_char(p[pi], signed), c_char(p[pi + 2], signed));
            let (lo, hi) = if a > b { (b, a) } else { (a, b) };
            hit |= (lo..=hi).contains(&c_char(c, signed));
            pi += 2;
        } else {
            hit |= p[pi] == c;
        }
        pi += 1;
    }
    (pi, hit != negate)
}

/// The literal prefix every matching string must start with (used to seek an ordered index).
/// E.g. `user:42:*` -> `user:42:`, `a\*b*` -> `a*b`, `*x` -> empty, `abc` -> `abc`.
/// Sound: `matches(p, s)` implies `s.starts_with(&literal_prefix(p))`.
pub fn literal_prefix(pattern: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut i = 0;
    while let Some(&b) = pattern.get(i) {
        match b {
            b'*' | b'?' | b'[' => break,
            b'\\' if i + 1 < pattern.len() => {
                out.push(pattern[i + 1]);
                i += 2;
            }
            _ => {
                out.push(b);
                i += 1;
            }
        }
    }
    out
}

/// True when the server skips matching altogether: SCAN/HSCAN/SSCAN/ZSCAN (`use_pattern`) and
/// KEYS (`allkeys`) special-case exactly the one-byte pattern `*`, which then also yields an
/// empty key/field. Deliberately false for `**` & co.: those go through [`stringmatchlen`],
/// which rejects the empty string, so they are not match-all on the server.
pub fn matches_all(pattern: &[u8]) -> bool {
    pattern == b"*"
}

/// A compiled pattern: precomputed literal prefix and match-all flag.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pattern {
    raw: Vec<u8>,
    prefix: Vec<u8>,
    all: bool,
}

impl Pattern {
    pub fn new(pattern: &[u8]) -> Self {
        Pattern {
            raw: pattern.to_vec(),
            prefix: literal_prefix(pattern),
            all: matches_all(pattern),
        }
    }

    /// The pattern bytes as given.
    pub fn as_bytes(&self) -> &[u8] {
        &self.raw
    }

    /// See [`literal_prefix`].
    pub fn prefix(&self) -> &[u8] {
        &self.prefix
    }

    /// Same as [`matches()`], with the match-all check precomputed.
    pub fn is_match(&self, s: &[u8]) -> bool {
        self.all || stringmatchlen(&self.raw, s)
    }

    /// See [`matches_all`].
    pub fn matches_all(&self) -> bool {
        self.all
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rstest::rstest;

    #[rstest]
    // empty inputs and stars
    #[case(b"", b"", true)]
    #[case(b"", b"a", false)]
    #[case(b"*", b"", true)] // SCAN/KEYS shortcut (`stringmatchlen` itself says no)
    #[case(b"**", b"", false)] // server quirk: stringmatchlen rejects "" for any non-empty pattern
    #[case(b"*", b"anything", true)]
    #[case(b"**", b"x", true)]
    #[case(b"a*", b"a", true)]
    #[case(b"a*", b"abc", true)]
    #[case(b"a*", b"ba", false)]
    #[case(b"*a", b"a", true)]
    #[case(b"*a", b"bca", true)]
    #[case(b"*a", b"ab", false)]
    #[case(b"a*b", b"ab", true)]
    #[case(b"a**b", b"axxb", true)]
    #[case(b"a*b", b"axxbc", false)]
    #[case(b"*a*", b"a", true)]
    #[case(b"a*b*c", b"abbbc", true)]
    #[case(b"a*b*c", b"acb", false)]
    #[case(b"user:*", b"user:42", true)]
    #[case(b"user:*", b"user", false)]
    // `?`
    #[case(b"?", b"", false)]
    #[case(b"?", b"a", true)]
    #[case(b"?", b"ab", false)]
    #[case(b"a?c", b"abc", true)]
    #[case(b"a?c", b"ac", false)]
    #[case(b"*?", b"a", true)]
    #[case(b"?*?", b"a", false)]
    // sets, negation, ranges
    #[case(b"h[ae]llo", b"hello", true)]
    #[case(b"h[ae]llo", b"hillo", false)]
    #[case(b"h[^e]llo", b"hallo", true)]
    #[case(b"h[^e]llo", b"hello", false)]
    #[case(b"h[a-b]llo", b"hbllo", true)]
    #[case(b"h[a-b]llo", b"hcllo", false)]
    #[case(b"[z-a]", b"m", true)] // reversed range is swapped
    #[case(b"[^a-z]", b"m", false)]
    #[case(b"[^a-z]", b"M", true)]
    #[case(b"[-a]", b"-", true)]
    #[case(b"[a-]", b"]", true)] // range `]`..`a`, `]` consumed as its end, set unterminated
    #[case(b"[a-]", b"_", true)]
    #[case(b"[a-]", b"-", false)]
    #[case(b"[a-]", b"b", false)]
    #[case(b"[a-]x]", b"x", true)]
    #[case(b"[a-]x]", b"x]", false)]
    #[case(b"[a-\\]", b"_", true)] // `\` is not an escape as a range end
    #[case(b"[a-\\]", b"b", false)]
    #[case(b"[]", b"]", false)] // `]` first closes an empty set
    #[case(b"[]]", b"]", false)]
    #[case(b"[^]", b"x", true)]
    #[case(b"[^]]", b"x]", true)]
    #[case(b"[\\]]", b"]", true)]
    #[case(b"[\\\\]", b"\\", true)]
    #[case(b"[\\-]", b"-", true)]
    #[case(b"[\\-]", b"\\", false)]
    #[case(b"[a\\-z]", b"-", true)]
    #[case(b"[a\\-z]", b"b", false)]
    #[case(b"[\\a-c]", b"b", false)] // escaped `a`, then `-` and `c` as plain members
    #[case(b"[\\a-c]", b"-", true)]
    #[case(b"[[]", b"[", true)]
    #[case(b"[*?]", b"?", true)]
    #[case(b"[*?]", b"a", false)]
    // unterminated sets and trailing backslashes
    #[case(b"[", b"[", false)]
    #[case(b"[", b"a", false)]
    #[case(b"[^", b"a", true)]
    #[case(b"[^", b"ab", false)]
    #[case(b"[abc", b"b", true)]
    #[case(b"[abc", b"d", false)]
    #[case(b"x[a-", b"x-", true)] // 2 bytes left: not a range, `a` and `-` are members
    #[case(b"[\\", b"\\", true)]
    #[case(b"[a\\", b"\\", true)]
    #[case(b"\\", b"\\", true)]
    #[case(b"\\", b"", false)]
    #[case(b"a\\", b"a\\", true)]
    #[case(b"a\\", b"a", false)]
    // escapes outside sets
    #[case(b"\\*", b"*", true)]
    #[case(b"\\*", b"a", false)]
    #[case(b"\\?", b"?", true)]
    #[case(b"\\?", b"x", false)]
    #[case(b"\\[a]", b"[a]", true)]
    #[case(b"\\[a]", b"a", false)]
    #[case(b"\\\\", b"\\", true)]
    #[case(b"a\\*b*", b"a*bcd", true)]
    #[case(b"a\\*b*", b"axbcd", false)]
    #[case(b"*\\*", b"ab*", true)]
    // binary bytes
    #[case(b"\x00", b"\x00", true)]
    #[case(b"\x00", b"", false)]
    #[case(b"a\x00b", b"a\x00b", true)]
    #[case(b"?", b"\x00", true)]
    #[case(b"*\x00", b"abc\x00", true)]
    #[case(b"[\x00]", b"\x00", true)]
    #[case(b"\xff*", b"\xff\xfe", true)]
    #[case(b"[\xff]", b"\xff", true)]
    #[case(b"[^\xff]", b"\xfe", true)]
    fn matches_like_server(#[case] pattern: &[u8], #[case] string: &[u8], #[case] want: bool) {
        assert_eq!(matches(pattern, string), want);
        assert_eq!(reference(pattern, string), want, "oracle disagrees");
    }

    /// Range bounds as C `char`: signed (x86-64) and unsigned (aarch64 Linux) targets.
    #[rstest]
    #[case(b"[\x80-\xff]", b"\x80", true, true)]
    #[case(b"[\x80-\xff]", b"\xff", true, true)]
    #[case(b"[\x80-\xff]", b"a", false, false)]
    #[case(b"[a-\xff]", b"\xff", true, true)] // signed -1..=97, unsigned 97..=255
    #[case(b"[a-\xff]", b"\x00", true, false)]
    #[case(b"[a-\xff]", b"A", true, false)]
    #[case(b"[a-\xff]", b"\x80", false, true)]
    #[case(b"[a-\xff]", b"b", false, true)]
    #[case(b"[a-\xff]", b"a", true, true)]
    #[case(b"[\x00-\x7f]", b"\x80", false, false)]
    #[case(b"[\x01-\xff]", b"\x00", true, false)] // signed -1..=1, unsigned 1..=255
    #[case(b"[\x01-\xff]", b"\x02", false, true)]
    #[case(b"[\x7f-\x80]", b"z", true, false)] // signed -128..=127: everything
    #[case(b"[\x7f-\x80]", b"\xc3", true, false)]
    #[case(b"[\x7f-\x80]", b"\x80", true, true)]
    #[case(b"[^\x7f-\x80]", b"\x00", false, true)]
    #[case(b"[\xff-a]", b"\x90", false, true)] // reversed: swapped either way
    fn ranges_compare_as_the_targets_char(
        #[case] pattern: &[u8],
        #[case] string: &[u8],
        #[case] signed: bool,
        #[case] unsigned: bool,
    ) {
        assert_eq!(
            stringmatchlen_char(pattern, string, true),
            signed,
            "signed char"
        );
        assert_eq!(
            stringmatchlen_char(pattern, string, false),
            unsigned,
            "unsigned char"
        );
        assert_eq!(
            reference_char(pattern, string, true),
            signed,
            "oracle, signed"
        );
        assert_eq!(
            reference_char(pattern, string, false),
            unsigned,
            "oracle, unsigned"
        );
        let native = if CHAR_SIGNED { signed } else { unsigned };
        assert_eq!(matches(pattern, string), native, "this target");
    }

    #[rstest]
    #[case(b"user:42:*", b"user:42:")]
    #[case(b"a\\*b*", b"a*b")]
    #[case(b"*x", b"")]
    #[case(b"abc", b"abc")]
    #[case(b"", b"")]
    #[case(b"a?b", b"a")]
    #[case(b"ab[c]", b"ab")]
    #[case(b"ab\\", b"ab\\")]
    #[case(b"\\\\x*", b"\\x")]
    #[case(b"a\x00b*", b"a\x00b")]
    #[case(b"\xff\xfe?", b"\xff\xfe")]
    #[case(b"]^-x", b"]^-x")]
    fn literal_prefix_cases(#[case] pattern: &[u8], #[case] want: &[u8]) {
        assert_eq!(literal_prefix(pattern), want);
        assert_eq!(Pattern::new(pattern).prefix(), want);
    }

    #[rstest]
    #[case(b"*", true)]
    #[case(b"**", false)] // `stringmatchlen("**", "")` is 0 and SCAN only special-cases `*`
    #[case(b"", false)]
    #[case(b"a", false)]
    #[case(b"*a", false)]
    #[case(b"\\*", false)]
    fn matches_all_cases(#[case] pattern: &[u8], #[case] want: bool) {
        assert_eq!(matches_all(pattern), want);
        assert_eq!(Pattern::new(pattern).matches_all(), want);
    }

    #[test]
    fn compiled_pattern() {
        let star = Pattern::new(b"*");
        assert!(star.is_match(b"") && matches(b"*", b"")); // SCAN/KEYS shortcut
        assert!(!stringmatchlen(b"*", b"") && !stringmatchlen(b"**", b"")); // the raw function
        assert!(stringmatchlen(b"", b"") && stringmatchlen(b"*", b"x"));
        assert!(!Pattern::new(b"**").is_match(b""));
        let p = Pattern::new(b"user:[0-9]*");
        assert_eq!(p.as_bytes(), b"user:[0-9]*");
        assert_eq!(p.prefix(), b"user:");
        assert!(p.is_match(b"user:7x") && !p.is_match(b"user:x7"));
        assert_eq!(p.clone(), p);
    }

    fn star_groups(n: usize, tail: &[u8]) -> Vec<u8> {
        let mut p = b"*a".repeat(n);
        p.extend_from_slice(tail);
        p
    }

    #[test]
    fn nesting_limit() {
        let s = b"a".repeat(1001);
        assert!(matches(&star_groups(1000, b""), &s[..1000]));
        assert!(!matches(&star_groups(1001, b""), &s)); // 1001st group needs level 1001
        assert!(reference(&star_groups(1001, b""), &s)); // ...although plain glob would match
        assert!(matches(&star_groups(1000, b"*"), &s)); // trailing `*` needs no recursion
        let mut many = b"*".repeat(100_000);
        many.push(b'a');
        assert!(matches(&many, b"xxa")); // adjacent stars collapse, no depth
    }

    #[test]
    // 1001 frames measured at < 320 KiB in debug builds and < 128 KiB in release.
    fn deep_recursion_fits_a_quarter_of_a_worker_stack() {
        let run = || {
            let mut s = b"a".repeat(5000);
            let p = star_groups(1000, b"b");
            let miss = matches(&p, &s);
            s.push(b'b');
            (miss, matches(&p, &s))
        };
        let handle = std::thread::Builder::new()
            .stack_size(512 * 1024)
            .spawn(run);
        let got = handle.expect("spawn").join().expect("no stack overflow");
        assert_eq!(got, (false, true));
    }

    #[test]
    fn pathological_patterns_finish() {
        let mut s = b"a".repeat(10_000);
        let p = b"*a*a*a*a*a*a*a*a*a*a*b";
        assert!(!matches(p, &s));
        assert!(!matches(b"*?*?*?*?*?*?*?*?*?*?*?*?*?*?*?*?*?*?*?*?b", &s));
        assert!(!matches(&b"*[a-z]".repeat(50), &s[..40]));
        s.push(b'b');
        assert!(matches(p, &s));
    }

    // ---- oracle: tokenise, then naive exponential glob over tokens ----

    enum Tok {
        Star,
        Any,
        Lit(u8),
        Set(bool, Vec<(i32, i32)>),
    }

    fn tokenize(p: &[u8], signed: bool) -> Vec<Tok> {
        let (mut out, mut i, n) = (Vec::new(), 0, p.len());
        while i < n {
            let (tok, next) = match p[i] {
                b'*' => (Tok::Star, i + 1),
                b'?' => (Tok::Any, i + 1),
                b'\\' if i + 1 < n => (Tok::Lit(p[i + 1]), i + 2),
                b'[' => {
                    let mut j = i + 1;
                    let neg = j < n && p[j] == b'^';
                    j += usize::from(neg);
                    let mut items = Vec::new();
                    while j < n && p[j] != b']' {
                        let (a, b, len) = if p[j] == b'\\' && j + 1 < n {
                            (p[j + 1], p[j + 1], 2)
                        } else if j + 2 < n && p[j + 1] == b'-' {
                            (p[j], p[j + 2], 3)
                        } else {
                            (p[j], p[j], 1)
                        };
                        let (a, b) = (c_char(a, signed), c_char(b, signed));
                        items.push((a.min(b), a.max(b)));
                        j += len;
                    }
                    (Tok::Set(neg, items), j + 1)
                }
                c => (Tok::Lit(c), i + 1),
            };
            out.push(tok);
            i = next;
        }
        out
    }

    fn accepts(t: &Tok, b: u8, signed: bool) -> bool {
        match t {
            Tok::Star | Tok::Any => true,
            Tok::Lit(l) => *l == b,
            Tok::Set(neg, items) => {
                items
                    .iter()
                    .any(|&(lo, hi)| (lo..=hi).contains(&c_char(b, signed)))
                    != *neg
            }
        }
    }

    fn glob(toks: &[Tok], s: &[u8], signed: bool) -> bool {
        match toks.split_first() {
            None => s.is_empty(),
            Some((Tok::Star, rest)) => (0..=s.len()).any(|k| glob(rest, &s[k..], signed)),
            Some((t, rest)) => {
                s.first().is_some_and(|&b| accepts(t, b, signed)) && glob(rest, &s[1..], signed)
            }
        }
    }

    /// Textbook glob plus the server's `*` shortcut and empty-string rule (no nesting limit:
    /// short inputs only).
    fn reference(p: &[u8], s: &[u8]) -> bool {
        reference_char(p, s, CHAR_SIGNED)
    }

    /// [`reference`] for a target whose C `char` is `signed` or not.
    fn reference_char(p: &[u8], s: &[u8], signed: bool) -> bool {
        if p == b"*" {
            return true;
        }
        if s.is_empty() {
            return p.is_empty();
        }
        glob(&tokenize(p, signed), s, signed)
    }

    fn bytes_from(alphabet: &'static [u8], max: usize) -> impl Strategy<Value = Vec<u8>> {
        proptest::collection::vec(proptest::sample::select(alphabet), 0..=max)
    }

    const PAT: &[u8] = b"ab*?[]^-\\\x80\xff\x00";
    const STR: &[u8] = b"ab-]\\\x80\xff\x00";

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4000))]

        #[test]
        fn prefix_is_sound(p in bytes_from(PAT, 10), s in bytes_from(STR, 8)) {
            let prefix = literal_prefix(&p);
            if matches(&p, &s) {
                prop_assert!(s.starts_with(&prefix));
            }
            // also probe strings built on the prefix (match far more often), and the same
            // shifted by one byte (near misses)
            let mut t = prefix.clone();
            t.extend_from_slice(&s);
            for cand in [&t[..], t.get(1..).unwrap_or_default()] {
                prop_assert!(!matches(&p, cand) || cand.starts_with(&prefix));
            }
        }

        #[test]
        fn agrees_with_oracle(p in bytes_from(PAT, 9), s in bytes_from(STR, 7)) {
            prop_assert_eq!(matches(&p, &s), reference(&p, &s));
            // The other target's `char` too.
            prop_assert_eq!(
                matches_all(&p) || stringmatchlen_char(&p, &s, !CHAR_SIGNED),
                reference_char(&p, &s, !CHAR_SIGNED)
            );
            let mut t = literal_prefix(&p);
            t.extend_from_slice(&s);
            prop_assert_eq!(matches(&p, &t), reference(&p, &t));
        }

        #[test]
        fn escaped_literal_matches_itself(s in bytes_from(PAT, 12)) {
            let p: Vec<u8> = s.iter().flat_map(|&b| [b'\\', b]).collect();
            prop_assert!(matches(&p, &s));
            prop_assert_eq!(literal_prefix(&p), s);
        }
    }
}
