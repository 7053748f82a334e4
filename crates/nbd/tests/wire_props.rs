//! The wire parsers never panic on arbitrary bytes, and encode/parse round-trip.

use cairn_nbd::wire::*;
use proptest::prelude::*;

fn any_command() -> impl Strategy<Value = Command> {
    any::<u16>().prop_map(Command::from_code)
}

fn name() -> impl Strategy<Value = String> {
    "[a-zA-Z0-9:_ -]{0,40}"
}

fn any_option() -> impl Strategy<Value = ClientOption> {
    prop_oneof![
        name().prop_map(ClientOption::ExportName),
        Just(ClientOption::Abort),
        Just(ClientOption::List),
        Just(ClientOption::StructuredReply),
        (name(), prop::collection::vec(any::<u16>(), 0..5))
            .prop_map(|(name, requests)| ClientOption::Go { name, requests }),
        (name(), prop::collection::vec(any::<u16>(), 0..5))
            .prop_map(|(name, requests)| ClientOption::Info { name, requests }),
        (name(), prop::collection::vec(name(), 0..4))
            .prop_map(|(name, queries)| ClientOption::SetMetaContext { name, queries }),
        (name(), prop::collection::vec(name(), 0..4))
            .prop_map(|(name, queries)| ClientOption::ListMetaContext { name, queries }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..200), code in any::<u32>()) {
        let _ = parse_greeting(&bytes);
        let _ = parse_option_header(&bytes);
        let _ = parse_option(code, &bytes);
        let _ = parse_option(code % 12, &bytes);
        let _ = parse_option_reply_header(&bytes);
        let _ = parse_info(&bytes);
        let _ = parse_request(&bytes);
        let _ = parse_simple_reply(&bytes);
        let _ = parse_chunk_header(&bytes);
        let _ = parse_error_payload(&bytes);
        let _ = parse_block_status_payload(&bytes);
    }

    #[test]
    fn requests_round_trip(flags in any::<u16>(), command in any_command(), cookie in any::<u64>(),
                           offset in any::<u64>(), length in any::<u32>()) {
        let req = Request { flags, command, cookie, offset, length };
        prop_assert_eq!(parse_request(&encode_request(&req)), Ok(req));
    }

    #[test]
    fn options_round_trip(opt in any_option()) {
        let bytes = encode_option(&opt);
        let header = parse_option_header(&bytes[..OPTION_HEADER_LEN]).unwrap();
        prop_assert_eq!(header.length as usize, bytes.len() - OPTION_HEADER_LEN);
        prop_assert_eq!(parse_option(header.option, &bytes[OPTION_HEADER_LEN..]), Ok(opt));
    }

    #[test]
    fn replies_round_trip(error in any::<u32>(), cookie in any::<u64>(), flags in any::<u16>(),
                          chunk_type in any::<u16>(), length in any::<u32>()) {
        let simple = SimpleReply { error, cookie };
        prop_assert_eq!(parse_simple_reply(&encode_simple_reply(&simple)), Ok(simple));
        let chunk = ChunkHeader { flags, chunk_type, cookie, length };
        prop_assert_eq!(parse_chunk_header(&encode_chunk_header(&chunk)), Ok(chunk));
    }

    #[test]
    fn payloads_round_trip(extents in prop::collection::vec((any::<u32>(), any::<u32>()), 0..20),
                           id in any::<u32>(), error in any::<u32>(), msg in name()) {
        let bs = encode_block_status_payload(id, &extents);
        prop_assert_eq!(parse_block_status_payload(&bs), Ok((id, extents)));
        prop_assert_eq!(parse_error_payload(&encode_error_payload(error, &msg)), Ok((error, msg)));
    }
}

#[test]
fn greeting_and_infos_round_trip() {
    let flags = HANDSHAKE_FLAG_FIXED_NEWSTYLE | HANDSHAKE_FLAG_NO_ZEROES;
    assert_eq!(parse_greeting(&encode_greeting(flags)), Ok(flags));
    assert_eq!(
        parse_info(&encode_info_export(1 << 30, FLAG_HAS_FLAGS)),
        Ok(Info::Export {
            size: 1 << 30,
            flags: FLAG_HAS_FLAGS
        })
    );
    assert_eq!(
        parse_info(&encode_info_block_size(512, 4096, MAX_PAYLOAD)),
        Ok(Info::BlockSize {
            min: 512,
            preferred: 4096,
            max: MAX_PAYLOAD
        })
    );
    let reply = encode_option_reply(OPT_GO, REP_ACK, b"");
    let h = parse_option_reply_header(&reply).unwrap();
    assert_eq!((h.option, h.reply_type, h.length), (OPT_GO, REP_ACK, 0));
}

#[test]
fn malformed_options_are_errors() {
    // GO whose name length points past the data.
    let mut data = 100u32.to_be_bytes().to_vec();
    data.extend_from_slice(b"abc");
    assert!(parse_option(OPT_GO, &data).is_err());
    // LIST with data, SET_META_CONTEXT with a huge query count.
    assert!(parse_option(OPT_LIST, b"x").is_err());
    let mut data = 0u32.to_be_bytes().to_vec();
    data.extend_from_slice(&u32::MAX.to_be_bytes());
    assert!(parse_option(OPT_SET_META_CONTEXT, &data).is_err());
    // Export name with a NUL.
    assert!(parse_option(OPT_EXPORT_NAME, b"a\0b").is_err());
    // Bad request magic.
    assert!(parse_request(&[0u8; REQUEST_LEN]).is_err());
}
