//! libiscsi's conformance suite (`iscsi-test-cu`, Debian's libiscsi-bin 1.19) against
//! `sluice target`: zero failures, and skips only for features that are deliberately not
//! implemented yet (each listed below with the reason).
//!
//! The suite runs with `-d` (data-loss tests allowed) against a scratch memory LUN.

mod support;

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Instant;

use support::cunit::{parse, Outcome, TestResult};
use support::{require_tool, TargetProcess};

/// Suites whose skips are accepted: features of later work (thin provisioning, UNMAP, WRITE
/// SAME, GET LBA STATUS, COMPARE AND WRITE, EXTENDED COPY, persistent reservations,
/// RESERVE/RELEASE, WRITE ATOMIC, SANITIZE, multipath). A skip anywhere else fails the test.
const DEFERRED_SUITES: &[&str] = &[
    "CompareAndWrite",
    "ExtendedCopy",
    "ReceiveCopyResults",
    "GetLBAStatus",
    "Unmap",
    "WriteSame10",
    "WriteSame16",
    "PrinReadKeys",
    "PrinServiceactionRange",
    "PrinReportCapabilities",
    "ProutRegister",
    "ProutReserve",
    "ProutClear",
    "ProutPreempt",
    "Reserve6",
    "WriteAtomic16",
    "Sanitize",
    "MultipathIO",
];

/// Skip reasons accepted in any suite, for the same deferred features: a test of another
/// family may skip the steps that need them and still pass the rest.
const DEFERRED_REASONS: &[&str] = &[
    // Thin provisioning (LBPME=1) is deferred.
    "Logical unit is fully provisioned",
    "GET_LBA_STATUS",
    "GETLBASTATUS",
    "UNMAP",
    "WRITESAME",
    "COMPAREANDWRITE",
    "EXTENDEDCOPY",
    "RECEIVECOPYRESULT",
    "PERSISTENT RESERVE",
    "PROUT",
    "RESERVE6",
    "WRITEATOMIC",
    // SANITIZE is deferred; the suite needs --allow-sanitize.
    "--allow-sanitize flag is not set",
    "SANITIZE",
];

fn run_suite(url: &str, tests: &str) -> Vec<TestResult> {
    let tool = require_tool("iscsi-test-cu", "libiscsi-bin");
    let started = Instant::now();
    let out = Command::new(tool)
        .args(["-d", "-v", "-t", tests, url])
        .output()
        .expect("run iscsi-test-cu");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    let results = parse(&text);
    eprintln!(
        "iscsi-test-cu -t {tests}: {} tests in {:.0?}",
        results.len(),
        started.elapsed()
    );
    assert!(!results.is_empty(), "iscsi-test-cu ran no test:\n{text}");
    results
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

fn deferred(suite: &str, reason: &str) -> bool {
    DEFERRED_SUITES.contains(&suite) || DEFERRED_REASONS.iter().any(|r| reason.contains(r))
}

#[test]
fn whole_suite_against_a_memory_lun() {
    let target = TargetProcess::start(&["--memory", "1G"]);
    let results = run_suite(&target.url, "ALL");
    // Removable-medium and write-protect suites skip on this LUN by design: they run below
    // against LUNs that have those properties.
    let elsewhere = ["PreventAllow", "StartStopUnit", "NoMedia", "ReadOnly"];
    check(&results, |suite, reason| {
        deferred(suite, reason) || elsewhere.contains(&suite)
    });
    assert!(
        results.len() >= 230,
        "expected the 230 tests of family ALL, got {}",
        results.len()
    );
}

#[test]
fn removable_medium_suites_against_a_removable_lun() {
    let target = TargetProcess::start(&["--memory", "64M", "--removable"]);
    let results = run_suite(
        &target.url,
        "ALL.PreventAllow,ALL.StartStopUnit,ALL.NoMedia",
    );
    check(&results, deferred);
    assert!(
        results.len() >= 12,
        "expected PreventAllow (8), StartStopUnit (3), NoMedia (1)"
    );
}

#[test]
fn read_only_suite_against_a_write_protected_lun() {
    let target = TargetProcess::start(&["--memory", "64M", "--read-only"]);
    let results = run_suite(&target.url, "ALL.ReadOnly");
    check(&results, deferred);
    assert_eq!(results.len(), 1);
}

#[test]
fn whole_suite_with_header_digests() {
    let target = TargetProcess::start(&["--memory", "1G"]);
    // libiscsi reads its digest offer from the URL; 1.19 never offers data digests.
    let url = format!("{}?header_digest=crc32c", target.url);
    let results = run_suite(&url, "ALL");
    let elsewhere = ["PreventAllow", "StartStopUnit", "NoMedia", "ReadOnly"];
    check(&results, |suite, reason| {
        deferred(suite, reason) || elsewhere.contains(&suite)
    });
}

#[test]
fn whole_suite_against_a_file_lun() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let path = dir.path().join("lun.img");
    let path = path.to_str().expect("utf-8 path");
    let target = TargetProcess::start(&["--file", path, "--size", "256M"]);
    let results = run_suite(&target.url, "ALL");
    let elsewhere = ["PreventAllow", "StartStopUnit", "NoMedia", "ReadOnly"];
    check(&results, |suite, reason| {
        deferred(suite, reason) || elsewhere.contains(&suite)
    });
}
