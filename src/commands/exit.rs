//! How poolctl exits: the statuses every command and the binary share, in one place.

/// How the process should exit when a command did not fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    Success,
    /// `plan --detailed-exitcode` found changes.
    Changes,
}

impl Exit {
    /// The exit status: 0, or 2 for changes pending.
    pub fn code(self) -> u8 {
        match self {
            Self::Success => 0,
            Self::Changes => 2,
        }
    }
}

/// The exit status of a command that failed, and of a usage error (clap's own 2 would read as
/// "changes pending" to `plan --detailed-exitcode` callers).
pub const EXIT_ERROR: u8 = 1;
