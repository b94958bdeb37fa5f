//! MATCH is exactly the server's glob.

use super::*;

const GLOB_ALPHABET: &[u8] = b"abc*?[]^-\\\x00\xff:";

/// Patterns aimed at the glob's corners: escapes, sets, ranges (also reversed
/// and signed-char ones), negation, unterminated sets, trailing backslashes.
const GLOB_PATTERNS: &[&[u8]] = &[
    b"*",
    b"**",
    b"",
    b"?",
    b"??*",
    b"a*",
    b"*a",
    b"a*b*",
    b"*\\*",
    b"\\*",
    b"\\?*",
    b"\\[*",
    b"\\\\*",
    b"a\\",
    b"*\\",
    b"\\",
    b"[ab]*",
    b"[^ab]*",
    b"[a-c]?",
    b"[c-a]*",
    b"[\\]]*",
    b"[]]*",
    b"[]*",
    b"[^]*",
    b"[",
    b"[a",
    b"[^",
    b"a[",
    b"[a-",
    b"*[a-]",
    b"[a-\\]*",
    b"[\\-]*",
    b"[-a]*",
    b"[a\\-c]*",
    b"[\x00-a]*",
    b"[a-\xff]*",
    b"*[\x80-\xff]",
    b"[\x7f-\x80]*",
    b"\x00*",
    b"*\x00",
    b"\xff*",
    b"*\xff",
    b"[\xff]*",
    b"[^\xff]*",
    b"*:*",
    b"::*",
    b"[:]*",
    b"*[*]*",
    b"*[?]",
    b"^*",
    b"[\\^]*",
    b"]*",
    b"-*",
];

#[test]
fn match_equals_native_scan_match() {
    let server = Server::start();
    let mut con = server.client();
    let mut rng = Rng(0x5eed);
    let mut pipe = redis::pipe();
    let mut keys = KeySet::new();
    while keys.len() < 300 {
        let k = random_bytes(&mut rng, GLOB_ALPHABET, 7);
        if keys.insert(k.clone()) {
            pipe.cmd("SET").arg(k).arg(1).ignore();
        }
    }
    let () = pipe.query(&mut con).unwrap();
    assert!(
        keys.contains(&Vec::new()),
        "the empty key is part of the set"
    );
    assert_eq!(native(&mut con, &[]), keys);

    let mut patterns: Vec<Bytes> = GLOB_PATTERNS.iter().map(|p| p.to_vec()).collect();
    while patterns.len() < GLOB_PATTERNS.len() + 200 {
        // Half the patterns start with a key's first bytes (a literal prefix
        // that matches something), the other half are free-form.
        let mut p = if rng.chance(1, 2) {
            let k: Vec<&Bytes> = keys.iter().collect();
            let k = rng.pick(&k);
            k[..rng.below(k.len() as u64 + 1) as usize].to_vec()
        } else {
            Vec::new()
        };
        p.extend(random_bytes(&mut rng, GLOB_ALPHABET, 6));
        patterns.push(p);
    }
    let mut nonempty = 0;
    for (i, p) in patterns.iter().enumerate() {
        let want = native(&mut con, &[b"MATCH", p]);
        nonempty += usize::from(!want.is_empty());
        let count = [7usize, 50, 1000][i % 3].to_string();
        let got = snap_keys(&mut con, &[b"MATCH", p, b"COUNT", count.as_bytes()]);
        assert_same(&got, &want, &format!("MATCH {} COUNT {count}", show(p)));
    }
    assert!(
        nonempty > patterns.len() / 4,
        "too few patterns match anything: {nonempty}"
    );
}

#[test]
fn pathological_pattern_finishes_with_the_right_result() {
    let server = Server::start();
    let mut con = server.client();
    let mut pipe = redis::pipe();
    for n in 0..40 {
        let mut k = vec![b'a'; 3000 + n];
        if n % 4 == 0 {
            k.push(b'b');
        }
        pipe.cmd("SET").arg(k).arg(1).ignore();
    }
    let () = pipe.query(&mut con).unwrap();
    for pattern in [
        &b"*a*a*a*a*a*a*a*a*a*a*b"[..],
        b"*a*a*a*a*a*a*a*a*a*a*c",
        b"*?*?*?*?*?*?*?*?*?*?*?*?b",
    ] {
        let want = native(&mut con, &[b"MATCH", pattern]);
        let started = Instant::now();
        let got = snap_keys(&mut con, &[b"MATCH", pattern, b"COUNT", b"5"]);
        assert_same(&got, &want, &show(pattern));
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{}: {:?}",
            show(pattern),
            started.elapsed()
        );
    }
}
