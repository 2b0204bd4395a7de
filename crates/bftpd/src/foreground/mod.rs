//! The two foreground operations of RULES.md §7, run for a caller who waits: `verify`
//! (can these two servers copy to each other?) and `transfer` (copy now, streaming each
//! file's result).

mod transfer;
mod verify;

pub use transfer::transfer;
pub use verify::verify;
