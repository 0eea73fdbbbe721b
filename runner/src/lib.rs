//! execbox runner library.
