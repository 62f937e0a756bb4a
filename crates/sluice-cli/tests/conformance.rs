//! libiscsi's conformance suite (`iscsi-test-cu`, Debian's libiscsi-bin 1.19) against
//! `sluice target`: zero failures, and skips only for tests that cannot apply to the LUN under
//! test (each listed below with the reason; the tests that skip on one LUN run against another
//! that they apply to).
//!
//! The suite runs with `-d` (data-loss tests allowed) against scratch LUNs. The whole-suite
//! runs see one LU through two portal groups of one target, given to `iscsi-test-cu` as the
//! multipath pair: the MultipathIO suite runs, and so do the tests that need a second I_T
//! nexus (persistent reservations, RESERVE/RELEASE) over real second paths.

mod support;

use std::collections::BTreeMap;

use support::cunit::{self, Outcome, TestResult};
use support::TargetProcess;

/// The Sanitize suite needs `-S` (--allow-sanitize); it runs in its own test below, against
/// a LUN that allows SANITIZE.
const SANITIZE_ELSEWHERE: &str = "--allow-sanitize flag is not set";

/// WriteSame10/16.UnmapUnaligned, WriteSame10/16.InvalidDataOutSize and
/// CompareAndWrite.InvalidDataOutSize need several logical blocks per physical block
/// (LBPPBE > 0); a memory LU's physical block is its logical block. They run against a thin
/// file LU (4 KiB file-system blocks under 512-byte logical blocks) below.
const NEEDS_LBPPB: &str = "LBPPB < 2";

/// CRYPTOGRAPHIC ERASE is refused on purpose (nothing is stored encrypted); the test then
/// checks WACEREQ is 0 and skips.
const NO_CRYPTO_ERASE: &str = "SANITIZE CRYPTO_ERASE is not implemented";

/// WRITE ATOMIC(16) is offered only where a write is all or nothing even across a crash
/// (memory LUs); on a file LU the opcode is unsupported and WriteAtomic16.VPD checks that
/// the Block Limits atomic fields say so.
const NO_ATOMIC_WRITES: &str = "WRITEATOMIC16 is not implemented";

/// `iscsi-test-cu -t TESTS` against `urls`: one portal, or two (the multipath pair).
fn run_suite(urls: &[&str], tests: &str) -> Vec<TestResult> {
    cunit::run_suite(urls, tests, &[])
}

/// Fails with a readable list unless every test passed or skipped for an accepted reason.
fn check(results: &[TestResult], allowed_skip: impl Fn(&str, &str) -> bool) {
    let mut counts = BTreeMap::new();
    let mut problems = Vec::new();
    for r in results {
        let kind = match &r.outcome {
            Outcome::Pass => "pass",
            Outcome::Skip(reasons) => {
                let suite = r.name.split('.').next().unwrap_or("");
                for reason in reasons.iter().filter(|reason| !allowed_skip(suite, reason)) {
                    problems.push(format!("{}: skipped ({reason})", r.name));
                }
                "skip"
            }
            Outcome::Fail(text) => {
                let tail: String = text.lines().rev().take(6).collect::<Vec<_>>().join(" | ");
                problems.push(format!("{}: FAILED: {tail}", r.name));
                "fail"
            }
        };
        *counts.entry(kind).or_insert(0) += 1;
    }
    eprintln!("conformance: {counts:?}");
    assert!(
        problems.is_empty(),
        "{} problems:\n{}",
        problems.len(),
        problems.join("\n")
    );
}

/// No skip is accepted.
fn none(_suite: &str, _reason: &str) -> bool {
    false
}

/// Skips of the whole suite against a thin memory LU that other tests cover: the
/// removable-medium and write-protect suites (LUNs with those properties, below), SANITIZE
/// (its own run with `-S`), and the tests that need LBPPBE > 0 (a thin file LU).
fn covered_elsewhere(suite: &str, reason: &str) -> bool {
    let suites = ["PreventAllow", "StartStopUnit", "NoMedia", "ReadOnly"];
    suites.contains(&suite) || reason.contains(SANITIZE_ELSEWHERE) || reason.contains(NEEDS_LBPPB)
}

/// The two URLs of LUN 0 through the target's two portal groups.
fn paths(target: &TargetProcess) -> [&str; 2] {
    [&target.urls[0], &target.urls[1]]
}

/// Tests that must have run and passed (not skipped), at least `count` of each suite.
fn assert_passed(results: &[TestResult], suites: &[(&str, usize)]) {
    for &(suite, count) in suites {
        let passed = results
            .iter()
            .filter(|r| r.name.split('.').next() == Some(suite) && r.outcome == Outcome::Pass)
            .count();
        assert!(
            passed >= count,
            "{suite}: {passed} tests passed, expected {count}"
        );
    }
}

/// The reservation and multipath suites, which need the second path, and the
/// thin-provisioning, COMPARE AND WRITE and EXTENDED COPY suites, which need a thin LU: each
/// must run and pass on a thin LU seen through two portals.
const MUST_PASS: &[(&str, usize)] = &[
    ("PrinReadKeys", 2),
    ("PrinServiceactionRange", 1),
    ("PrinReportCapabilities", 1),
    ("ProutRegister", 1),
    ("ProutReserve", 13),
    ("ProutClear", 1),
    ("ProutPreempt", 1),
    ("Reserve6", 7),
    ("MultipathIO", 4),
    ("CompareAndWrite", 4),
    ("ExtendedCopy", 6),
    ("ReceiveCopyResults", 2),
    ("GetLBAStatus", 3),
    ("Unmap", 3),
    ("WriteSame10", 8),
    ("WriteSame16", 8),
    ("WriteAtomic16", 6),
];

