//! The glibc symbol versions the module under test needs (`objdump -T`).
//!
//! With `SNAPSCAN_GLIBC_BASELINE` set (scripts/test.sh sets 2.28 when it runs the
//! suite against the portable build of scripts/build-portable.sh), no symbol may need
//! a newer glibc. Always: the check of `scripts/build-portable.sh --check` agrees
//! with this one on the module under test (and so refuses a Debian 12 build, which
//! needs 2.34).
mod common;

use std::process::Command;

use common::*;

fn version(v: &str) -> Vec<u32> {
    v.split('.')
        .map(|p| p.parse().expect("version part"))
        .collect()
}

/// Every distinct `GLIBC_x.y[.z]` version in the dynamic symbol table, ascending.
fn glibc_versions(so: &std::path::Path) -> Vec<Vec<u32>> {
    let out = Command::new("objdump")
        .arg("-T")
        .arg(so)
        .output()
        .expect("running objdump (Debian package binutils)");
    assert!(
        out.status.success(),
        "objdump -T {}: {:?}",
        so.display(),
        out
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let mut versions: Vec<Vec<u32>> = text
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '.'))
        .filter_map(|w| w.strip_prefix("GLIBC_"))
        .filter(|v| !v.is_empty() && v.split('.').all(|p| p.parse::<u32>().is_ok()))
        .map(version)
        .collect();
    versions.sort();
    versions.dedup();
    versions
}

fn show_version(v: &[u32]) -> String {
    v.iter().map(u32::to_string).collect::<Vec<_>>().join(".")
}

#[test]
fn module_needs_no_glibc_newer_than_the_baseline() {
    let so = module_path();
    let versions = glibc_versions(&so);
    let newest = versions.last().expect("no GLIBC_ version in objdump -T");
    assert!(
        versions.contains(&vec![2, 2, 5]),
        "x86_64 glibc symbols start at GLIBC_2.2.5: {versions:?}"
    );
    eprintln!("{}: needs GLIBC_{}", so.display(), show_version(newest));
    match std::env::var("SNAPSCAN_GLIBC_BASELINE") {
        Ok(baseline) => assert!(
            *newest <= version(&baseline),
            "{} needs GLIBC_{}, newer than the baseline {baseline}",
            so.display(),
            show_version(newest)
        ),
        Err(_) => eprintln!("no SNAPSCAN_GLIBC_BASELINE: bound not checked"),
    }
}

#[test]
fn build_portable_check_agrees() {
    let so = module_path();
    let newest = glibc_versions(&so).pop().expect("GLIBC_ versions");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/build-portable.sh");
    for baseline in ["2.28", "2.34", "2.99"] {
        let out = Command::new(script)
            .arg("--check")
            .arg(&so)
            .env("SNAPSCAN_GLIBC_BASELINE", baseline)
            .output()
            .expect("running scripts/build-portable.sh --check");
        let ok = newest <= version(baseline);
        assert_eq!(
            out.status.success(),
            ok,
            "baseline {baseline}, module needs {}: {}{}",
            show_version(&newest),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        if !ok {
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(
                err.contains(&format!("GLIBC_{}", show_version(&newest))),
                "{err}"
            );
        }
    }
}

/// The module unwinds panics (caught before they reach the server) through
/// the system's libgcc_s, whichever toolchain built it: zig's bundled
/// libunwind crashed the server on the first panic (see
/// scripts/build-portable.sh). tests/robust.rs panics every thread of a
/// loaded module and checks the server survives.
#[test]
fn module_unwinds_through_libgcc_s() {
    let so = module_path();
    let out = std::process::Command::new("objdump")
        .arg("-p")
        .arg(&so)
        .output()
        .expect("objdump -p");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.lines()
            .any(|l| l.contains("NEEDED") && l.contains("libgcc_s.so.1")),
        "{} does not load libgcc_s.so.1:\n{text}",
        so.display()
    );
}
