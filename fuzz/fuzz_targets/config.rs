//! Arbitrary bytes → `cgperf::config::parse`: whatever the file holds, the
//! parser answers with a config or an error, never a panic, an abort, a hang
//! or unbounded memory. An accepted config must be accepted again, equal.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match cgperf::config::parse("fuzz", text) {
        Ok(config) => {
            let again = cgperf::config::parse("fuzz", text).expect("accepted once, accepted twice");
            assert_eq!(config, again, "parsing is deterministic");
        }
        // The message is what users see: rendering it must not panic either.
        Err(e) => drop(e.to_string()),
    }
});
