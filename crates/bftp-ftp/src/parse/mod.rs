//! Pure parsers for what FTP servers send, and formatters for what we send them.
//!
//! Every function here is total: bytes or text in, a value or a typed error out,
//! never a panic, whatever the server sends. "Need more bytes" is a value
//! ([`Parsed::NeedMore`]), not an error. No I/O: the session feeds the bytes.
//!
//! - [`reply`]: control-connection replies (RFC 959 §4.2), single- and multi-line, with limits.
//! - [`address`]: 227 PASV and 229 EPSV replies; PORT and EPRT arguments (RFC 959, RFC 2428).
//! - [`listing`]: NLST lines (with RFC 1068's BSD quirks) and MLSD lines (RFC 3659).
//! - [`facts`]: SIZE and MDTM replies, MLSD `size`/`modify` values.
//! - [`digest`]: what FEAT offers for proofs (HASH, X commands, SIZE); HASH and XSHA256-style replies.
//! - [`unix_list`]: LIST in the Unix `ls -l` format (servers without MLSD), for directory walks.
//! - [`name`]: checking server-supplied names (RULES.md §8) and the daemon's own wildcard matcher.

pub mod address;
pub mod digest;
pub mod facts;
pub mod listing;
pub mod name;
pub mod reply;
mod text;
pub mod unix_list;

pub use address::{
    eprt_argument, is_privileged_port, parse_epsv, parse_pasv, port_argument, AddressError,
};
pub use bftp_core::glob::{glob_match, is_glob_pattern};
pub use facts::{parse_mdtm_reply, parse_pwd_reply, parse_size_reply, FactError, ModifyTime};
pub use listing::{
    parse_mlsd, parse_mlsd_line, parse_nlst, EntryKind, MlsdEntry, MlsdError, MlsdLine,
    MlsdListing, NlstLine, NlstListing, NlstParser, RejectedLine, SkipReason,
};
pub use name::{check_argument, member_name, validate_server_path, NameError};
pub use reply::{parse_reply, stou_file_name, Parsed, Reply, ReplyError, ReplyLimits, ReplyParser};

#[cfg(test)]
mod hostile;
