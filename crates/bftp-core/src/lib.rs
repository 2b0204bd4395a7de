//! The bftp job model: what a request is (RULES.md §2), the states a job and its members go
//! through (RULES.md §3), what SIZE after a copy proves (`evidence`) and what a finished copy
//! makes of its member (`ledger`), the validation of user input, and the retry/backoff
//! arithmetic (RULES.md §5).
//!
//! Pure: no I/O, no clock (callers pass `now`), no randomness (callers pass the jitter draw).

pub mod event;
pub mod evidence;
pub mod ftpurl;
pub mod glob;
pub mod hostlimit;
pub mod intent;
pub mod lease;
pub mod ledger;
pub mod model;
pub mod proof;
pub mod refusal;
pub mod reply;
pub mod resume;
pub mod retention;
pub mod retry;
pub mod route;
pub mod scrub;
pub mod state;
pub mod time;
pub mod tls;
pub mod tree;
pub mod watch;
pub mod window;

pub use intent::{Decision, Evidence, Intent, Probe};
pub use model::*;
pub use retry::{RetryBounds, RetryDecision, RetryPolicy};
pub use state::{transition, InvalidTransition, JobEvent, JobOutcome, JobState, MemberState};
pub use time::Timestamp;
pub use tls::{EndpointTls, TlsPolicy};
