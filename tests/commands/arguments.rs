//! Argument errors.

use super::*;

#[rstest]
#[case::cursor_letters(&["abc"], INVALID_CURSOR)]
#[case::cursor_negative(&["-1"], INVALID_CURSOR)]
#[case::cursor_fraction(&["1.5"], INVALID_CURSOR)]
#[case::cursor_over_u64(&["18446744073709551616"], INVALID_CURSOR)]
#[case::cursor_leading_space(&[" 1"], INVALID_CURSOR)]
#[case::cursor_plus(&["+1"], INVALID_CURSOR)]
#[case::cursor_empty(&[""], INVALID_CURSOR)]
#[case::cursor_checked_before_options(&["abc", "COUNT", "0"], INVALID_CURSOR)]
#[case::count_zero(&["0", "COUNT", "0"], SYNTAX)]
#[case::count_negative(&["0", "COUNT", "-1"], SYNTAX)]
#[case::count_not_integer(&["0", "COUNT", "abc"], NOT_INTEGER)]
#[case::count_leading_zero(&["0", "COUNT", "01"], NOT_INTEGER)]
#[case::count_over_i64(&["0", "COUNT", "9223372036854775808"], NOT_INTEGER)]
#[case::count_missing(&["0", "COUNT"], SYNTAX)]
#[case::options_checked_before_cursor_lookup(&["5", "COUNT", "0"], SYNTAX)]
#[case::unknown_option(&["0", "BOGUS", "1"], SYNTAX)]
#[case::match_missing(&["0", "MATCH"], SYNTAX)]
#[case::type_missing(&["0", "TYPE"], SYNTAX)]
#[case::novalues_not_an_option(&["0", "NOVALUES"], "ERR NOVALUES option can only be used in HSCAN")]
#[case::noscores_not_an_option(&["0", "noscores"], "ERR NOSCORES option can only be used in ZSCAN")]
#[case::first_bad_option_answers(&["0", "COUNT", "0", "NOVALUES"], SYNTAX)]
#[case::error_after_valid_options(&["0", "MATCH", "*", "COUNT", "5", "EXTRA"], SYNTAX)]
#[case::unknown_type(&["0", "TYPE", "nosuchtype"], "ERR unknown type name 'nosuchtype'")]
#[case::no_arguments(&[], ARITY)]
#[case::u64_max_parses_then_unknown(&["18446744073709551615"], "ERR cursor 18446744073709551615 is unknown, already used or expired; restart the scan from cursor 0")]
#[case::leading_zeros_parse_then_unknown(&["007"], "ERR cursor 7 is unknown, already used or expired; restart the scan from cursor 0")]
#[case::never_issued(&["1"], "ERR cursor 1 is unknown, already used or expired; restart the scan from cursor 0")]
fn argument_errors(#[case] args: &[&str], #[case] want: &str) {
    let server = Server::start();
    let mut con = server.client();
    fill(&mut con, "k", 20);
    let mut full = vec!["SNAPSHOT.SCAN"];
    full.extend_from_slice(args);
    assert_eq!(expect_err(&mut con, &full), want, "{args:?}");
    // An error leaves the connection and the module usable.
    let keys = to_strings(full_scan(&mut con, "SNAPSHOT.SCAN", &["COUNT", "7"]));
    assert_eq!(keys.len(), 20);
}

/// Where every supported server's SCAN agrees, SNAPSHOT.SCAN answers the
/// same error, word for word (the cursor first, then the first bad option).
#[rstest]
#[case::cursor_before_options(&["abc", "COUNT", "0"])]
#[case::count_zero(&["0", "COUNT", "0"])]
#[case::count_negative(&["0", "count", "-1"])]
#[case::count_not_integer(&["0", "COUNT", "abc"])]
#[case::count_missing(&["0", "COUNT"])]
#[case::match_missing(&["0", "MATCH"])]
#[case::unknown_option(&["0", "BOGUS", "1"])]
#[case::first_bad_option_answers(&["0", "COUNT", "0", "COUNT", "x"])]
#[case::after_valid_options(&["0", "MATCH", "*", "COUNT", "5", "EXTRA"])]
fn argument_errors_read_like_native_scan(#[case] args: &[&str]) {
    let server = Server::start();
    let mut con = server.client();
    fill(&mut con, "k", 3);
    let mut native = vec!["SCAN"];
    native.extend_from_slice(args);
    let want = expect_err(&mut con, &native);
    native[0] = "SNAPSHOT.SCAN";
    assert_eq!(expect_err(&mut con, &native), want, "{args:?}");
}

#[rstest]
#[case::upper(&["MATCH", "a*", "COUNT", "3", "TYPE", "string"])]
#[case::lower(&["count", "3", "type", "string", "match", "a*"])]
#[case::mixed(&["TyPe", "STRING", "mAtCh", "a*", "CoUnT", "3"])]
#[case::later_repeat_wins(&["COUNT", "1000", "MATCH", "zz*", "match", "a*", "type", "hash", "TYPE", "String", "count", "3"])]
fn options_in_any_order_and_case(#[case] opts: &[&str]) {
    let server = Server::start();
    let mut con = server.client();
    let want = fill(&mut con, "a:", 10);
    fill(&mut con, "b:", 10);
    for i in 0..5 {
        let _: () = redis::cmd("HSET")
            .arg(format!("a:h{i}"))
            .arg("f")
            .arg("v")
            .query(&mut con)
            .unwrap();
    }
    // COUNT 3 must be in effect: the first page has exactly 3 keys.
    let (_, first) = page(&mut con, "0", opts);
    assert_eq!(first, want[..3].to_vec(), "{opts:?}");
    let got = to_strings(full_scan(&mut con, "SNAPSHOT.SCAN", opts));
    assert_eq!(got, want, "{opts:?}");
    // Same answer as the server's own SCAN with the same filters.
    let scan = to_strings(full_scan(
        &mut con,
        "SCAN",
        &["MATCH", "a*", "TYPE", "string", "COUNT", "100"],
    ));
    assert_eq!(sorted(&scan), want);
}
