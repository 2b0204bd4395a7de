//! The FTP side of bftp: parsing what servers say ([`parse`], pure). The session layer and
//! the third-party transfer engine come next.

pub mod parse;

pub use parse::{AddressError, FactError, MlsdError, NameError, ReplyError};

/// Everything that can fail in the parsers. They return their own, narrower enums;
/// this one gathers them for callers that do not care which parser failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Reply(#[from] ReplyError),
    #[error(transparent)]
    Address(#[from] AddressError),
    #[error(transparent)]
    Name(#[from] NameError),
    #[error(transparent)]
    Fact(#[from] FactError),
    #[error(transparent)]
    Mlsd(#[from] MlsdError),
}
