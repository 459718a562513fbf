use super::*;

#[test]
fn layout_markers_are_numbered() {
    assert_eq!(layout_number(LAYOUT_VERSION), Some(2));
    assert_eq!(layout_number("gaffer-layout-10"), Some(10));
    for other in [
        "gaffer-layout-",
        "gaffer-layout-x",
        "gaffer-layout--1",
        "layout-2",
        "",
    ] {
        assert_eq!(layout_number(other), None, "{other}");
    }
}

#[test]
fn internal_keys_are_under_the_reserved_prefix() {
    for key in [
        run_key("a"),
        outcome_key("a"),
        JOBS_EXPIRY_PREFIX.to_vec(),
        ENDED_ROOT.to_vec(),
        ENDED_INDEX_READY.to_vec(),
        LAYOUT_KEY.to_vec(),
        SHARD_KEY.to_vec(),
        SHARD_OWNER_KEY.to_vec(),
        BARRIER_KEY.to_vec(),
        periodic_key("a"),
        PERIODIC_PREFIX.to_vec(),
    ] {
        assert!(key.starts_with(RESERVED_KV_PREFIX.as_bytes()), "{key:?}");
    }
}

#[test]
fn ids_are_validated() {
    assert!(is_valid_id("ok-1_A"));
    assert!(is_valid_id(&keyed_run_id("anything")));
    for bad in ["", "a/b", "..", "a\0b", &"x".repeat(129), "é"] {
        assert!(!is_valid_id(bad), "{bad:?}");
    }
}

#[test]
fn hex_is_lowercase_two_digits_per_byte() {
    assert_eq!(hex(&[0x00, 0x0f, 0xa5, 0xff, 0x10]), "000fa5ff10");
    assert_eq!(hex(&[]), "");
    // The ids already on disk were made with this encoding: it must not change.
    assert_eq!(
        hex_sha256(b""),
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    );
}

#[test]
fn queue_names_are_per_type_valid_and_distinct() {
    assert_eq!(queue_for("jobs", "send-welcome"), "jobs.send-welcome");
    for name in ["a b", "a:b", "a/b", "é", "", &"x".repeat(300)] {
        let q = queue_for("jobs", name);
        assert!(taquba::QueueName::new(q.as_str()).is_ok(), "{q}");
        assert!(q.starts_with("jobs."), "{q}");
    }
    // Two names that sanitize alike still get their own queues.
    assert_ne!(queue_for("jobs", "a b"), queue_for("jobs", "a:b"));
    assert_ne!(queue_for("jobs", "a_b"), queue_for("jobs", "a b"));
}

#[test]
fn a_shard_is_fixed_by_the_id_and_the_count() {
    // Ids already routed depend on this: it must not change.
    // SHA-256("job-0") begins ec67b2acc821cb48.
    assert_eq!(
        shard_of("job-0", 6),
        (0xec67_b2ac_c821_cb48_u64 % 6) as usize
    );
    assert_eq!(
        shard_of("job-0", 7),
        (0xec67_b2ac_c821_cb48_u64 % 7) as usize
    );
    assert_eq!(shard_of("a", 1), 0);
    assert_eq!(shard_of("a", 0), 0);
}

#[test]
fn partition_queues_are_valid_and_never_a_types_queue() {
    let base = queue_for("jobs", "call-partner");
    let p = partition_queue(&base, "tenant 7/é");
    assert!(taquba::QueueName::new(p.as_str()).is_ok(), "{p}");
    assert_eq!(p.len(), base.len() + PARTITION_SUFFIX_LEN);
    assert_eq!(partition_base(&p), Some(base.as_str()));
    assert_ne!(p, partition_queue(&base, "tenant 8"));
    assert_eq!(partition_base(&base), None);
    assert_eq!(partition_base("..p0123456789abcdef"), None);
    // A type named like a partition gets a queue of its own.
    let odd = queue_for("jobs", "call-partner..p0123456789abcdef");
    assert_eq!(partition_base(&odd), None, "{odd}");
    assert!(taquba::QueueName::new(odd.as_str()).is_ok(), "{odd}");
}

#[test]
fn type_segments_are_key_safe_and_distinct() {
    assert_eq!(type_segment("send-welcome"), "send-welcome");
    for name in ["a/b", "a b", "", &"x".repeat(300)] {
        let seg = type_segment(name);
        assert!(!seg.is_empty() && seg.len() <= 200, "{seg}");
        assert!(!seg.contains('/'), "{seg}");
    }
    assert_ne!(type_segment("a/b"), type_segment("a b"));
}

#[test]
fn ended_positions_sort_by_time() {
    assert!(ended_position(9, "z") < ended_position(10, "a"));
    assert!(ended_position(0xff, "a") < ended_position(0x100, "a"));
}

#[test]
fn memo_dirs_do_not_match_a_run_id_as_prefix() {
    assert!(!memo_dir("b", "run-suffix").starts_with(&memo_dir("b", "run")));
}

#[test]
fn input_hash_separates_type_from_payload() {
    assert_ne!(input_hash("ab", b"c"), input_hash("a", b"bc"));
    assert_eq!(input_hash("a", b"x"), input_hash("a", b"x"));
}

#[test]
fn a_timeout_header_is_a_positive_count_of_milliseconds_or_none() {
    let of = |v: &str| {
        timeout_header(&std::collections::HashMap::from([(
            HEADER_TIMEOUT.to_string(),
            v.to_string(),
        )]))
    };
    assert_eq!(of("1500"), Some(std::time::Duration::from_millis(1500)));
    assert_eq!(
        of(&u64::MAX.to_string()),
        Some(std::time::Duration::from_millis(u64::MAX))
    );
    for bad in [
        "0",
        "",
        "-1",
        "1.5",
        "1e3",
        "ten",
        " 5",
        &format!("{}0", u64::MAX),
    ] {
        assert_eq!(of(bad), None, "{bad:?}");
    }
    assert_eq!(timeout_header(&std::collections::HashMap::new()), None);
}
