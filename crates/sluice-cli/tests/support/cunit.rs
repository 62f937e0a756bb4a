//! Reading `iscsi-test-cu -v` output: one verdict per test, telling skips from passes.
//!
//! CUnit prints `  Test: NAME ...`, then whatever the test logs, then `passed` or `FAILED`.
//! libiscsi counts a skipped test as passed and only says `[SKIPPED] reason` before the
//! verdict; suite clean-up may print `[SKIPPED]`/`[FAILED]` lines *after* the verdict, which
//! belong to no test.

use std::process::Command;
use std::time::Instant;

use super::require_tool;

/// Runs `iscsi-test-cu -d -v [EXTRA...] -t TESTS URL...` (a second URL adds the multipath
/// tests) and parses its verdicts; fails if it ran no test at all.
pub fn run_suite(urls: &[&str], tests: &str, extra: &[&str]) -> Vec<TestResult> {
    let tool = require_tool("iscsi-test-cu", "libiscsi-bin");
    let started = Instant::now();
    let out = Command::new(tool)
        .args(["-d", "-v"])
        .args(extra)
        .args(["-t", tests])
        .args(urls)
        .output()
        .expect("run iscsi-test-cu");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    let results = parse(&text);
    let count = |f: fn(&Outcome) -> bool| results.iter().filter(|r| f(&r.outcome)).count();
    eprintln!(
        "iscsi-test-cu -t {tests} {}: {} tests in {:.0?}: {} passed, {} skipped, {} failed",
        urls.join(" "),
        results.len(),
        started.elapsed(),
        count(|o| *o == Outcome::Pass),
        count(|o| matches!(o, Outcome::Skip(_))),
        count(|o| matches!(o, Outcome::Fail(_))),
    );
    assert!(!results.is_empty(), "iscsi-test-cu ran no test:\n{text}");
    results
}

/// Skip reasons of tests that pass on a memory LU for a capability an RBD LU does not offer:
/// WRITE ATOMIC (a librbd write is not all or nothing across a crash), thin provisioning
/// (the suite runs on a fully provisioned RBD LU), several logical blocks per physical block.
pub const RBD_LACKS: &[&str] = &[
    "WRITEATOMIC16 is not implemented",
    "Logical unit is fully provisioned",
    "LBPPB < 2",
];

/// Where `results` end differently from `reference` (the same tests on a memory LU): every
/// failure, and every other difference but a skip for one of the reasons in `lacks` (a
/// capability the tested LU does not offer) where the reference passed.
pub fn differences(
    results: &[TestResult],
    reference: &[TestResult],
    lacks: &[&str],
) -> Vec<String> {
    let mut problems = Vec::new();
    for r in results {
        let theirs = reference
            .iter()
            .find(|m| m.name == r.name)
            .map(|m| &m.outcome);
        match (&r.outcome, theirs) {
            (Outcome::Fail(text), _) => problems.push(format!("{}: FAILED: {text}", r.name)),
            (Outcome::Pass, Some(Outcome::Pass)) | (Outcome::Skip(_), Some(Outcome::Skip(_))) => {}
            (Outcome::Skip(reasons), Some(Outcome::Pass))
                if reasons
                    .iter()
                    .all(|why| lacks.iter().any(|l| why.contains(l))) => {}
            (mine, theirs) => problems.push(format!(
                "{}: {mine:?} here, {theirs:?} on a memory LU",
                r.name
            )),
        }
    }
    problems
}

/// How one test ended.
#[derive(Clone, Debug, Eq, PartialEq)]
pub enum Outcome {
    /// Passed.
    Pass,
    /// Skipped (wholly or in part), with every reason the test printed.
    Skip(Vec<String>),
    /// Failed (or never reached a verdict: crash or hang).
    Fail(String),
}

/// One test's result, named `Suite.Test`.
#[derive(Clone, Debug)]
pub struct TestResult {
    /// `Suite.Test`.
    pub name: String,
    /// The verdict.
    pub outcome: Outcome,
}

