//! Reply shape.

use super::*;

#[test]
fn reply_shape_empty_and_non_empty() {
    let server = Server::start();
    let mut con = server.client();
    let empty: Value = query(&mut con, &["SNAPSHOT.SCAN", "0"]).unwrap();
    assert_eq!(
        empty,
        Value::Array(vec![Value::BulkString(b"0".to_vec()), Value::Array(vec![])]),
        "empty db"
    );
    let empty_match: Value = query(&mut con, &["SNAPSHOT.SCAN", "0", "MATCH", "x*"]).unwrap();
    assert_eq!(empty_match, empty);

    let keys = fill(&mut con, "k", 25);
    let v: Value = query(&mut con, &["SNAPSHOT.SCAN", "0", "COUNT", "10"]).unwrap();
    let Value::Array(parts) = v else {
        panic!("not an array: {v:?}")
    };
    assert_eq!(parts.len(), 2, "{parts:?}");
    let Value::BulkString(cursor) = &parts[0] else {
        panic!("cursor is not a bulk string: {:?}", parts[0])
    };
    let cursor: u64 = std::str::from_utf8(cursor).unwrap().parse().unwrap();
    assert!(cursor != 0 && cursor < 1 << 63, "cursor {cursor}");
    let Value::Array(items) = &parts[1] else {
        panic!("second element is not an array: {:?}", parts[1])
    };
    let items: Vec<String> = items
        .iter()
        .map(|i| match i {
            Value::BulkString(b) => String::from_utf8(b.clone()).unwrap(),
            other => panic!("key is not a bulk string: {other:?}"),
        })
        .collect();
    assert_eq!(items, keys[..10].to_vec());
}
