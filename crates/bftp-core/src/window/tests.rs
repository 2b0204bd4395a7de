use super::*;

/// A wall time in `zone` as a timestamp (a time in a gap or fold taken as the rule does).
fn t(zone: &str, civil: &str) -> Timestamp {
    let tz = time_zone(zone).unwrap();
    let dt: jiff::civil::DateTime = civil.parse().unwrap();
    let ms = tz
        .to_ambiguous_timestamp(dt)
        .compatible()
        .unwrap()
        .as_millisecond();
    Timestamp(ms as u64)
}

fn utc(civil: &str) -> Timestamp {
    t("UTC", civil)
}

fn hours(zone: &str, windows: &[&str]) -> Hours {
    Hours {
        windows: windows.iter().map(|w| Window::parse(w).unwrap()).collect(),
        zone: time_zone(zone).unwrap(),
        hard: false,
    }
}

#[test]
fn windows_parse_or_say_why_not() {
    let ok = [
        ("01:00-06:00", "01:00-06:00"),
        (" 22:00 - 02:00 ", "22:00-02:00"),
        ("00:00-24:00", "00:00-24:00"),
        ("23:59-00:00", "23:59-00:00"),
        ("01:00:30-01:00:45", "01:00:30-01:00:45"),
    ];
    for (text, shown) in ok {
        assert_eq!(Window::parse(text).unwrap().to_string(), shown, "{text}");
    }
    let bad = [
        ("01:00", "expected \"HH:MM-HH:MM\""),
        ("1:00-06:00", "1:00 is not a time of day"),
        ("25:00-06:00", "25:00 is not a time of day"),
        ("01:60-02:00", "01:60 is not a time of day"),
        ("24:00-01:00", "24:00 is not a time of day"),
        ("06:00-06:00", "the same time"),
        ("00:00-00:00", "the same time"),
        ("a-b", "expected"),
        ("01:00:60-02:00", "01:00:60 is not a time of day"),
        ("01:00:00:00-02:00", "expected"),
        ("", "expected"),
    ];
    for (text, why) in bad {
        let e = Window::parse(text).unwrap_err().to_string();
        assert!(e.contains(why), "{text}: {e}");
    }
    let e = time_zone("Mars/Olympus").unwrap_err().to_string();
    assert!(e.contains("\"Mars/Olympus\" is unknown"), "{e}");
    assert!(time_zone("UTC").is_ok() && time_zone("Europe/Berlin").is_ok());
}

#[test]
fn open_or_closed_until_the_next_opening() {
    let night = hours("UTC", &["01:00-06:00"]);
    let crossing = hours("UTC", &["22:00-02:00"]);
    let touching = hours("UTC", &["22:00-24:00", "00:00-03:00"]);
    let all_day = hours("UTC", &["00:00-24:00"]);
    let none = hours("UTC", &[]);
    let open = |s: &str| Now::Open {
        closes_at: Some(utc(s)),
    };
    let closed = |s: &str| Now::Closed { opens_at: utc(s) };
    let cases: [(&Hours, &str, Now); 12] = [
        (&night, "2026-06-01T00:30", closed("2026-06-01T01:00")),
        (&night, "2026-06-01T01:00", open("2026-06-01T06:00")),
        (&night, "2026-06-01T05:59:59", open("2026-06-01T06:00")),
        (&night, "2026-06-01T06:00", closed("2026-06-02T01:00")),
        (&crossing, "2026-06-01T23:00", open("2026-06-02T02:00")),
        (&crossing, "2026-06-01T01:00", open("2026-06-01T02:00")),
        (&crossing, "2026-06-01T12:00", closed("2026-06-01T22:00")),
        (&touching, "2026-06-01T23:00", open("2026-06-02T03:00")),
        (&touching, "2026-06-01T04:00", closed("2026-06-01T22:00")),
        (&all_day, "2026-06-01T04:00", Now::Open { closes_at: None }),
        (&none, "2026-06-01T04:00", Now::Open { closes_at: None }),
        // New year's eve: the days roll over the year.
        (&night, "2026-12-31T07:00", closed("2027-01-01T01:00")),
    ];
    for (h, at, want) in cases {
        assert_eq!(look(h, utc(at)), want, "{:?} at {at}", h.windows);
    }
}

