#![no_main]
// Placeholder: replaced by the real harness.
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = data;
});
