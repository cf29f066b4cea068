//! Integration tests, one module per area, built as a single test binary.

mod source;
