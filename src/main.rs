//! The `poolctl` binary: arguments -> tracing -> run -> exit code.

fn main() {}
