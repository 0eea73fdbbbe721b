//! Wire types of the execbox runner protocol.