#[test]
fn whole_suite_against_a_thin_memory_lun() {
    let target = TargetProcess::start_multipath(&["--memory", "1G", "--thin"]);
    let results = run_suite(&paths(&target), "ALL");
    check(&results, covered_elsewhere);
    assert!(
        results.len() >= 230,
        "expected the 230 tests of family ALL, got {}",
        results.len()
    );
    assert_passed(&results, MUST_PASS);
}

#[test]
fn removable_medium_suites_against_a_removable_lun() {
    // Thin, so that UNMAP, WRITE SAME with UNMAP and GET LBA STATUS meet the ejected medium
    // too.
    let target = TargetProcess::start(&["--memory", "64M", "--removable", "--thin"]);
    let results = run_suite(
        &[&target.url],
        "ALL.PreventAllow,ALL.StartStopUnit,ALL.NoMedia",
    );
    check(&results, none);
    assert!(
        results.len() >= 12,
        "expected PreventAllow (8), StartStopUnit (3), NoMedia (1)"
    );
}

#[test]
fn read_only_suite_against_a_write_protected_lun() {
    // Thin, so that UNMAP and WRITE SAME with UNMAP are refused as writes too.
    let target = TargetProcess::start(&["--memory", "64M", "--read-only", "--thin"]);
    let results = run_suite(&[&target.url], "ALL.ReadOnly");
    check(&results, none);
    assert_eq!(results.len(), 1);
}

#[test]
fn whole_suite_with_header_digests() {
    let target = TargetProcess::start_multipath(&["--memory", "1G", "--thin"]);
    // libiscsi reads its digest offer from the URL; 1.19 never offers data digests.
    let [one, two] = paths(&target);
    let (one, two) = (
        format!("{one}?header_digest=crc32c"),
        format!("{two}?header_digest=crc32c"),
    );
    let results = run_suite(&[&one, &two], "ALL");
    check(&results, covered_elsewhere);
}

/// A fully provisioned file LU seen through two portals: the thin-provisioning tests skip
/// ("fully provisioned", or UNMAP reported unsupported), which is what such a LU must make
/// them do; they run against thin LUs above and below.
#[test]
fn whole_suite_against_a_thick_file_lun() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let path = dir.path().join("lun.img");
    let path = path.to_str().expect("utf-8 path");
    let target = TargetProcess::start_multipath(&["--file", path, "--size", "256M"]);
    let results = run_suite(&paths(&target), "ALL");
    let thick = [
        "Logical unit is fully provisioned",
        "UNMAP is not implemented",
    ];
    check(&results, |suite, reason| {
        covered_elsewhere(suite, reason)
            || reason.contains(NO_ATOMIC_WRITES)
            || thick.iter().any(|t| reason.contains(t))
    });
}

/// The thin-provisioning, COMPARE AND WRITE and EXTENDED COPY suites against a thin file LU
/// on disk (holes punched, 512-byte blocks in 4 KiB file-system blocks: LBPPBE 3), which is
/// where the tests that need LBPPBE > 0 run. GetLBAStatus.UnmapSingle is left out here:
/// after unmapping LBAs 0..i it asks for the status at LBA i+1 and wants the first
/// descriptor to start at i+LBPPB, which only holds when LBPPB is 1; it passes against the
/// memory LU above.
#[test]
fn thin_provisioning_suites_against_a_thin_file_lun() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let path = dir.path().join("lun.img");
    let path = path.to_str().expect("utf-8 path");
    let target = TargetProcess::start(&["--file", path, "--size", "256M", "--thin"]);
    let tests = "ALL.CompareAndWrite,ALL.WriteSame10,ALL.WriteSame16,ALL.Unmap,\
                 ALL.GetLBAStatus.Simple,ALL.GetLBAStatus.BeyondEol,ALL.ExtendedCopy,\
                 ALL.ReceiveCopyResults,ALL.WriteAtomic16,ALL.Inquiry";
    let results = run_suite(&[&target.url], tests);
    check(&results, |_, reason| reason.contains(NO_ATOMIC_WRITES));
    for lbppb in [
        "CompareAndWrite.InvalidDataOutSize",
        "WriteSame10.UnmapUnaligned",
        "WriteSame16.UnmapUnaligned",
        "WriteSame10.InvalidDataOutSize",
        "WriteSame16.InvalidDataOutSize",
    ] {
        assert!(
            results
                .iter()
                .any(|r| r.name == lbppb && r.outcome == Outcome::Pass),
            "{lbppb} did not run and pass"
        );
    }
}

/// The Sanitize suite (`-S`) against a thin memory LU that allows SANITIZE, its overwrite
/// held to 8 MiB/s so that an 80 MiB sanitize lasts 10 s: Sanitize.Reset checks that a
/// sanitize is still running after 3 s, five task-management functions, a logout and a new
/// login (and then polls once a minute until it ends). CryptoErase skips because
/// CRYPTOGRAPHIC ERASE is refused, and so does Reservations, which libiscsi 1.19 runs with a
/// CRYPTOGRAPHIC ERASE only.
#[test]
fn sanitize_suite_against_a_lun_that_allows_it() {
    let target = TargetProcess::start(&[
        "--memory",
        "80M",
        "--thin",
        "--allow-sanitize",
        "--sanitize-rate",
        "8M",
    ]);
    let results = cunit::run_suite(&[&target.url], "ALL.Sanitize", &["-S"]);
    check(&results, |_, reason| reason.contains(NO_CRYPTO_ERASE));
    assert_eq!(results.len(), 11);
    for name in [
        "Sanitize.Overwrite",
        "Sanitize.BlockErase",
        "Sanitize.Reset",
    ] {
        assert!(
            results
                .iter()
                .any(|r| r.name == name && r.outcome == Outcome::Pass),
            "{name} did not run and pass"
        );
    }
}
