//! Every wire parser on arbitrary bytes: must return, never panic.
#![no_main]

use cairn_nbd::wire::*;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let code = data.first().map_or(0, |&b| u32::from(b % 16));
    let rest = data.get(1..).unwrap_or_default();
    let _ = parse_greeting(data);
    let _ = parse_option_header(data);
    if let Ok(opt) = parse_option(code, rest) {
        // What parses (and is known) must encode back to the same bytes.
        if matches!(opt, ClientOption::Unknown { .. }) {
            return;
        }
        let encoded = encode_option(&opt);
        assert_eq!(&encoded[OPTION_HEADER_LEN..], rest);
    }
    let _ = parse_option_reply_header(data);
    let _ = parse_info(data);
    if let Ok(req) = parse_request(data) {
        assert_eq!(&encode_request(&req)[..], data);
    }
    let _ = parse_simple_reply(data);
    let _ = parse_chunk_header(data);
    let _ = parse_error_payload(data);
    let _ = parse_block_status_payload(data);
});
