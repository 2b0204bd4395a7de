//! What a webhook receiver's HTTP status means for the delivery (SPEC §16): 2xx delivered;
//! a redirect is not followed (the target said the event belongs elsewhere: an operator must
//! change the URL), so permanent; 408, 429 and 5xx are the receiver's trouble of the moment,
//! so transient; any other 4xx is a refusal, permanent.

/// The delivery's fate after an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    Delivered,
    /// A 3xx: never followed.
    Redirect,
    Transient,
    Permanent,
}

/// The one rule from status code to fate.
pub fn judge_status(status: u16) -> Answer {
    match status {
        200..=299 => Answer::Delivered,
        300..=399 => Answer::Redirect,
        408 | 429 | 500..=599 => Answer::Transient,
        _ => Answer::Permanent,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_table() {
        for (status, want) in [
            (200, Answer::Delivered),
            (201, Answer::Delivered),
            (204, Answer::Delivered),
            (299, Answer::Delivered),
            (301, Answer::Redirect),
            (302, Answer::Redirect),
            (307, Answer::Redirect),
            (308, Answer::Redirect),
            (304, Answer::Redirect),
            (400, Answer::Permanent),
            (401, Answer::Permanent),
            (403, Answer::Permanent),
            (404, Answer::Permanent),
            (410, Answer::Permanent),
            (413, Answer::Permanent),
            (408, Answer::Transient),
            (429, Answer::Transient),
            (500, Answer::Transient),
            (502, Answer::Transient),
            (503, Answer::Transient),
            (599, Answer::Transient),
            (100, Answer::Permanent),
            (600, Answer::Permanent),
        ] {
            assert_eq!(judge_status(status), want, "{status}");
        }
    }
}
