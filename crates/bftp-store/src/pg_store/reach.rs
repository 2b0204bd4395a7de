//! Telling "the database cannot be reached" apart from every other failure of a call: the
//! first is [`StoreError::Unreachable`] (nothing was written, try again later), the rest stay
//! [`StoreError::Backend`].

use std::error::Error as _;

use deadpool_postgres::PoolError;

use crate::error::StoreError;

/// Why the database could not be reached, when that is what `e` says: no connection (refused,
/// reset, closed), or the server refusing sessions because it shuts down or starts up
/// (SQLSTATE class 08, 57P01-57P03). `None` for everything else (a query the server
/// refused, a constraint, a protocol error).
pub(super) fn unreachable(e: &tokio_postgres::Error) -> Option<String> {
    if let Some(db) = e.as_db_error() {
        let code = db.code().code();
        let away = code.starts_with("08") || matches!(code, "57P01" | "57P02" | "57P03");
        return away.then(|| format!("{} (SQLSTATE {code})", db.message()));
    }
    let mut source = e.source();
    while let Some(s) = source {
        if s.is::<std::io::Error>() {
            return Some(chain(e));
        }
        source = s.source();
    }
    e.is_closed().then(|| chain(e))
}

/// The error and its causes, `: `-separated ("error connecting to server: Connection
/// refused (os error 111)").
fn chain(e: &tokio_postgres::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let more = s.to_string();
        if !text.contains(&more) {
            text = format!("{text}: {more}");
        }
        source = s.source();
    }
    text
}

/// The same for taking a connection from the pool: a connection that cannot be made, or not
/// in time. (Waiting for a free connection of a pool that is all in use is not the database
/// being away: `None`.)
pub(super) fn pool_unreachable(e: &PoolError) -> Option<String> {
    match e {
        PoolError::Backend(e) => unreachable(e),
        PoolError::Timeout(deadpool_postgres::TimeoutType::Create) => {
            Some("no connection could be made in time".into())
        }
        PoolError::Timeout(deadpool_postgres::TimeoutType::Recycle) => {
            Some("a kept connection did not answer in time".into())
        }
        _ => None,
    }
}

/// The error of a failed commit. A connection lost while the commit was on its way may have
/// committed or not: that is never [`StoreError::Unreachable`] (which promises nothing was
/// stored), only the server's own refusal of the commit can be, and is not (it is a
/// `Backend` failure too, for want of a better name: the transaction was rolled back).
pub(super) fn commit_failed(op: &'static str) -> impl Fn(tokio_postgres::Error) -> StoreError {
    move |e| match super::pg(op)(e) {
        StoreError::Unreachable { op, reason } => StoreError::Backend {
            op,
            source: crate::error::BackendError::new(std::io::Error::other(format!(
                "the connection was lost during the commit ({reason}); whether it landed is \
                 not known"
            ))),
        },
        other => other,
    }
}
