//! The CRC-aliasing study end to end at its seconds-long scale: every file written, and the
//! numbers obeying what the models must.

use sluice_lab::crc_alias::{self, AliasRow, CrcAliasScale};

fn find<'a>(
    rows: &'a [AliasRow],
    fig: &str,
    checker: &str,
    method: &str,
    ber: f64,
    bits: u64,
) -> &'a AliasRow {
    rows.iter()
        .find(|r| {
            r.figure == fig
                && r.checker.starts_with(checker)
                && r.method == method
                && r.ber == ber
                && r.bits == bits
        })
        .unwrap_or_else(|| panic!("no row {fig} {checker} {method} {ber} {bits}"))
}

#[test]
fn tiny_run_writes_every_file_and_sane_numbers() {
    let dir = tempfile::tempdir().unwrap();
    let lines = std::cell::RefCell::new(Vec::new());
    let report = crc_alias::run(CrcAliasScale::Tiny, dir.path(), &|l| {
        lines.borrow_mut().push(l.to_string())
    })
    .unwrap();
    assert!(!lines.borrow().is_empty());

    // Files: five figures (real PNGs), CSV with a row per value, JSON, Markdown.
    assert_eq!(report.pngs.len(), 5);
    for p in &report.pngs {
        let bytes = std::fs::read(p).unwrap();
        assert!(
            bytes.len() > 10_000 && bytes.starts_with(b"\x89PNG"),
            "{}",
            p.display()
        );
    }
    let csv = std::fs::read_to_string(dir.path().join(crc_alias::CSV_FILE)).unwrap();
    assert_eq!(csv.lines().count(), report.rows.len() + 1);
    let json = std::fs::read_to_string(dir.path().join(crc_alias::JSON_FILE)).unwrap();
    assert_eq!(json.matches("\"figure\"").count(), report.rows.len());
    let md = std::fs::read_to_string(dir.path().join(crc_alias::MARKDOWN_FILE)).unwrap();
    assert_eq!(md, report.markdown);
    for name in [
        "fig6_7_crc16_ber.png",
        "Figure 6.9",
        "1-p",
        "sluice's framer",
    ] {
        assert!(md.contains(name), "{name}");
    }

    let rows = &report.rows;
    // The 3-bit chain at BER 0.5 sits at 1/8 once the register is full.
    let a = find(rows, "fig6_6", "CRC-3", "markov", 0.5, 32).value;
    assert!((a - 0.125).abs() < 1e-9, "{a}");
    // At BER 0.1 it tends to 1/8 from below as packets grow.
    let short = find(rows, "fig6_6", "CRC-3", "markov", 0.1, 8).value;
    let long = find(rows, "fig6_6", "CRC-3", "markov", 0.1, 64).value;
    assert!(
        short < long && long < 0.125 && long > 0.12,
        "{short} {long}"
    );
    // A shorter CRC aliases more: 8 bits against 16 at the same length and BER.
    let c8 = find(rows, "fig6_8", "CRC-8", "markov", 1e-7, 512).value;
    let c16 = find(rows, "fig6_7", "CRC-16", "markov", 1e-7, 512).value;
    assert!(c8 > 1000.0 * c16, "{c8} {c16}");
    // Lower BER, less aliasing given an error (more single errors, which never alias).
    let hi = find(rows, "fig6_7", "CRC-16", "markov", 1e-4, 512).value;
    let lo = find(rows, "fig6_7", "CRC-16", "markov", 1e-7, 512).value;
    assert!(hi > 1e5 * lo && hi < 1.0 / 65536.0, "{hi} {lo}");
    // The 32-bit CRCs alias far less than the 16-bit one.
    let c32 = find(rows, "fig6_8", "CRC-32C", "reduced", 1e-7, 512).value;
    assert!(c32 > 0.0 && c32 < c16, "{c32}");
    // TCP checksum: near the study's 0.0027 at 1500 bytes, growing with the segment.
    let t1500 = find(rows, "fig6_9", "tcp-checksum", "stratified", 1.5e-5, 12_000);
    assert!(
        t1500.low < 0.0027 * 1.2 && t1500.high > 0.0027 * 0.8,
        "{t1500:?}"
    );
    let t64 = find(rows, "fig6_9", "tcp-checksum", "stratified", 1.5e-5, 512).value;
    assert!(t64 < t1500.value / 5.0);
    // Framer: what passes TCP is caught by CRC32C; the pass share agrees with the prediction.
    for r in rows.iter().filter(|r| r.figure == "framer") {
        match r.quantity.as_str() {
            "crc32c-catch-share-of-tcp-passed" => assert_eq!(r.events, r.trials, "{r:?}"),
            "undetected-by-both-share" => assert_eq!(r.events, 0, "{r:?}"),
            "crc32c-catch-share-all" => assert_eq!(r.events, r.trials, "{r:?}"),
            _ => {}
        }
    }
}
