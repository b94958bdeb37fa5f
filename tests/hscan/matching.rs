//! MATCH (server-exact glob).

use super::*;

/// Fields with glob metacharacters, binary bytes and the empty field.
fn special_fields() -> Vec<Bytes> {
    let mut v: Vec<Bytes> = [
        "", "a", "ab", "abc", "b", "hello", "hallo", "hxllo", "hllo", "heeello", "*", "a*b", "a?c",
        "[x]", "x", "\\", "a\\b", "-", "f^x", "é", "zz",
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect();
    v.extend([
        vec![0u8],
        vec![b'a', 0, b'b'],
        vec![0xff],
        vec![0xff, b'a'],
        vec![b'\n'],
    ]);
    v
}

#[rstest]
#[case::star(b"*")]
#[case::prefix(b"a*")]
#[case::suffix(b"*b")]
#[case::question(b"h?llo")]
#[case::class(b"h[ae]llo")]
#[case::negated_class(b"h[^e]llo")]
#[case::range(b"[a-c]*")]
#[case::escaped_star(b"a\\*b")]
#[case::literal_star_inside(b"*\\**")]
#[case::escaped_bracket(b"\\[*")]
#[case::backslash(b"*\\\\*")]
#[case::nul_byte(b"a\x00*")]
#[case::high_byte(b"\xff*")]
#[case::empty_pattern(b"")]
#[case::unclosed_class(b"[a")]
#[case::literal_no_match(b"nosuchfield")]
#[case::reversed_range(b"[c-a]*")]
#[case::many_stars(b"***b")]
#[case::single_char(b"?")]
#[case::escaped_close_in_class(b"[\\]x]*")]
#[case::trailing_backslash(b"a\\")]
#[case::open_bracket_at_end(b"*[")]
#[case::star_question_star(b"*?*")]
fn match_is_the_servers_glob(#[case] pattern: &[u8]) {
    let server = Server::start();
    let mut con = server.client();
    let fields = special_fields();
    for key in ["lp", "ht"] {
        let mut c = redis::cmd("HSET");
        c.arg(key);
        for (i, f) in fields.iter().enumerate() {
            c.arg(f.as_slice()).arg(format!("v{i}"));
        }
        let _: i64 = c.query(&mut con).unwrap();
    }
    fill_hash(&mut con, "ht", 1_000, |i| format!("x{i}"));
    assert_eq!(encoding(&mut con, "lp"), "listpack");
    assert_eq!(encoding(&mut con, "ht"), "hashtable");
    for key in ["lp", "ht"] {
        let before = hgetall(&mut con, key);
        let matching = native_match(&mut con, key, pattern);
        for novalues in [false, true] {
            let mut o = Opts::count(3).pattern(pattern);
            o.novalues = novalues;
            let got = full(&mut con, key, &o);
            assert_same(
                &got,
                &expected(&before, Some(&matching), novalues),
                &format!("{key} MATCH {} NOVALUES {novalues}", show(pattern)),
            );
        }
    }
}

#[test]
fn sparse_match_pages_may_be_empty_but_the_result_is_exact() {
    let server = Server::start();
    let mut con = server.client();
    fill_hash(&mut con, "h", 5_000, |i| format!("v{i}"));
    config_set(&mut con, "snapshot.scan-budget", "100");
    let o = Opts::count(10).pattern(b"f04999");
    let pages = iterate(&mut con, "h", &o, |_| {});
    assert!(
        pages.len() >= 40,
        "a budget of 100 examined fields per call: {} calls",
        pages.len()
    );
    assert!(
        pages[0].is_empty(),
        "the first page examined only f00000..f00099"
    );
    assert_eq!(pages.concat(), vec![b"f04999".to_vec(), b"v4999".to_vec()]);
}

#[rstest]
#[case::upper(&["MATCH", "f0001*", "COUNT", "3", "NOVALUES"])]
#[case::lower(&["novalues", "count", "3", "match", "f0001*"])]
#[case::mixed(&["CoUnT", "3", "NoVaLuEs", "mAtCh", "f0001*"])]
#[case::later_repeat_wins(&["COUNT", "1000", "MATCH", "zz*", "match", "f0001*", "count", "3", "NOVALUES", "novalues"])]
fn options_in_any_order_and_case(#[case] opts: &[&str]) {
    let server = Server::start();
    let mut con = server.client();
    fill_hash(&mut con, "h", 100, |i| format!("v{i}"));
    let mut cursor = "0".to_string();
    let mut got = Vec::new();
    for _ in 0..10 {
        let (next, page): (String, Vec<String>) = redis::cmd(CMD)
            .arg("h")
            .arg(&cursor)
            .arg(opts)
            .query(&mut con)
            .unwrap();
        assert!(page.len() <= 3, "{page:?}");
        got.extend(page);
        cursor = next;
        if cursor == "0" {
            break;
        }
    }
    assert_eq!(cursor, "0");
    let want: Vec<String> = (10..20).map(fld).collect();
    assert_eq!(got, want, "fields only, in byte order");
}

#[test]
fn default_count_is_ten_and_values_follow_fields() {
    let server = Server::start();
    let mut con = server.client();
    fill_hash(&mut con, "h", 25, |i| format!("v{i}"));
    let (c1, p1) = hscan(&mut con, "h", "0", &Opts::default());
    let want: Vec<Bytes> = (0..10)
        .flat_map(|i| [fld(i).into_bytes(), format!("v{i}").into_bytes()])
        .collect();
    assert_eq!(p1, want);
    let (c2, p2) = hscan(&mut con, "h", &c1, &Opts::default());
    assert_eq!(p2.len(), 20);
    let (c3, p3) = hscan(&mut con, "h", &c2, &Opts::default());
    assert_eq!((c3.as_str(), p3.len()), ("0", 10));
}
