//! Encodings, COUNT, writes between pages.

use super::*;

#[derive(Clone, Copy, Debug)]
enum Enc {
    /// 2,000 fields with hash-max-listpack-entries 4096.
    Listpack,
    /// 20,000 fields with the default hash-max-listpack-entries.
    Hashtable,
}

#[rstest]
fn point_in_time_under_writes_between_pages(
    #[values(Enc::Listpack, Enc::Hashtable)] enc: Enc,
    #[values(1, 10, 100, 1000)] count: usize,
) {
    let server = Server::start();
    let mut con = server.client();
    let mut w = server.client();
    let (n, enc_name) = match enc {
        Enc::Listpack => {
            config_set(&mut con, "hash-max-listpack-entries", "4096");
            (2_000, "listpack")
        }
        Enc::Hashtable => (20_000, "hashtable"),
    };
    let modes = [
        Opts::count(count),
        Opts::count(count).novalues(),
        Opts::count(count).pattern(b"*7?"),
    ];
    let mut rng = Rng(count as u64 * 31 + n as u64);
    for o in &modes {
        let _: i64 = query(&mut con, &["DEL", "h", "h:moved"]).unwrap();
        fill_hash(&mut con, "h", n, |i| i.to_string());
        assert_eq!(encoding(&mut con, "h"), enc_name, "{enc:?}");

        let before = hgetall(&mut con, "h");
        assert_eq!(before.len(), n);
        let matching = o.pattern.as_ref().map(|p| native_match(&mut con, "h", p));
        let want = expected(&before, matching.as_ref(), o.novalues);
        assert!(!want.is_empty());

        // About 40 writes spread over the pages, whatever their number.
        let pages_est = want.len().div_ceil(count);
        let every = (pages_est / 40).max(1);
        let per = (40 / pages_est).max(1);
        let (mut op, mut ok) = (0, 0);
        let pages = iterate(&mut con, "h", o, |p| {
            if p % every == 0 {
                for _ in 0..per {
                    ok += usize::from(mutate(&mut w, &mut rng, op, n));
                    op += 1;
                }
            }
        });
        let full_pages = want.len().div_ceil(count);
        if o.pattern.is_none() {
            assert_eq!(pages.len(), full_pages, "only the last page is short");
        } else {
            // The last match may end a full page with non-matching fields after it.
            assert!(pages.len() <= full_pages + 1, "{} pages", pages.len());
        }
        let got = to_hash(&pages, o.novalues);
        assert_same(&got, &want, &format!("{enc:?} {o:?}"));
        if pages.len() > 1 {
            assert!(ok > 0, "no write succeeded");
            assert_ne!(hgetall(&mut con, "h"), before, "the writes changed nothing");
        }
    }
    assert_eq!(info_u64(&mut con, "snapshot_hash_cursors_open"), 0);
}