/// Parses verbose CUnit output.
pub fn parse(output: &str) -> Vec<TestResult> {
    let mut results = Vec::new();
    let mut suite = String::new();
    let mut current: Option<(String, String)> = None; // (name, text before the verdict)
    for line in output.lines() {
        if let Some(s) = line.strip_prefix("Suite: ") {
            if let Some((name, text)) = current.take() {
                results.push(unfinished(name, text));
            }
            suite = s.trim().to_string();
            continue;
        }
        let mut rest = line;
        if let Some(t) = line.trim_start().strip_prefix("Test: ") {
            if let Some((name, text)) = current.take() {
                results.push(unfinished(name, text));
            }
            let (test, after) = t.split_once(" ...").unwrap_or((t, ""));
            current = Some((format!("{suite}.{}", test.trim()), String::new()));
            rest = after;
        }
        let Some((_, text)) = current.as_mut() else {
            continue;
        };
        // CUnit's verdict opens a line (or directly follows ` ...`); `[FAILED]` notes that
        // libiscsi prints inside a test are not verdicts.
        let verdict = ["passed", "FAILED"]
            .into_iter()
            .find(|v| rest.starts_with(v));
        match verdict {
            Some(v) => {
                let (name, text) = current.take().unwrap_or_default();
                let outcome = if v == "FAILED" {
                    Outcome::Fail(text)
                } else if let Some(reasons) = skip_reasons(&text) {
                    Outcome::Skip(reasons)
                } else {
                    Outcome::Pass
                };
                results.push(TestResult { name, outcome });
            }
            None => {
                text.push_str(rest);
                text.push('\n');
            }
        }
    }
    if let Some((name, text)) = current.take() {
        results.push(unfinished(name, text));
    }
    results
}

fn unfinished(name: String, text: String) -> TestResult {
    TestResult {
        name,
        outcome: Outcome::Fail(format!("no verdict (crash or hang)\n{text}")),
    }
}

fn skip_reasons(text: &str) -> Option<Vec<String>> {
    let mut reasons: Vec<String> = text
        .split("[SKIPPED]")
        .skip(1)
        .map(|r| r.lines().next().unwrap_or("").trim().to_string())
        .collect();
    reasons.dedup();
    (!reasons.is_empty()).then_some(reasons)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "    [SKIPPED] PERSISTENT RESERVE IN is not implemented.\n\
Suite: iSCSIdatasn\n\
  Test: iSCSIDataSnInvalid ...    [FAILED] WRITE10 command failed\n\
FAILED\n\
    1. test_iscsi_datasn_invalid.c:116  - CU_ASSERT_NOT_EQUAL(ret,0)    [SKIPPED] PERSISTENT RESERVE IN is not implemented.\n\
\n\
Suite: OrWrite\n\
  Test: Simple ...    [SKIPPED] ORWRITE is not implemented.\n\
    [SKIPPED] ORWRITE is not implemented.\n\
passed\n\
Suite: Inquiry\n\
  Test: Standard ...passed\n\
  Test: VersionDescriptors ...passed    [SKIPPED] PERSISTENT RESERVE IN is not implemented.\n\
  Test: Hang ...\n";

    #[test]
    fn verdicts_and_skips_belong_to_their_test() {
        let r = parse(SAMPLE);
        let names: Vec<_> = r.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "iSCSIdatasn.iSCSIDataSnInvalid",
                "OrWrite.Simple",
                "Inquiry.Standard",
                "Inquiry.VersionDescriptors",
                "Inquiry.Hang"
            ]
        );
        assert!(matches!(r[0].outcome, Outcome::Fail(_)));
        assert_eq!(
            r[1].outcome,
            Outcome::Skip(vec!["ORWRITE is not implemented.".into()])
        );
        assert_eq!(r[2].outcome, Outcome::Pass);
        assert_eq!(
            r[3].outcome,
            Outcome::Pass,
            "clean-up output after the verdict is not a skip"
        );
        assert!(matches!(r[4].outcome, Outcome::Fail(_)));
    }
}