#[test]
fn clock_changes_are_days_like_the_others() {
    let berlin = |s: &str| t("Europe/Berlin", s);
    // 2026-03-29: 02:00 CET becomes 03:00 CEST.
    let night = hours("Europe/Berlin", &["01:00-06:00"]);
    assert_eq!(
        look(&night, utc("2026-03-28T23:30")),
        Now::Closed {
            opens_at: utc("2026-03-29T00:00")
        }
    );
    assert_eq!(
        look(&night, utc("2026-03-29T00:00")),
        Now::Open {
            closes_at: Some(utc("2026-03-29T04:00"))
        },
        "four hours of wall time that night"
    );
    // A window inside the skipped hour moves by the gap that day (03:00-03:30 CEST).
    let skipped = hours("Europe/Berlin", &["02:00-02:30"]);
    assert_eq!(
        look(&skipped, berlin("2026-03-29T00:00")),
        Now::Closed {
            opens_at: utc("2026-03-29T01:00")
        }
    );
    assert_eq!(
        look(&skipped, utc("2026-03-29T01:10")),
        Now::Open {
            closes_at: Some(utc("2026-03-29T01:30"))
        }
    );
    assert_eq!(
        look(&skipped, utc("2026-03-29T01:30")),
        Now::Closed {
            opens_at: berlin("2026-03-30T02:00")
        }
    );
    // A window starting in the gap opens as late after it (03:30 CEST).
    let half = hours("Europe/Berlin", &["02:30-04:00"]);
    assert_eq!(
        look(&half, utc("2026-03-28T23:00")),
        Now::Closed {
            opens_at: utc("2026-03-29T01:30")
        }
    );
    // 2026-10-25: 03:00 CEST becomes 02:00 CET; 02:00-03:00 holds both 02:xx hours.
    let fold = hours("Europe/Berlin", &["02:00-03:00"]);
    assert_eq!(
        look(&fold, utc("2026-10-25T00:00")),
        Now::Open {
            closes_at: Some(utc("2026-10-25T02:00"))
        }
    );
    assert_eq!(
        look(&fold, utc("2026-10-25T02:00")),
        Now::Closed {
            opens_at: utc("2026-10-26T01:00")
        }
    );
}

#[test]
fn several_hours_are_open_only_together() {
    let a = hours("UTC", &["01:00-06:00"]);
    let b = hours("UTC", &["05:00-08:00"]);
    let never = hours("UTC", &["10:00-11:00"]);
    assert_eq!(
        look_all(&[&a, &b], utc("2026-06-01T00:00")),
        Now::Closed {
            opens_at: utc("2026-06-01T05:00")
        }
    );
    assert_eq!(
        look_all(&[&a, &b], utc("2026-06-01T05:30")),
        Now::Open {
            closes_at: Some(utc("2026-06-01T06:00"))
        }
    );
    assert_eq!(
        look_all(&[], utc("2026-06-01T05:30")),
        Now::Open { closes_at: None }
    );
    // Hours that never meet: looked at again a day later.
    let at = utc("2026-06-01T00:00");
    assert!(matches!(
        look_all(&[&a, &never], at),
        Now::Closed { opens_at } if opens_at > at
    ));
}

#[test]
fn what_opens_the_breaker() {
    let table = [
        (Failure::Unreachable, true),
        (Failure::TransientReply, true),
        (Failure::TooManyConnections, false),
        (Failure::Permanent, false),
    ];
    for (f, opens) in table {
        assert_eq!(opens_breaker(f), opens, "{f:?}");
    }
}

#[test]
fn probes_back_off_doubling_to_the_cap() {
    let s = Duration::from_secs;
    let got: Vec<Duration> = (0..9).map(|n| probe_delay(s(1), s(60), n)).collect();
    assert_eq!(got, [1, 2, 4, 8, 16, 32, 60, 60, 60].map(s));
    assert_eq!(probe_delay(s(1), s(60), 40), s(60));
    assert_eq!(probe_delay(s(5), s(2), 0), s(5), "a cap below the first");
}

#[test]
fn a_wait_says_why_in_words_and_data() {
    let w = Wait {
        reason: WaitReason::Window,
        host: None,
        until: utc("2026-06-01T01:00"),
    };
    assert_eq!(
        w.text(),
        "waiting for the window, opens at 2026-06-01T01:00:00Z"
    );
    let d = Wait {
        reason: WaitReason::HostDown,
        host: Some("ftp.example.org".into()),
        until: utc("2026-06-01T01:00"),
    };
    assert_eq!(
        d.text(),
        "waiting for ftp.example.org to come back (probing)"
    );
    for r in [WaitReason::Window, WaitReason::HostDown] {
        assert_eq!(WaitReason::parse(r.as_str()), Some(r));
    }
}
