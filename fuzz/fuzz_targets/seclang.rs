//! The SecLang parser must never panic, whatever the text: it reads rule
//! files that operators write. Errors name a line of the text. No file is
//! read (a sandboxed loader refuses Include and file operators).
#![no_main]
use libfuzzer_sys::fuzz_target;
use switchyard_waf::seclang::{self, Loader};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let mut loader = Loader::sandboxed();
    let result = loader
        .load_str(&text, "fuzz", None)
        .and_then(|()| loader.finish());
    if let Err(e) = result {
        assert!(e.line >= 1, "error without a line: {e}");
    }
    // The pieces, reached directly.
    for (_, line) in seclang::logical_lines(&text).iter().take(8) {
        let _ = seclang::translate_pcre(line);
        let _ = seclang::parse_variables(line);
        let _ = seclang::parse_actions(line);
        let _ = seclang::split_args(line);
        let _ = seclang::Macro::parse(line);
    }
});
